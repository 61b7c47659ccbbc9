"""Document-grouped training batches streamed from a corpus snapshot.

NPM draws positives and hard negatives from the other sequences of the same batch, so
the sequences (blocks) of one document go to the same batch and short documents are
grouped together (npm-method.md, "Training"). :func:`group_documents` does this:

* a document of n >= batch_size blocks yields n // batch_size full batches of
  consecutive blocks at once; its last n % batch_size blocks form a *unit*;
* a shorter document is one unit; units are never split across batches;
* units wait in a pool (oldest first). Whenever the oldest unit and some others sum to
  exactly batch_size (subset-sum, preferring older units) they are yielded as a batch.
  Exact sums do not always exist (batch_size 4 and documents of 3 blocks), so once the
  pool holds ``pool_batches * batch_size`` blocks, the oldest unit and the later ones
  that fit are yielded as an *incomplete* batch; at the end the rest is yielded so too.

Plain first-fit into a few open batches is not enough: on the 300 news articles cut
into 64-token blocks, batch_size 16 left 686 of 1630 blocks in incomplete batches; the
exact fill leaves 78 (most of the loss is inherent when documents are large relative
to the batch; at batch_size 32 only the final batch is incomplete).

:func:`iter_batches` streams a snapshot through it one shard at a time: memory holds
one shard plus the pool. With ``drop_last`` incomplete batches are dropped, so every
batch has exactly ``batch_size`` sequences (the count of dropped blocks is logged).
Order is deterministic given (seed, epoch): a ``numpy.random.default_rng([seed,
epoch])`` shuffles the shard order, then the document order within each shard as it is
read. Each shard's sha256 is checked against the manifest as it is read, so the corpus
is read once per epoch, not twice.
"""

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

import numpy as np
import pyarrow as pa

from npmcore.corpus.bundle import bundle_info, is_bundle, read_bundle
from npmcore.snapshots import open_corpus, read_shard

log = logging.getLogger(__name__)

POOL_BATCHES = 8  # pending pool size in batches; larger = fewer incomplete batches, more memory
COLUMNS = ["block_id", "doc_id", "block_index", "token_ids", "title_tokens"]
Item = TypeVar("Item")
BlockRow = tuple[str, str, list[int], int]  # (block_id, doc_id, token_ids, title_tokens) of one block


@dataclass(frozen=True)
class Batch:
    block_ids: list[str]  # "{doc_id}#{block_index}", one per sequence
    doc_ids: list[str]  # the document of each sequence
    token_ids: list[list[int]]  # encoder input ids with special tokens, one list per sequence
    title_tokens: list[int]  # per sequence, how many of its first non-special tokens spell "{title}. "


def group_documents(
    docs: Iterable[tuple[str, Sequence[Item]]], batch_size: int, pool_batches: int = POOL_BATCHES
) -> Iterator[list[Item]]:
    """Group documents' blocks into batches (see the module docstring for the rules).

    Args:
        docs: (doc_id, blocks) per document, in the order to batch them; blocks in order.
        batch_size: sequences per batch, >= 2 (in-batch positives need another sequence).
        pool_batches: the pending pool holds fewer than ``pool_batches * batch_size``
            blocks before an incomplete batch is forced, >= 1.

    Returns:
        Batches as lists of blocks: full ones of ``batch_size`` blocks, and incomplete
        ones where no exact fill was found in time and at the end.
    """
    _check_batch_size(batch_size)
    if pool_batches < 1:
        raise ValueError(f"pool_batches must be >= 1, got {pool_batches}")
    return _group(docs, batch_size, pool_batches * batch_size)


def _group(docs: Iterable[tuple[str, Sequence[Item]]], batch_size: int, pool_limit: int) -> Iterator[list[Item]]:
    pool: list[list[Item]] = []  # pending units, oldest first
    for doc_id, blocks in docs:
        if not blocks:
            raise ValueError(f"document {doc_id!r} has no blocks")
        n_full = len(blocks) // batch_size * batch_size
        for lo in range(0, n_full, batch_size):
            yield list(blocks[lo : lo + batch_size])
        if n_full < len(blocks):
            pool.append(list(blocks[n_full:]))
            yield from _drain(pool, batch_size, pool_limit)
    yield from _drain(pool, batch_size, 0)


def _drain(pool: list[list[Item]], batch_size: int, pool_limit: int) -> Iterator[list[Item]]:
    """Yield batches from ``pool`` (updated): exact fills with its oldest unit while there are
    any, then incomplete ones while it holds >= ``pool_limit`` blocks (0: until it is empty)."""
    while pool:
        sizes = [len(u) for u in pool]
        picked = _exact_fill(sizes, batch_size) if sum(sizes) >= batch_size else None
        if picked is None:
            if sum(sizes) < pool_limit:
                return
            picked = _first_fit(sizes, batch_size)
        yield [block for i in picked for block in pool[i]]
        for i in reversed(picked):
            del pool[i]


def _exact_fill(sizes: list[int], target: int) -> list[int] | None:
    """Indices (ascending) of sizes summing to exactly ``target`` that include index 0, or None.

    Subset-sum with Python ints as bitsets: bit s of reach[i] says sum s is reachable
    with sizes[1..i]. Walking back prefers older units (lower indices).
    """
    need = target - sizes[0]
    mask = (1 << (need + 1)) - 1
    reach = [1]
    for size in sizes[1:]:
        reach.append((reach[-1] | reach[-1] << size) & mask)
    if not reach[-1] >> need & 1:
        return None
    picked = []
    for i in range(len(sizes) - 1, 0, -1):
        if not reach[i - 1] >> need & 1:  # ``need`` needs unit i
            picked.append(i)
            need -= sizes[i]
    return [0, *reversed(picked)]


