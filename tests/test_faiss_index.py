"""FAISS indexes and index snapshots on the shared news datastore: merged IVF shards equal a
single build; compact indexes are searchable; broken files are refused."""

import shutil

import faiss
import numpy as np
import pytest
from reference import QUERIES

from npmcore.faiss_index import add_all, add_shard, finalize, merge_ivf, search, train_index
from npmcore.indexer import IndexConfig, build_index, training_sample
from npmcore.inference import NPM, InferenceConfig
from npmcore.snapshots import iter_shards
from npmcore.storage import SnapshotError, open_snapshot


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


def test_the_default_compact_index_snapshot_is_searchable(news_store):
    """The default factory (IVF indexes: the merged-shards test above and the CLI test)."""
    url = build_index(news_store.datastore, IndexConfig(train_size=3_000, bm25=False))  # few vectors: a fast, coarse PQ
    assert open_snapshot(url).config["factory"] == "PQ48np"
    npm = NPM(url)
    answers = npm.predict(QUERIES[:2], InferenceConfig(restrict=False, k=256))
    assert all(len(a) == 5 for a in answers)
    assert npm.index.sa_code_size() + npm.corpus.tokens.itemsize <= 64  # a PQ code and a uint16 token id, no ids
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
