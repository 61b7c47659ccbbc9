"""Partitions: an ingest's units of work, as its workers are handed them and hand them back.

A partition is a byte range of a file, a whole compressed or WARC file, or a batch of dump pages
(some of them :class:`ReusedPage` in a backfill: :mod:`npmcore.corpus.reuse`); the worker that takes it
writes one shard (or, of a WARC file, stages its articles: :mod:`npmcore.corpus.warc_shards`) as a Parquet
file (:func:`write_table`) and gives back an :class:`IngestedShard`. All of it under one :class:`IngestConfig`.

Shared by the ingest (:mod:`npmcore.corpus.ingest`) and the modules it runs; imports only types of the readers,
the crawl reader and the deduplicator, and the storage at the top.
"""

import io
from dataclasses import dataclass, field
from typing import Literal

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from npmcore.corpus.dedup import ArticleKey
from npmcore.corpus.readers import Format, WikiPage
from npmcore.corpus.warc import WarcCounts
from npmcore.storage import FileEntry, sha256_bytes


@dataclass(frozen=True)
class IngestConfig:
    format: Format | Literal["auto"] = "auto"  # input format; "auto" detects it per input
    encoder: str | None = None  # tokenizer name or path; None = the default encoder
    max_tokens: int = 256  # block length limit in encoder tokens, special tokens included
    partition_bytes: int = 8 << 20  # byte range per partition of an uncompressed line-based file
    pages_per_partition: int = 200  # dump pages per partition
    lang: str = "en"  # format warc: the language articles are kept in (ISO 639-1)
    strict: bool = False  # format warc: a bad record stops the ingest instead of being counted and skipped
    dump_date: str | None = None  # ISO date of the inputs' dump or crawl, recorded with their source


@dataclass(frozen=True)
class ReusedPage:
    """A dump page unchanged since the previous snapshot: its rows are copied from ``shard`` of it."""

    source_hash: str
    shard: str  # path of the previous snapshot's shard holding its blocks


@dataclass(frozen=True)
class Partition:
    """One unit of work: a byte range of a file, or a batch of dump pages."""

    index: int
    source: str
    format: Format
    url: str
    input_bytes: int  # the bytes of the file it stands for (compressed when the file is): its share of the progress
    offset: int = 0
    length: int | None = None  # None: to the end of the file
    pages: tuple[WikiPage | ReusedPage, ...] = ()  # mediawiki only
    prefixes: frozenset[str] = field(default_factory=frozenset)  # mediawiki only
    previous: str | None = None  # the corpus snapshot the ReusedPages are copied from
    wiki: str = ""  # the wiki of the file's pages ("" for inputs of no wiki): each of its documents is checked
    delimiter: bytes = b"\n"  # what ends a record of the file (npmcore.corpus.readers.record_delimiter)

    @property
    def corpus_source(self) -> str:
        """The name of the source its documents belong to (:mod:`npmcore.sources`)."""
        return self.wiki or self.source


@dataclass(frozen=True)
class IngestedShard:
    index: int
    path: str  # relative to the snapshot
    entry: FileEntry
    docs: int
    empty_docs: int  # documents with no text, skipped
    blocks: int
    tokens: int
    reused_docs: int  # dump pages copied from the previous snapshot, not parsed again
    input_bytes: int  # the partition's bytes of its file
    warc: WarcCounts | None = None  # format warc: what the file held
    articles: tuple[ArticleKey, ...] = ()  # format warc, staged: its articles' dedup keys, in record order
    corpus_source: str = ""  # the source its documents belong to (Partition.corpus_source)


def write_table(table: pa.Table, url: str) -> FileEntry:
    """``table`` written to ``url`` as one zstd Parquet file; its checksum and size, for the manifest."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    data = buf.getvalue()
    with fsspec.open(url, "wb") as f:
        f.write(data)
    return FileEntry(sha256_bytes(data), len(data))
