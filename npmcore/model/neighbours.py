"""Cross-document training batches: seed blocks with their BM25 neighbours from other documents.

NPM's in-batch positives are the other sequences' occurrences of a masked span. In
document-grouped batches (:mod:`npmcore.model.batching`, the paper's) those are mostly the same
article's other blocks, which say a name or a date in the same words: the encoder learns to copy
within an article. Here a batch is a few **seed** blocks, each followed by its top BM25
neighbours in *other* documents of the training corpus (TRIME groups its training segments by
BM25 the same way), so a span's positives are the same name, date or number as another article
writes it, the setting NPM answers in.

An epoch visits the blocks in a seeded order; each block not yet placed in this epoch's batches
becomes a seed and brings up to ``neighbours`` blocks of other documents, those already in the
batch skipped. Batches are a function of (seed, epoch), like document batches, and carry the
same fields (the title and title-n-gram rules of the masking apply as they do there). The
neighbours come from the BM25 index of an index snapshot of the training corpus (an index of
BM25 alone will do: :func:`npmcore.index.bm25_index.build_bm25_index`).
"""

import logging
import re
from collections.abc import Iterator

import numpy as np

from npmcore.index import bm25
from npmcore.model.batching import COLUMNS, Batch
from npmcore.snapshots import open_corpus, open_index, read_blocks
from npmcore.storage import local_folder

log = logging.getLogger(__name__)
NEIGHBOURS = 3  # neighbours of each seed: a batch of 16 holds 4 seeds and 12 neighbours
QUERY_WORDS = 64  # the seed's words that search for its neighbours (BM25's cost grows with the query)
SEARCHED = 16  # hits asked for, of which those of the seed's own document and those already batched are skipped


def neighbour_batches(
    corpus: str, index: str, batch_size: int, seed: int, epoch: int = 0, neighbours: int = NEIGHBOURS
) -> Iterator[Batch]:
    """One epoch of cross-document batches of a corpus snapshot, every batch of exactly ``batch_size``
    blocks (the last, incomplete one dropped).

    Raises:
        ValueError: ``index`` is not an index of ``corpus`` with BM25, or the corpus is smaller than a batch.
    """
    snapshot = open_index(index)
    if open_corpus(snapshot.corpus).manifest.id != open_corpus(corpus).manifest.id:
        raise ValueError(f"index {index} is not an index of corpus {corpus}: its neighbours would be another corpus's")
    if not snapshot.manifest.config["bm25"]:
        raise ValueError(f"index {index} has no BM25 index to find neighbours with")
    if batch_size < 2 or neighbours < 1:
        raise ValueError(f"need batch_size >= 2 and neighbours >= 1, got {batch_size} and {neighbours}")
    rows = [
        row
        for table in read_blocks(corpus, [*COLUMNS, "text"])
        for row in zip(
            *(table.column(c).to_pylist() for c in ("block_id", "doc_id", "token_ids", "title_tokens", "text")),
            strict=True,
        )
    ]
    if len(rows) < batch_size:
        raise ValueError(f"{corpus} has {len(rows)} blocks, fewer than batch_size={batch_size}")
    searcher = bm25.BM25Searcher(str(local_folder(index) / "bm25"))
    try:
        yield from _batches(rows, searcher, batch_size, neighbours, np.random.default_rng([seed, epoch]))
    finally:
        searcher.close()


def _batches(
    rows: list[tuple], searcher: bm25.BM25Searcher, batch_size: int, neighbours: int, rng: np.random.Generator
) -> Iterator[Batch]:
    placed: set[int] = set()
    batch: list[int] = []
    for block in rng.permutation(len(rows)).tolist():
        if block in placed:
            continue
        doc = rows[block][1]
        group = [block]
        for hit in searcher.search(seed_query(rows[block][4]), SEARCHED):
            other = int(hit.block_id)
            if len(group) > neighbours or len(batch) + len(group) == batch_size:
                break
            if rows[other][1] != doc and other not in group and other not in batch:
                group.append(other)
        batch += group
        placed.update(group)
        if len(batch) == batch_size:
            yield Batch(*(list(col) for col in zip(*(rows[b][:4] for b in batch), strict=True)))
            batch = []


def seed_query(text: str) -> str:
    """The words of a seed block that search for its neighbours: its first :data:`QUERY_WORDS`."""
    return " ".join(re.findall(r"\w+", text)[:QUERY_WORDS])
