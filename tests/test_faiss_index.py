"""FAISS indexes and index snapshots on the shared news datastore: merged IVF shards equal a
single build; compact indexes are searchable; broken files are refused."""

import shutil

import faiss
import numpy as np
import pytest
from reference import QUERIES

from npmcore.faiss_index import (
    add_all,
    add_shard,
    default_factory,
    default_train_size,
    finalize,
    is_ivf,
    merge_ivf,
    search,
    train_index,
)
from npmcore.indexer import IndexConfig, build_index, plan_index, training_sample
from npmcore.inference import NPM, InferenceConfig
from npmcore.snapshots import iter_shards
from npmcore.storage import SnapshotError


def test_merged_ivf_index_equals_a_single_shot_build(news_store, tmp_path):
    trained = train_index("IVF16,PQ8np", training_sample(news_store.datastore, 4000))
    shards = list(iter_shards(news_store.datastore))
    paths = []
    for i, (first, arrays) in enumerate(shards):
        paths.append(str(tmp_path / f"{i}.faiss"))
        faiss.write_index(add_shard(trained, arrays["vectors"], first), paths[-1])
    single = finalize(add_all(faiss.clone_index(trained), [(f, a["vectors"]) for f, a in shards]))
    in_memory = finalize(merge_ivf(trained, paths))
    on_disk = finalize(merge_ivf(trained, paths, str(tmp_path / "lists.ivfdata")))
    queries = np.asarray(shards[0][1]["vectors"][:50], dtype=np.float32)
    for index in (single, in_memory, on_disk):
        faiss.extract_index_ivf(index).nprobe = 4
    D, I = search(single, queries, 20)
    for merged in (in_memory, on_disk):
        D2, I2 = search(merged, queries, 20)
        np.testing.assert_array_equal(I, I2)
        np.testing.assert_array_equal(D, D2)
        ids = np.arange(0, merged.ntotal, 97)
        np.testing.assert_array_equal(single.reconstruct_batch(ids), merged.reconstruct_batch(ids))


@pytest.mark.parametrize("tokens", [15_000, 30_000_000])
def test_the_default_factory_is_a_rotated_pq_within_the_byte_budget(tokens):
    index = faiss.index_factory(384, default_factory(384, tokens), faiss.METRIC_INNER_PRODUCT)
    assert isinstance(faiss.downcast_index(index), faiss.IndexPreTransform)  # the OPQ rotation
    ivf_bytes = 16 if is_ivf(index) else 0  # a list entry's id and its direct-map entry
    assert index.sa_code_size() + ivf_bytes + 2 <= 64  # with a uint16 token id
    assert is_ivf(index) == (tokens > 20_000_000)


@pytest.mark.parametrize(
    ("tokens", "train_size"),
    [(15_000, 20_000), (683_959, 21_373), (2_000_000, 62_500), (13_098_336, 100_000)],  # the demo's: 683,959
)
def test_the_default_training_sample_is_sized_to_the_corpus(tokens, train_size):
    assert default_train_size(tokens) == train_size


def test_an_index_plan_records_its_training_size_in_its_id(news_store):
    sized, given = plan_index(news_store.datastore), plan_index(news_store.datastore, IndexConfig(train_size=20_000))
    assert sized.train_size == 20_000 and sized.id == given.id  # the news datastore is small: the least sample
    assert plan_index(news_store.datastore, IndexConfig(train_size=30_000)).id != sized.id


@pytest.mark.parametrize("factory", ["OPQ8,PQ8np", pytest.param(None, marks=pytest.mark.slow)])
def test_a_compact_index_snapshot_searches_its_own_decoded_vectors_exactly(news_store, factory):
    """A rotated PQ (None: the default factory, whose OPQ48 takes about a minute to train)
    against brute force over the vectors its codes decode to (IVF indexes: the merged-shards
    test above and the CLI test)."""
    url = build_index(news_store.datastore, IndexConfig(factory=factory, train_size=3_000, bm25=False))
    npm = NPM(url)
    answers = npm.predict(QUERIES[:2], InferenceConfig(restrict=False, k=256))
    assert all(len(a) == 5 for a in answers)
    assert npm.index.sa_code_size() + npm.corpus.tokens.itemsize <= 64  # a PQ code and a uint16 token id, no ids
    queries = npm.encode_queries(QUERIES, 2).reshape(-1, npm.index.d)
    decoded = npm.index.reconstruct_n(0, npm.index.ntotal)  # rotated back: inner products are unchanged
    scores, ids = search(npm.index, queries, 50)
    exact = queries @ decoded.T
    np.testing.assert_allclose(scores, np.take_along_axis(exact, ids, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :50], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="invalid FAISS index-factory string 'IVF16,PQ7x'"):
        build_index(news_store.datastore, IndexConfig(factory="IVF16,PQ7x"))


def test_a_corrupted_or_missing_index_file_is_an_error(news_store, tmp_path):
    broken = tmp_path / "index" / "broken"
    shutil.copytree(news_store.index, broken)
    with open(broken / "tokens.npy", "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01")
    with pytest.raises(SnapshotError, match="checksum mismatch in tokens.npy"):
        NPM(str(broken))
    (broken / "index.faiss").unlink()
    with pytest.raises(SnapshotError, match="index.faiss is missing"):
        NPM(str(broken))
