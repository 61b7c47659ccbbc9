"""Document-grouped batching: on a real news snapshot and on synthetic document sizes,
checked against brute-force references."""

import itertools
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.model.batching import _shard_documents, by_length, group_documents, iter_batches
from npmcore.snapshots import read_blocks
from npmcore.storage import SnapshotError

COLUMNS = ["block_id", "doc_id", "block_index", "token_ids", "title_tokens"]
Block = tuple[str, int]  # (doc_id, block_index)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory, news_path) -> str:
    # 64-token blocks give multi-block documents; 64 KiB partitions give several shards.
    return ingest(
        [news_path], str(tmp_path_factory.mktemp("news")), IngestConfig(max_tokens=64, partition_bytes=64 << 10)
    )


@pytest.fixture(scope="module")
def rows(snapshot) -> dict[str, dict]:
    """Every block of the snapshot by block_id, read whole with the ingest reader."""
    return {r["block_id"]: r for table in read_blocks(snapshot, columns=COLUMNS) for r in table.to_pylist()}


def doc_sizes(rows: dict[str, dict]) -> dict[str, int]:
    return dict(Counter(r["doc_id"] for r in rows.values()))


def as_blocks(batch) -> list[Block]:
    return [(d, int(b.rsplit("#", 1)[1])) for d, b in zip(batch.doc_ids, batch.block_ids, strict=True)]


def check_grouping(batches: list[list[Block]], sizes: dict[str, int], batch_size: int) -> None:
    """Every block once; a document's first n // batch_size * batch_size blocks fill that many
    consecutive batches alone, in order; the rest of it (or a short document) is in one batch."""
    flat = [b for batch in batches for b in batch]
    assert sorted(flat) == sorted((d, i) for d, n in sizes.items() for i in range(n))
    assert all(1 <= len(batch) <= batch_size for batch in batches)
    batch_of = {block: k for k, batch in enumerate(batches) for block in batch}
    for d, n in sizes.items():
        full = n // batch_size
        ks = [batch_of[(d, j * batch_size)] for j in range(full)]
        assert ks == list(range(ks[0], ks[0] + full)) if full else True
        for j, k in enumerate(ks):
            assert batches[k] == [(d, j * batch_size + t) for t in range(batch_size)]
        rest = [(d, i) for i in range(full * batch_size, n)]
        assert len({batch_of[b] for b in rest}) <= 1, f"document {d} split across batches"


# --- the pure grouping step ---------------------------------------------------------------


def reference_grouping(sizes: list[int], batch_size: int, pool_batches: int) -> list[list[Block]]:
    """Brute force: the exact fill is the smallest bitmask over later units (older units first)."""
    out, pool = [], []

    def exact(pool):
        rest = pool[1:]
        for mask in range(1 << len(rest)):
            chosen = [u for i, u in enumerate(rest) if mask >> i & 1]
            if len(pool[0]) + sum(map(len, chosen)) == batch_size:
                return [pool[0], *chosen]
        return None

    def first_fit(pool):
        chosen = []
        for u in pool:
            if sum(map(len, chosen)) + len(u) <= batch_size:
                chosen.append(u)
        return chosen

    def drain(limit):
        while pool:
            chosen = exact(pool) if sum(map(len, pool)) >= batch_size else None
            if chosen is None:
                if sum(map(len, pool)) < limit:
                    return
                chosen = first_fit(pool)
            out.append([b for u in chosen for b in u])
            for u in chosen:
                pool.remove(u)

    for d, n in enumerate(sizes):
        blocks = [(str(d), i) for i in range(n)]
        while len(blocks) >= batch_size:
            out.append(blocks[:batch_size])
            blocks = blocks[batch_size:]
        if blocks:
            pool.append(blocks)
            drain(pool_batches * batch_size)
    drain(0)
    return out


