"""NPM inference on the shared news index, against brute-force references."""

import logging
import math
import shutil
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from reference import QUERIES, assert_same_answers, brute_force, corpus_blocks, corpus_texts, is_stopword

from npmcore.answer.evidence import Evidence
from npmcore.answer.inference import NPM, InferenceConfig, QueryError
from npmcore.answer.tokens import classify, label_token_ids, predict_tokens
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.encoder import load_encoder
from npmcore.evaluation.metrics import repeats_query
from npmcore.index.datastore import build_datastore
from npmcore.index.indexer import IndexConfig, build_index
from npmcore.snapshots import iter_shards
from npmcore.storage import SnapshotError
from npmcore.vocab import content_words_of


@pytest.fixture(scope="module")
def flat(news_store) -> NPM:
    return NPM(news_store.index)


@pytest.fixture(scope="module")
def stored(news_store) -> list[np.ndarray]:
    """The datastore's vectors of each block of the shared corpus."""
    blocks = corpus_blocks(news_store.corpus)
    return np.split(
        np.concatenate([a["vectors"] for _, a in iter_shards(news_store.datastore)]),
        np.cumsum([len(b) for b in blocks])[:-1],
    )


def test_flat_pipeline_equals_brute_force(flat, news_store, stored, tokenizer):
    blocks, texts = corpus_blocks(news_store.corpus), corpus_texts(news_store.corpus)
    config = InferenceConfig(k=200, l_max=10, tau=1.0, restrict=False, answers=5, scoring="npm")  # query words out
    q = flat.encode_queries(QUERIES, 2)
    for query, answers, (q_start, q_end) in zip(QUERIES, flat.predict(QUERIES, config), q, strict=True):
        reference = brute_force(
            blocks,
            stored,
            range(len(blocks)),
            q_start,
            q_end,
            flat.corpus.tables,
            200,
            10,
            1.0,
            tokenizer,
            words(query),
            texts,
        )
        assert_same_answers(answers, reference)


def test_restricted_mode_scores_exactly_the_tokens_of_the_top_bm25_passages(flat, news_store, stored, tokenizer):
    blocks, texts = corpus_blocks(news_store.corpus), corpus_texts(news_store.corpus)
    config = InferenceConfig(restrict=True, passages=3, tau=2.0, scoring="npm")
    q = flat.encode_queries(QUERIES, 2)
    for query, answers, (q_start, q_end) in zip(QUERIES, flat.predict(QUERIES, config), q, strict=True):
        top = flat.retrieval.bm25_blocks(query, 3)
        assert len(top) == 3  # the datastore's vectors, not the index's PQ codes
        reference = read_in(top, blocks, stored, texts, q_start, q_end, flat, tokenizer, query)
        assert_same_answers(answers, reference)
        assert {e.block for a in answers for e in a.evidence} <= set(top)


def test_a_query_read_in_given_passages_scores_exactly_their_tokens(flat, news_store, stored, tokenizer):
    """A check reads the passages its question searched: the blocks given, not its own top BM25 passages."""
    blocks, texts = corpus_blocks(news_store.corpus), corpus_texts(news_store.corpus)
    config = InferenceConfig(restrict=True, tau=2.0, scoring="npm")
    given = [sorted(set(flat.retrieval.bm25_blocks(q, 2) + flat.retrieval.bm25_blocks(other, 2))) for q, other in
             zip(QUERIES, QUERIES[::-1], strict=True)]  # fmt: skip
    q = flat.encode_queries(QUERIES, 2)
    found = flat.phrases(QUERIES, config, given)
    for query, phrases, mine, (q_start, q_end) in zip(QUERIES, found, given, q, strict=True):
        answers = flat.answers_from(query, phrases, config)
        assert_same_answers(answers, read_in(mine, blocks, stored, texts, q_start, q_end, flat, tokenizer, query))
        assert {e.block for a in answers for e in a.evidence} <= set(mine)


def read_in(top, blocks, stored, texts, q_start, q_end, flat, tokenizer, query):
    """The brute-force answers of a query read in every token of the blocks ``top`` (the paper's restricted mode, tau
    2.0), with the datastore's vectors."""
    everything = sum(len(blocks[b]) for b in top)
    vectors = {b: stored[b] for b in top}
    return brute_force(
        blocks, vectors, top, q_start, q_end, flat.corpus.tables, everything, 10, 2.0, tokenizer, words(query), texts
    )