def _first_fit(sizes: list[int], target: int) -> list[int]:
    """Indices of the oldest unit and, in order, every later one that still fits within ``target``."""
    picked, used = [], 0
    for i, size in enumerate(sizes):
        if used + size <= target:
            picked.append(i)
            used += size
    return picked


def iter_batches(
    corpus_url: str, batch_size: int, seed: int, epoch: int = 0, drop_last: bool = True
) -> Iterator[Batch]:
    """One epoch of document-grouped batches of a corpus snapshot or a training bundle.

    Args:
        corpus_url: a corpus snapshot (from :func:`npmcore.corpus.ingest.ingest`) or a training
            bundle (``*.bundle.parquet``, :mod:`npmcore.corpus.bundle`: one shard).
        batch_size: sequences per batch, >= 2 and at most the corpus' block count.
        seed, epoch: the shuffle; the same pair gives the same batches.
        drop_last: drop incomplete batches (see the module docstring), so that every
            batch has exactly ``batch_size`` sequences.

    Returns:
        An iterator of :class:`Batch`. Arguments and the manifest are checked now; shard
        checksums as each shard is read (:class:`~npmcore.storage.SnapshotError`).
    """
    _check_batch_size(batch_size)
    if is_bundle(corpus_url):
        blocks = bundle_info(corpus_url).blocks
        shards = {corpus_url: functools.partial(read_bundle, corpus_url)}
    else:
        corpus = open_corpus(corpus_url)
        blocks = corpus.manifest.counts["blocks"]
        shards = {
            path: functools.partial(read_shard, corpus_url, path, entry, COLUMNS) for path, entry in corpus.shards
        }
    if blocks < batch_size:
        raise ValueError(f"{corpus_url} has {blocks} blocks, fewer than batch_size={batch_size}")
    return _batches(corpus_url, shards, batch_size, seed, epoch, drop_last)


def _batches(
    url: str, shards: dict[str, Callable[[], pa.Table]], batch_size: int, seed: int, epoch: int, drop_last: bool
) -> Iterator[Batch]:
    rng = np.random.default_rng([seed, epoch])
    names = list(shards)
    order = rng.permutation(len(names))
    docs = (doc for i in order for doc in _shard_documents(shards[names[i]](), names[i], rng))
    kept = dropped = 0
    for rows in group_documents(docs, batch_size):
        if drop_last and len(rows) < batch_size:
            dropped += len(rows)
            continue
        kept += 1
        block_ids, doc_ids, token_ids, title_tokens = (list(col) for col in zip(*rows, strict=True))
        yield Batch(block_ids, doc_ids, token_ids, title_tokens)
    level = logging.WARNING if dropped > 0.05 * (kept * batch_size + dropped) else logging.INFO
    log.log(level, "epoch %d of %s: %d batches; %d blocks dropped in incomplete batches", epoch, url, kept, dropped)


def _shard_documents(table: pa.Table, path: str, rng: np.random.Generator) -> list[tuple[str, list[BlockRow]]]:
    """(doc_id, rows) of each document of a shard, in shuffled order; checks blocks are consecutive and in order."""
    doc_ids = table.column("doc_id").to_pylist()
    n = len(doc_ids)
    if n == 0:  # a partition whose documents were all empty
        return []
    ids = np.asarray(doc_ids, dtype=object)
    bounds = np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1, [n]])  # (n_docs + 1,)
    if len(set(doc_ids)) != len(bounds) - 1:
        raise ValueError(f"{path}: the blocks of a document are not consecutive")
    expected_index = np.arange(n) - np.repeat(bounds[:-1], np.diff(bounds))  # (n,) 0, 1, ... within each document
    bad = np.flatnonzero(table.column("block_index").to_numpy() != expected_index)
    if len(bad):
        raise ValueError(
            f"{path}: block {table.column('block_id')[int(bad[0])]} is out of order in document {doc_ids[bad[0]]!r}"
        )
    block_ids, token_ids, titles = (
        table.column(name).to_pylist() for name in ("block_id", "token_ids", "title_tokens")
    )
    rows = list(zip(block_ids, doc_ids, token_ids, titles, strict=True))
    return [(doc_ids[bounds[k]], rows[bounds[k] : bounds[k + 1]]) for k in rng.permutation(len(bounds) - 1)]


def by_length(batches: Iterable[Batch], pool_batches: int, seed: int, epoch: int) -> Iterator[Batch]:
    """The same sequences re-batched ``pool_batches`` batches at a time so that each batch holds
    blocks of similar length: less padding, for objectives that need no in-batch neighbours
    (MLM). The new batches of a pool come in a seeded random order."""
    rng = np.random.default_rng([seed, epoch, 1])
    batches = iter(batches)
    while pool := list(islice(batches, pool_batches)):
        rows = [
            row
            for batch in pool
            for row in zip(batch.block_ids, batch.doc_ids, batch.token_ids, batch.title_tokens, strict=True)
        ]
        rows.sort(key=lambda row: len(row[2]))
        size = len(pool[0].block_ids)
        cut = [rows[lo : lo + size] for lo in range(0, len(rows), size)]
        for k in rng.permutation(len(cut)):
            yield Batch(*(list(col) for col in zip(*cut[k], strict=True)))


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 2:
        raise ValueError(f"batch_size must be >= 2 (in-batch positives need another sequence), got {batch_size}")