def synthetic(seed: int, n_docs: int, mean: float) -> list[tuple[str, list[Block]]]:
    rng = np.random.default_rng(seed)
    return [(str(d), [(str(d), i) for i in range(int(n))]) for d, n in enumerate(rng.geometric(1 / mean, n_docs))]


@pytest.mark.parametrize(
    "batch_size,pool_batches,mean", [(2, 1, 1.5), (4, 1, 3), (5, 2, 3), (6, 2, 2), (8, 3, 6), (16, 2, 4)]
)
def test_grouping_matches_brute_force_and_keeps_documents_together(batch_size, pool_batches, mean):
    for seed in range(4):
        docs = synthetic(seed, 150, mean)
        batches = list(group_documents(docs, batch_size, pool_batches))
        assert batches == reference_grouping([len(b) for _, b in docs], batch_size, pool_batches)
        check_grouping(batches, {d: len(b) for d, b in docs}, batch_size)


def test_grouping_is_exact_when_it_can_be():
    # Documents of 1 or 2 blocks: a pool whose oldest unit is the only 1 cannot make 8 exactly,
    # but the default pool (64 blocks) always sees another 1 before it is full.
    docs = [(str(d), [(str(d), i) for i in range(random.Random(d).choice([1, 2]))]) for d in range(501)]
    batches = list(group_documents(docs, 8))
    assert [len(b) for b in batches[:-1]] == [8] * (len(batches) - 1) and 0 < len(batches[-1]) < 8


def test_grouping_never_splits_when_exact_batches_are_impossible():
    docs = [(str(d), [(str(d), i) for i in range(3)]) for d in range(40)]
    batches = list(group_documents(docs, 4, pool_batches=2))
    assert [len(b) for b in batches] == [3] * 40
    check_grouping(batches, {d: 3 for d, _ in docs}, 4)


def test_grouping_refuses_bad_arguments():
    with pytest.raises(ValueError, match="batch_size must be >= 2.*got 1"):
        group_documents([], 1)
    with pytest.raises(ValueError, match="pool_batches must be >= 1, got 0"):
        group_documents([], 4, pool_batches=0)
    with pytest.raises(ValueError, match="document 'b' has no blocks"):
        list(group_documents([("a", [1]), ("b", [])], 4))


def test_shard_blocks_must_be_consecutive_and_in_order():
    def table(doc_ids, block_index):
        ids = [f"{d}#{i}" for d, i in zip(doc_ids, block_index, strict=True)]
        return pa.table(
            {
                "block_id": ids,
                "doc_id": doc_ids,
                "block_index": block_index,
                "token_ids": [[0]] * len(ids),
                "title_tokens": [0] * len(ids),
            }
        )

    rng = np.random.default_rng(0)
    docs = _shard_documents(table(["a", "a", "b"], [0, 1, 0]), "ok", rng)
    assert sorted((d, len(r)) for d, r in docs) == [("a", 2), ("b", 1)]
    with pytest.raises(ValueError, match="part-1: the blocks of a document are not consecutive"):
        _shard_documents(table(["a", "b", "a"], [0, 0, 1]), "part-1", rng)
    with pytest.raises(ValueError, match="part-2: block a#2 is out of order in document 'a'"):
        _shard_documents(table(["a", "a"], [0, 2]), "part-2", rng)


# --- batches of a real corpus snapshot ------------------------------------------------------


@pytest.mark.parametrize("batch_size", [4, 16])
def test_every_block_once_and_documents_together(snapshot, rows, batch_size):
    batches = list(iter_batches(snapshot, batch_size, seed=1, drop_last=False))
    check_grouping([as_blocks(b) for b in batches], doc_sizes(rows), batch_size)
    for batch in batches:
        assert batch.token_ids == [rows[b]["token_ids"] for b in batch.block_ids]
        assert batch.doc_ids == [rows[b]["doc_id"] for b in batch.block_ids]
        assert batch.title_tokens == [rows[b]["title_tokens"] for b in batch.block_ids]
    kept = list(iter_batches(snapshot, batch_size, seed=1))
    assert kept == [b for b in batches if len(b.block_ids) == batch_size]