@pytest.mark.parametrize("scoring", ["evidence", "npm"])
def test_phrases_rank_every_candidate_and_predict_answers_with_their_top(flat, scoring):
    configs = (InferenceConfig(restrict=True, answers=5), InferenceConfig(k=200, restrict=False, answers=5))
    for config in (replace(c, scoring=scoring) for c in configs):
        ranked = flat.phrases(QUERIES, config)
        for query, phrases, answers in zip(QUERIES, ranked, flat.predict(QUERIES, config), strict=True):
            assert len(phrases.scores) > len(answers) == 5
            assert np.all(np.diff(phrases.scores) <= 0) and math.isclose(phrases.scores.sum(), 1.0)
            shown = flat.pooled(phrases).phrases if scoring == "evidence" else phrases  # one answer per name
            top = [tuple(int(t) for t in ids[ids >= 0]) for ids in shown.token_ids[:5]]
            assert [a.token_ids for a in answers] == top
            assert [a.score for a in answers] == shown.scores[:5].tolist()
            assert flat.answers_from(query, phrases, config) == answers


def words(query: str) -> frozenset[str]:
    return content_words_of(query.replace("[MASK]", " "))


def test_answers_repeat_the_query_only_when_allowed(flat, news_store, stored, tokenizer):
    blocks, texts = corpus_blocks(news_store.corpus), corpus_texts(news_store.corpus)
    config = InferenceConfig(restrict=True, passages=3, answers=30, exclude_query_words=False, scoring="npm")
    q = flat.encode_queries(QUERIES, 2)
    allowed = flat.predict(QUERIES, config)
    for query, answers, (q_start, q_end) in zip(QUERIES, allowed, q, strict=True):
        top = flat.retrieval.bm25_blocks(query, 3)
        everything = sum(len(blocks[b]) for b in top)
        reference = brute_force(
            blocks, stored, top, q_start, q_end, flat.corpus.tables, everything, 10, 1.0, tokenizer, texts=texts
        )
        assert_same_answers(answers, reference, n=30)
    assert any(repeats_query(a.text, query) for query, found in zip(QUERIES, allowed) for a in found)
    excluded = flat.predict(QUERIES, replace(config, exclude_query_words=True))
    assert all(
        found and not any(repeats_query(a.text, query) for a in found) for query, found in zip(QUERIES, excluded)
    )


def test_an_index_without_its_datastore_encodes_bm25_passages_again(tmp_path, news_lines, caplog):
    path = tmp_path / "news.txt"
    path.write_text("\n".join(news_lines[:5]) + "\n")
    store = str(tmp_path / "store")
    datastore = build_datastore(ingest([str(path)], store), store)
    index = build_index(datastore, IndexConfig(factory="Flat"))
    stored = NPM(index).retrieval.restricted(QUERIES[:2], 3)
    (vectors_file,) = Path(datastore).glob("shards/*/vectors.npy")
    full = np.load(vectors_file)
    np.save(vectors_file, full[:-1])  # a datastore changed since: refused, not misread
    with pytest.raises(SnapshotError, match=r"cannot be read: its vectors have shape"):
        NPM(index).retrieval.restricted(QUERIES[:2], 3)
    shutil.rmtree(datastore)
    with caplog.at_level(logging.WARNING, logger="npmcore.answer.retrieval"):
        npm = NPM(index)
    assert "will encode their passages again" in caplog.text and datastore in caplog.text
    for (ids, vectors), (ref_ids, ref_vectors) in zip(npm.retrieval.restricted(QUERIES[:2], 3), stored, strict=True):
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_allclose(vectors, ref_vectors, atol=2e-2, rtol=1e-2)  # the datastore holds float16


