"""Indexes of BM25 alone: what BM25-restricted NPM needs of a corpus, with nothing embedded."""

from pathlib import Path

import numpy as np
import pytest
from reference import QUERIES

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.tokens import classify, predict_tokens
from npmcore.index.bm25_index import build_bm25_index
from npmcore.snapshots import open_index
from npmcore.storage import SnapshotError


@pytest.fixture(scope="module")
def bm25_index(news_store) -> str:
    return build_bm25_index(news_store.corpus)


def test_holds_the_token_arrays_of_the_index_with_vectors_and_no_vectors(news_store, bm25_index):
    """The token ids, block offsets and block frequencies read from the corpus are those the datastore path
    gives (the index with vectors, the reference); no FAISS index, no datastore; built once."""
    alone, full = open_index(bm25_index), open_index(news_store.index)
    assert not alone.vectors and full.vectors and alone.datastore_id is None
    assert alone.manifest.config["factory"] == "BM25" and "index.faiss" not in alone.manifest.files
    assert alone.manifest.counts == full.manifest.counts
    assert alone.corpus == full.corpus
    for name in ("tokens.npy", "offsets.npy", "token_df.npy"):
        np.testing.assert_array_equal(np.load(Path(bm25_index) / name), np.load(Path(news_store.index) / name))
    assert alone.manifest.config["shard_blocks"] == full.manifest.config["shard_blocks"]
    assert build_bm25_index(news_store.corpus) == bm25_index  # content-addressed: nothing built again
    with pytest.raises(SnapshotError, match="holds BM25 alone"):
        alone.datastore


def test_answers_as_the_index_with_vectors_when_both_encode_their_passages(news_store, bm25_index):
    """The same BM25 passages and answers as the index with vectors whose passages are encoded again
    (its datastore left out), scores within float rounding."""
    alone, full = NPM(bm25_index), NPM(news_store.index)
    full.retrieval.stored = None  # the reference: the same passages encoded now, as the index of BM25 alone does
    for query in QUERIES:
        assert alone.retrieval.bm25_blocks(query, 3) == full.retrieval.bm25_blocks(query, 3)
    config = InferenceConfig(answers=5)
    for mine, theirs in zip(alone.predict(QUERIES, config), full.predict(QUERIES, config), strict=True):
        assert [a.text for a in mine] == [a.text for a in theirs]
        np.testing.assert_allclose([a.score for a in mine], [a.score for a in theirs], atol=1e-5)
        assert [a.evidence[0].block for a in mine] == [a.evidence[0].block for a in theirs]


def test_a_passage_is_encoded_once_per_process_and_read_back_as_it_was_encoded(news_store, bm25_index, monkeypatch):
    """Two indexes of the same corpus share their passages' vectors (the process's cache): the second encodes
    none, and every vector is the one an uncached encode gives."""
    from npmcore.answer import retrieval
    from npmcore.answer.passage_vectors import PassageVectors

    monkeypatch.setattr(retrieval, "PASSAGES", PassageVectors())
    alone, full = NPM(bm25_index), NPM(news_store.index)
    full.retrieval.stored = None  # it encodes its passages too
    blocks = sorted({b for query in QUERIES for b in alone.retrieval.bm25_blocks(query, 3)})
    first = alone.retrieval.block_vectors(blocks)
    assert len(retrieval.PASSAGES) == len(blocks)
    encoded = []
    monkeypatch.setattr(retrieval, "encode", lambda *args, **kwargs: encoded.append(args) or [])
    again = full.retrieval.block_vectors(blocks)  # no passage encoded: all found
    assert encoded == [] and all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    monkeypatch.undo()
    reference = NPM(bm25_index)
    monkeypatch.setattr(retrieval, "PASSAGES", PassageVectors(budget=0))  # nothing kept: encoded now
    for mine, theirs in zip(first, reference.retrieval.block_vectors(blocks), strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-5)


def test_knn_search_is_refused_with_what_to_build(bm25_index):
    npm = NPM(bm25_index)
    with pytest.raises(ValueError, match="holds BM25 alone.*npmcore index without --bm25-only"):
        npm.predict(QUERIES[:1], InferenceConfig(restrict=False))
    with pytest.raises(ValueError, match="holds BM25 alone"):
        classify(npm, ["It was [MASK]."], [np.array([2204])])
    assert predict_tokens(npm, QUERIES[:1])[0]  # NPM single restricted to BM25 passages needs no vectors either


def test_another_tokenizer_than_the_corpus_is_refused(news_store, roberta_dir):
    with pytest.raises(ValueError, match="another tokenizer"):
        build_bm25_index(news_store.corpus, roberta_dir)


def test_the_index_flow_builds_it_without_embedding(news_store, bm25_index):
    from flows.index import IndexParams, index_corpus

    params = IndexParams(store=news_store.store, corpus=news_store.corpus, vectors=False)
    assert index_corpus(params) == bm25_index
    with pytest.raises(ValueError, match="holds vectors"):
        index_corpus(params, previous=news_store.index)