def test_only_the_last_batch_is_incomplete_at_a_comfortable_batch_size(snapshot, rows):
    batches = list(iter_batches(snapshot, 32, seed=0, drop_last=False))
    assert [len(b.block_ids) for b in batches[:-1]] == [32] * (len(batches) - 1)
    assert len(batches) == -(-len(rows) // 32)


def reference_batches(snapshot: str, batch_size: int, seed: int, epoch: int) -> list[list[str]]:
    """The whole corpus in memory: shuffle shards, then documents within each, then group."""
    rng = np.random.default_rng([seed, epoch])
    tables = [t.to_pylist() for t in read_blocks(snapshot, columns=COLUMNS)]
    docs = []
    for i in rng.permutation(len(tables)):
        shard = [(d, list(rs)) for d, rs in itertools.groupby(tables[i], key=lambda r: r["doc_id"])]
        docs += [shard[k] for k in rng.permutation(len(shard))]
    return [[r["block_id"] for r in batch] for batch in group_documents(docs, batch_size) if len(batch) == batch_size]


@pytest.mark.parametrize("batch_size,seed,epoch", [(8, 0, 0), (16, 5, 2)])
def test_streaming_matches_the_whole_corpus_reference(snapshot, batch_size, seed, epoch):
    got = [b.block_ids for b in iter_batches(snapshot, batch_size, seed, epoch)]
    assert got == reference_batches(snapshot, batch_size, seed, epoch)


def test_same_seed_same_batches_other_epoch_or_seed_other_order(snapshot):
    first = list(iter_batches(snapshot, 16, seed=3))
    assert list(iter_batches(snapshot, 16, seed=3)) == first
    for other in (iter_batches(snapshot, 16, seed=3, epoch=1), iter_batches(snapshot, 16, seed=4)):
        batches = list(other)
        assert [b.block_ids for b in batches] != [b.block_ids for b in first]
        assert {d for b in batches for d in b.doc_ids} & {d for b in first for d in b.doc_ids}


def test_bad_arguments_fail_before_iteration(snapshot, rows):
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        iter_batches(snapshot, 1, seed=0)
    with pytest.raises(ValueError, match=f"has {len(rows)} blocks, fewer than batch_size={len(rows) + 1}"):
        iter_batches(snapshot, len(rows) + 1, seed=0)


def test_a_corrupt_shard_is_refused(snapshot, tmp_path):
    copy = tmp_path / "snap"
    shutil.copytree(snapshot, copy)
    shard = max(Path(copy, "blocks").glob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match=f"checksum mismatch in blocks/{shard.name}"):
        list(iter_batches(str(copy), 8, seed=0))


def test_by_length_rebatches_each_pool_into_batches_of_similar_length(snapshot):
    def rows(batches):
        return sorted(r for b in batches for r in zip(b.block_ids, b.doc_ids, map(tuple, b.token_ids), b.title_tokens))

    def padded(batches):
        return sum(len(b.token_ids) * max(map(len, b.token_ids)) for b in batches)

    batches = list(iter_batches(snapshot, 8, seed=0))
    rebatched = list(by_length(batches, 4, seed=0, epoch=0))
    assert [len(b.block_ids) for b in rebatched] == [8] * len(batches)
    for lo in range(0, len(batches), 4):  # each pool keeps its blocks, now cut by length
        pool, new = batches[lo : lo + 4], rebatched[lo : lo + 4]
        assert rows(pool) == rows(new)
        spans = sorted((min(map(len, b.token_ids)), max(map(len, b.token_ids))) for b in new)
        assert all(hi <= next_lo for (_, hi), (next_lo, _) in zip(spans, spans[1:]))
    assert padded(rebatched) < padded(batches)
    assert rebatched == list(by_length(batches, 4, seed=0, epoch=0))
