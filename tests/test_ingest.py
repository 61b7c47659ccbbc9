"""Ingestion end to end: serial vs Dask, idempotence, empty documents, progress, crash safety."""

import json
import logging
import os
import re
import time
from pathlib import Path

import pytest
from conftest import kill_once

from npmcore.cluster import ClusterError, dask_client
from npmcore.corpus.ingest import ingest, plan_partitions
from npmcore.corpus.inputs import input_bytes
from npmcore.corpus.partitions import IngestConfig
from npmcore.corpus.readers import CorpusError
from npmcore.progress import shard_progress
from npmcore.snapshots import read_blocks
from npmcore.storage import SnapshotError, list_snapshots, open_snapshot

CONFIG = IngestConfig(pages_per_partition=25)


@pytest.fixture(scope="module")
def serial_snapshot(tmp_path_factory, default_inputs) -> str:
    return ingest(default_inputs, str(tmp_path_factory.mktemp("serial")), CONFIG)


@pytest.mark.slow
def test_dask_and_single_process_give_identical_snapshots(tmp_path, serial_snapshot, default_inputs, dask_scheduler):
    """The default corpus (dump and news) through both. In the default suite: the same ingest on Dask and in one
    process for a month of news (tests/test_news.py::test_dask_workers_give_the_same_snapshot)."""
    with dask_client(dask_scheduler) as client:
        parallel = ingest(default_inputs, str(tmp_path), CONFIG, client)
    a, b = open_snapshot(serial_snapshot), open_snapshot(parallel)
    assert a.id == b.id and a.files == b.files and a.counts == b.counts
    assert a.counts["shards"] >= 5  # several partitions really ran on the two workers
    assert [t.to_pylist() for t in read_blocks(serial_snapshot)] == [t.to_pylist() for t in read_blocks(parallel)]


def test_snapshot_content(serial_snapshot, default_inputs):
    manifest = open_snapshot(serial_snapshot)
    assert [i["format"] for i in manifest.inputs] == ["mediawiki", "lines"]
    rows = [row for table in read_blocks(serial_snapshot) for row in table.to_pylist()]
    assert len(rows) == manifest.counts["blocks"]
    assert sum(len(r["token_ids"]) for r in rows) == manifest.counts["tokens"]
    assert max(len(r["token_ids"]) for r in rows) <= 256
    assert len({r["block_id"] for r in rows}) == len(rows)
    assert {r["source"] for r in rows} == {
        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened",
        "lee_background",
    }
    assert sum(1 for r in rows if r["source"] == "lee_background" and r["block_index"] == 0) == 300


def test_rerun_with_same_inputs_reuses_the_snapshot(serial_snapshot, default_inputs):
    store = serial_snapshot.rsplit("/corpus/", 1)[0]
    before = Path(serial_snapshot, "manifest.json").stat().st_mtime_ns
    start = time.perf_counter()
    assert ingest(default_inputs, store, CONFIG) == serial_snapshot
    assert time.perf_counter() - start < 10
    assert Path(serial_snapshot, "manifest.json").stat().st_mtime_ns == before


def test_empty_documents_are_counted_and_an_all_empty_corpus_is_refused(tmp_path):
    docs = [{"id": "a", "title": "A", "text": "Some text. More text."}, {"id": "b", "title": "B", "text": "  "}]
    good = tmp_path / "docs.jsonl"
    good.write_text("".join(json.dumps(d) + "\n" for d in docs))
    manifest = open_snapshot(ingest([str(good)], str(tmp_path / "store")))
    assert (manifest.counts["docs"], manifest.counts["empty_docs"], manifest.counts["blocks"]) == (2, 1, 1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps(docs[1]) + "\n")
    with pytest.raises(CorpusError, match="no document with text"):
        ingest([str(empty)], str(tmp_path / "store2"))
    assert list_snapshots(str(tmp_path / "store2"), "corpus") == []


def test_wrong_format_fails_with_the_file_name(tmp_path, news_path):
    with pytest.raises(CorpusError, match="lee_background.cor: not a MediaWiki XML dump"):
        ingest([news_path], str(tmp_path), IngestConfig(format="mediawiki"))
    assert list_snapshots(str(tmp_path), "corpus") == []


def test_progress_lines_count_the_inputs_bytes_done_of_their_total_and_the_time_left(tmp_path, news_path, caplog):
    """The inputs' bytes are known before any is read: each line says how far through them the ingest is."""
    caplog.set_level(logging.INFO, logger="npmcore.progress")
    total = input_bytes([news_path])
    assert total == os.path.getsize(news_path) == 360_082
    with shard_progress("ingesting", total, terminal=False) as on_shard:
        ingest([news_path], str(tmp_path), IngestConfig(partition_bytes=40_000), on_shard=on_shard)  # 10 shards
    lines = [r.getMessage() for r in caplog.records if r.name == "npmcore.progress"]
    first = r"ingesting: 40,000 of 360,082 bytes \(11%\), .* s elapsed, about .* left; shards 1 docs .*"
    assert re.fullmatch(first, lines[0]), lines
    assert lines[-1].startswith("ingesting: 360,082 of 360,082 bytes (100%), ") and "left" not in lines[-1], lines
    assert lines[-1].endswith("; shards 10 docs 300 blocks 422 tokens 74,024"), lines


def test_a_dumps_partitions_share_its_bytes_as_they_are_read(dump_path):
    """A dump's pages are streamed, so its partitions are not known up front; its bytes are: each partition
    stands for the compressed bytes read for its pages."""
    parts = list(plan_partitions([dump_path], ["mediawiki"], CONFIG))
    assert len(parts) == 5 and all(p.input_bytes >= 0 for p in parts)
    assert sum(p.input_bytes for p in parts) == os.path.getsize(dump_path) == input_bytes([dump_path])


def test_unreachable_scheduler_fails_fast():
    start = time.perf_counter()
    with (
        pytest.raises(ClusterError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"),
        dask_client("tcp://127.0.0.1:9", timeout_s=2),
    ):
        pass
    assert time.perf_counter() - start < 15


@pytest.mark.slow
def test_killed_run_leaves_no_valid_snapshot(tmp_path, news_path):
    """SIGKILLed as its third shard is written. In the default suite: an ingest SIGKILLed at the worst moment, inside
    its commit, publishes nothing and its rerun completes (tests/test_faults.py::test_a_write_killed_in_its_commit_
    publishes_nothing_and_the_rerun_is_identical)."""
    store = tmp_path / "store"
    config = IngestConfig(partition_bytes=20_000)  # about 25 partitions of the news file
    script = "from npmcore.corpus.ingest import ingest\nfrom npmcore.corpus.partitions import IngestConfig\n"
    script += f"ingest([{news_path!r}], {str(store)!r}, {config!r})\n"
    kill_once(script, store, "corpus/.tmp-*/blocks/part-00002.parquet", timeout_s=120)
    assert list_snapshots(str(store), "corpus") == []
    staging = next(store.glob("corpus/.tmp-*"))
    with pytest.raises(SnapshotError, match="manifest.json is missing"):
        open_snapshot(str(staging))
    # A new run completes and yields a verified snapshot.
    url = ingest([news_path], str(store), config)
    assert open_snapshot(url).counts["docs"] == 300
