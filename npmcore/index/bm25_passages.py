"""A corpus's blocks as BM25's passages (each block's title and text, as the encoder reads them), and their Lucene
index written whole, or extended by the blocks a corpus added after another index's (:func:`write_bm25`): what the
index of a datastore and the index of BM25 alone both search.

Imports the Lucene layer (:mod:`npmcore.index.bm25`), the corpus's blocks and the snapshots and storage at the top.
"""

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

from npmcore.corpus.blocks import encoder_input
from npmcore.index import bm25
from npmcore.snapshots import open_corpus, open_index, read_shard
from npmcore.storage import local_folder

log = logging.getLogger(__name__)


def passages(corpus: str, first_shard: int = 0, first_block: int = 0) -> Iterator[tuple[str, str]]:
    """(global block number, passage text) of every block, in global order (the BM25 documents); from the shard
    ``first_shard`` on, whose first block is ``first_block``."""
    number = first_block
    for path, entry in open_corpus(corpus).shards[first_shard:]:
        table = read_shard(corpus, path, entry, ["title", "text"])
        for title, text in zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True):
            yield str(number), encoder_input(title, text)
            number += 1


def write_bm25(corpus: str, folder: Path, previous: str | None = None) -> int:
    """The Lucene index of a corpus's blocks in the local ``folder``; returns the blocks it indexed. When the corpus
    of the index ``previous`` is a prefix of ``corpus`` (its shards the first ones, as they were: a source added
    beside the others), its Lucene index is copied and only the blocks after them are added (the same search
    results as a full build: the same documents, statistics and ids)."""
    shards = open_corpus(corpus).shards
    before = open_index(previous) if previous else None
    prefix = open_corpus(before.corpus).shards if before is not None and before.manifest.config["bm25"] else None
    if not prefix or shards[: len(prefix)] != prefix:
        return bm25.index_passages(passages(corpus), str(folder))
    source = local_folder(before.url)
    folder.mkdir(parents=True, exist_ok=True)
    for relpath in sorted(p for p in before.manifest.files if p.startswith("bm25/")):
        shutil.copyfile(source / relpath, folder / relpath.removeprefix("bm25/"))
    first = sum(before.manifest.config["shard_blocks"])
    added = bm25.index_passages(passages(corpus, len(prefix), first), str(folder), append=True)
    log.info("BM25: %d blocks added to the %d of index %s", added, first, before.url)
    return added
