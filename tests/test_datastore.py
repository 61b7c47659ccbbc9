"""The datastore of the shared news index: every content token once, its vector the encoder's;
resumable, verified, and the same whether built by the Dask flow or in one process."""

import json
import shutil

import numpy as np
import pytest
from conftest import kill_once
from cpu import AMX, AVX2, pretend_flags
from reference import corpus_blocks

from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.encoder import encode, load_encoder
from npmcore.index.datastore import build_datastore, plan_datastore
from npmcore.index.indexer import IndexConfig, build_index
from npmcore.snapshots import DatastoreRows, iter_shards, open_datastore, open_index
from npmcore.storage import SnapshotError, open_snapshot


@pytest.fixture(scope="module")
def serial_datastore(news_store, tmp_path_factory) -> str:
    """The shared corpus embedded again in this process, without Dask, in the shared datastore's precision."""
    store = tmp_path_factory.mktemp("serial")
    corpus = shutil.copytree(news_store.corpus, store / "corpus" / news_store.corpus.rsplit("/", 1)[1])
    return build_datastore(str(corpus), str(store), precision="f32")


def test_datastore_holds_every_content_token(news_store, tokenizer):
    blocks = corpus_blocks(news_store.corpus)
    shards = list(iter_shards(news_store.datastore))
    assert len(shards) == open_snapshot(news_store.corpus).counts["shards"] >= 3
    tokens = np.concatenate([a["tokens"] for _, a in shards])
    assert tokens.tolist() == [t for b in blocks for t in b]
    assert sum(len(a["offsets"]) - 1 for _, a in shards) == len(blocks)
    _, model = load_encoder()
    first = encode(model, tokenizer, [[tokenizer.cls_token_id, *blocks[0], tokenizer.sep_token_id]])[0][1:-1]
    np.testing.assert_allclose(shards[0][1]["vectors"][: len(blocks[0])], first, atol=2e-2, rtol=1e-2)  # float16


def test_datastore_rows_are_read_across_shard_boundaries(news_store):
    vectors = np.concatenate([a["vectors"] for _, a in iter_shards(news_store.datastore)]).astype(np.float32)
    rows = DatastoreRows(news_store.datastore)
    n, inner = len(vectors), [int(b) for b in rows.first[1:-1]]
    assert inner and rows.first[-1] == n
    for lo, hi in [(0, 1), (0, n), (n - 1, n), *((b - 3, b + 2) for b in inner), *((b, b + 1) for b in inner)]:
        np.testing.assert_array_equal(rows.rows(lo, hi), vectors[lo:hi])
    for lo, hi in [(5, 5), (n - 1, n + 1), (-1, 2)]:
        with pytest.raises(ValueError, match="no rows"):
            rows.rows(lo, hi)


def test_the_dask_flow_and_one_process_embed_alike(news_store, serial_datastore):
    assert serial_datastore.rsplit("/", 1)[1] == news_store.datastore.rsplit("/", 1)[1]  # the same content address
    for (_, mine), (_, theirs) in zip(iter_shards(news_store.datastore), iter_shards(serial_datastore), strict=True):
        np.testing.assert_array_equal(mine["tokens"], theirs["tokens"])
        np.testing.assert_allclose(mine["vectors"], theirs["vectors"], atol=2e-2)


def test_resume_after_a_killed_shard_equals_a_clean_build(news_store, serial_datastore, tmp_path):
    store = tmp_path / "store"
    copy = str(shutil.copytree(news_store.corpus, store / "corpus" / news_store.corpus.rsplit("/", 1)[1]))
    build = f"build_datastore({copy!r}, {str(store)!r}, precision='f32')"
    script = f"from npmcore.index.datastore import build_datastore\n{build}\n"
    kill_once(script, store, "datastore/.partial-*/shards/part-*.json")  # killed once a shard is finished
    marker = next(store.glob("datastore/.partial-*/shards/part-*.json"))
    done_at = marker.stat().st_mtime_ns
    with pytest.raises(SnapshotError):
        open_snapshot(str(marker.parent.parent))
    finished_before = {p.stem for p in marker.parent.glob("*.json")}
    results = []
    resumed = build_datastore(copy, str(store), on_shard=results.append, precision="f32")
    assert {r.name for r in results if r.resumed} == finished_before  # no finished shard is embedded again
    assert marker.exists() is False  # the staging folder became the snapshot
    assert (store / "datastore" / resumed.rsplit("/", 1)[1] / "shards" / marker.name).stat().st_mtime_ns == done_at
    assert open_snapshot(resumed).files == open_snapshot(serial_datastore).files  # identical to the clean build


def test_a_corrupted_datastore_shard_is_refused(news_store, tmp_path):
    broken = tmp_path / "datastore" / "broken"
    shutil.copytree(news_store.datastore, broken)
    with open(broken / "shards" / "part-00001" / "vectors.npy", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02")
    with pytest.raises(SnapshotError, match="checksum mismatch in shards/part-00001/vectors.npy"):
        build_index(str(broken), IndexConfig(factory="Flat"))


def test_a_shard_without_blocks_is_embedded_and_indexed(tmp_path):
    docs = [
        {"id": "a", "title": "Thessaloniki", "text": "Thessaloniki is the second-largest city in Greece."},
        {"id": "b", "title": "Empty", "text": "   "},
        {"id": "c", "title": "Athens", "text": "Athens is the capital of Greece."},
    ]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    store = str(tmp_path / "store")
    corpus = ingest([str(path)], store, IngestConfig(partition_bytes=70))
    assert open_snapshot(corpus).counts["blocks"] == 2
    datastore = build_datastore(corpus, store)
    sizes = [len(a["vectors"]) for _, a in iter_shards(datastore)]
    assert 0 in sizes and sum(size > 0 for size in sizes) == 2
    npm = NPM(build_index(datastore, IndexConfig(factory="Flat")))
    answers = npm.predict(["Athens is the capital of [MASK]."], InferenceConfig(restrict=False, k=8))[0]
    assert answers and {e.block for a in answers for e in a.evidence} <= {0, 1}


@pytest.mark.cpu
def test_the_precision_is_in_the_datastores_id_and_lineage_and_reuse_never_mixes_two(tmp_path, monkeypatch):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": "a", "title": "Athens", "text": "Athens is the capital of Greece."}) + "\n")
    store = str(tmp_path / "store")
    corpus = ingest([str(path)], store)
    datastore = build_datastore(corpus, store, precision="f32")
    assert open_datastore(datastore).precision == "f32"
    assert open_index(build_index(datastore, IndexConfig(factory="Flat"))).precision == "f32"
    pretend_flags(monkeypatch, AVX2)  # no bf16 units: auto is f32
    assert plan_datastore(corpus, store, precision="auto").id == datastore.rsplit("/", 1)[1]  # resolved first
    pretend_flags(monkeypatch, AMX)
    bf16 = plan_datastore(corpus, store, precision="bf16")
    assert bf16.precision == "bf16" and bf16.id != datastore.rsplit("/", 1)[1]
    with pytest.raises(ValueError, match=f"datastore {datastore} was embedded in f32, not bf16"):
        plan_datastore(corpus, store, reuse=datastore, precision="bf16")