def test_npm_single_sums_the_exact_top_k_by_token(flat, tokenizer):
    config = InferenceConfig(k=200, tau=0.5, restrict=False, answers=5)
    q = flat.encode_queries(QUERIES, 1)[:, 0] * flat.scale
    V = np.asarray(flat.retrieval.index.reconstruct_n(0, flat.retrieval.index.ntotal), dtype=np.float64)
    tokens = np.asarray(flat.corpus.tokens)
    for answers, qv in zip(predict_tokens(flat, QUERIES, config), q, strict=True):
        sims = V @ qv
        top = np.argsort(-sims)[:200]
        scores = defaultdict(float)
        for i in top:
            if not is_stopword(tokenizer, [int(tokens[i])]):
                scores[int(tokens[i])] += math.exp(sims[i] / 0.5)
        total = sum(scores.values())
        reference = sorted(((t, v / total) for t, v in scores.items()), key=lambda item: -item[1])[:5]
        assert [a.token_ids[0] for a in answers] == [t for t, _ in reference]
        np.testing.assert_allclose([a.score for a in answers], [v for _, v in reference], atol=1e-4)
        assert all(tokens[e.first] == a.token_ids[0] for a in answers for e in a.evidence)


def test_evidence_points_at_the_answer_in_the_passage(flat):
    answers = flat.predict(QUERIES[:1], InferenceConfig(restrict=True))[0]
    for answer in answers:
        best = flat.evidence.span(answer.evidence[0])
        assert best.text[best.start : best.end] == answer.text  # the answer is the passage's own text
        for evidence in answer.evidence:
            span = flat.evidence.span(evidence)
            spelled = flat.tokenizer(span.text[span.start : span.end], add_special_tokens=False)["input_ids"]
            assert tuple(spelled) == answer.token_ids and span.score == evidence.score


def test_answers_keep_hyphens_and_case_as_the_passage_writes_them(flat):
    """Decoding word pieces again would give "australian - based"; the passage says "Australian-based"."""
    tokens = np.asarray(flat.corpus.tokens)
    hyphen = flat.tokenizer.convert_tokens_to_ids("-")
    block_of = flat.corpus.block_of
    words = flat.corpus.tables.word_start
    inside = [  # "word-word": whole words either side, in one block
        int(i)
        for i in np.flatnonzero(tokens == hyphen)
        if len(set(block_of(np.array([i - 1, i, i + 1])).tolist())) == 1
        and words[tokens[i - 1]]
        and words[tokens[i + 1]]
    ]
    assert len(inside) > 5
    for i in inside[:5]:
        block = int(block_of(np.array([i]))[0])
        text = flat.evidence.surface(Evidence(block, i - 1, i + 1, 1.0))
        decoded = flat.tokenizer.decode(tokens[i - 1 : i + 2].tolist())
        assert "-" in text and " ".join(text.lower().replace("-", " - ").split()) == decoded, (text, decoded)
        assert text in flat.evidence.passage(block).text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("No mask in this sentence.", "exactly one \\[MASK\\], found 0"),
        ("[MASK] and [MASK].", "exactly one \\[MASK\\], found 2"),
        ("word " * 600 + "[MASK].", "longer than the encoder's limit of 512"),
    ],
)
def test_bad_queries_are_refused(flat, query, message):
    with pytest.raises(QueryError, match=message):
        flat.predict([query])


def test_an_index_refuses_another_tokenizer_and_another_encoders_knn_search(flat, roberta_dir, tmp_path):
    with pytest.raises(ValueError, match="another tokenizer"):
        NPM(flat.url, encoder=str(roberta_dir))
    tokenizer, model = load_encoder()
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.mul_(1.1)  # other weights, same tokenizer
    model.save_pretrained(tmp_path / "other")
    tokenizer.save_pretrained(tmp_path / "other")
    other = NPM(flat.url, encoder=str(tmp_path / "other"))
    with pytest.raises(ValueError, match="kNN search needs an index built with this encoder"):
        other.predict(QUERIES[:1], InferenceConfig(restrict=False))
    # BM25-restricted queries encode their passages again: they need no vectors of the index
    mine, reference = other.retrieval.restricted(QUERIES[:2], 3), flat.retrieval.restricted(QUERIES[:2], 3)
    for (ids, vectors), (ref_ids, ref_vectors) in zip(mine, reference, strict=True):
        np.testing.assert_array_equal(ids, ref_ids)
        assert not np.allclose(vectors, ref_vectors, atol=1e-3)  # this encoder's vectors
    assert [a.text for a in other.predict(QUERIES[:2], InferenceConfig(restrict=True, passages=3))[0]]


def test_a_roberta_encoder_answers_queries_written_with_the_mask_marker(tmp_path, news_lines, roberta_dir):
    path = tmp_path / "news.txt"
    path.write_text("\n".join(news_lines[:10]) + "\n")
    store = str(tmp_path / "store")
    corpus = ingest([str(path)], store, IngestConfig(encoder=roberta_dir))
    npm = NPM(build_index(build_datastore(corpus, store, encoder=roberta_dir), IndexConfig(factory="Flat")))
    assert npm.tokenizer.mask_token == "<mask>"
    for restrict in (True, False):
        answers = npm.predict(["The Prime Minister [MASK] said."], InferenceConfig(restrict=restrict, k=64))[0]
        assert len(answers) == 5 and all(a.text for a in answers)
    with pytest.raises(QueryError, match="write the mask as \\[MASK\\], not '<mask>'"):
        npm.predict(["The Prime Minister <mask> said."])


def test_verbalizers_keep_single_tokens_only(tokenizer, roberta_tokenizer):
    ids, dropped = label_token_ids(tokenizer, ["great", "terrible", "unputdownable", "good"])
    assert dropped == ["unputdownable"]
    assert sorted(tokenizer.convert_ids_to_tokens(ids.tolist())) == ["good", "great", "terrible"]
    ids, _ = label_token_ids(roberta_tokenizer, ["the"])
    pieces = roberta_tokenizer.convert_ids_to_tokens(ids.tolist())
    assert {"Ġthe", "the"} >= set(pieces) and "Ġthe" in pieces


def test_closed_set_scores_sum_the_retrieved_label_words(flat):
    words = [label_token_ids(flat.tokenizer, ["australia"])[0], label_token_ids(flat.tokenizer, ["police"])[0]]
    scores = classify(flat, QUERIES, words, config=InferenceConfig(k=300, tau=5.0))
    q = flat.encode_queries(QUERIES, 2).sum(axis=1) * flat.scale
    V = np.asarray(flat.retrieval.index.reconstruct_n(0, flat.retrieval.index.ntotal))
    for row, qv in zip(scores, q, strict=True):
        sims = V @ qv
        top = np.argsort(-sims)[:300]
        tokens = np.asarray(flat.corpus.tokens)[top]
        for y, ids in enumerate(words):
            hit = sims[top][np.isin(tokens, ids)] / 5.0
            expected = np.log(np.exp(hit).sum()) if len(hit) else -np.inf
            assert row[y] == pytest.approx(expected, abs=1e-4)


def test_answers_never_cut_a_word_of_their_passage(tokenizer):
    """word_edges against the reference's rule on every span of real text in several scripts: a span is a
    whole word (or words) of the text, less the punctuation around it, or it is no candidate."""
    from reference import cuts_a_word

    from npmcore.answer.evidence import _with_marks, word_edges

    text = (
        'Achilles (; Ancient Greek: Ἀχιλλεύς, "Akhilleus") held 13,000 U-boats of Myanmar\'s navy in 1942; '
        "Agni (Sanskrit: अग्नि), Tehran (Persian: تهران\u200e), Ananda (阿難) and Анато́лий Ка́рпов in 2005/6 "
        "and 1942–1945 at 8.4:1."
    )
    offsets = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]
    chars = [(a, _with_marks(text, b)) for a, b in offsets]
    starts, ends = word_edges(text, chars)
    for first in range(len(chars)):
        for last in range(first, min(first + 12, len(chars))):
            start, end = chars[first][0], chars[last][1]
            if _is_edge_token(text[slice(*chars[first])]) or _is_edge_token(text[slice(*chars[last])]):
                continue  # punctuation at either end: content_spans drops it before
            assert (starts[first] and ends[last]) == (not cuts_a_word(text, start, end)), text[start:end]
    whole = {
        text[chars[i][0] : chars[j][1]]
        for i in range(len(chars))
        for j in range(i, len(chars))
        if starts[i] and ends[j]
    }
    assert {"Ἀχιλλεύς", "13,000", "U-boats", "Myanmar's", "अग्नि", "تهران", "阿難", "Анато́лий Ка́рпов"} <= whole
    assert {"6", "1942", "1945", "8.4", "Myanmar"} <= whole
    assert not {"000", "boats", "阿", "अग्न"} & whole


def _is_edge_token(surface: str) -> bool:
    """A token of punctuation or symbols alone."""
    return not any(c.isalnum() for c in surface)
