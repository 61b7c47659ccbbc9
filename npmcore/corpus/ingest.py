"""Ingestion: raw corpora to a corpus snapshot of Parquet block shards, in parallel on Dask.

Inputs are cut into partitions (:mod:`npmcore.corpus.partitions`): delimiter-aligned byte ranges of uncompressed
line-based files, whole compressed files, and batches of pages streamed from a
MediaWiki dump (the driver decompresses and splits the XML in constant memory; the
workers do the expensive part: wikitext parsing, sentence splitting, tokenization).
Each partition becomes one shard ``blocks/part-NNNNN.parquet`` written by the worker
straight into the snapshot's staging area; the driver keeps only per-shard checksums.

Three kinds of ingest add to that, each in a module of its own: a backfill of a new dump (``previous``) copies
the rows of the pages unchanged since an earlier one (:mod:`npmcore.corpus.reuse`); WARC files (CC-News) take two
rounds, their articles deduplicated in between (:mod:`npmcore.corpus.warc_shards`); an ingest that ``extends`` a
corpus snapshot carries over the shards of the sources its inputs do not replace (:mod:`npmcore.corpus.extend`).
"""

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from itertools import islice

import fsspec
import pyarrow as pa
from distributed import Client
from fsspec.utils import infer_compression, seek_delimiter
from transformers import PreTrainedTokenizerFast

from npmcore.cluster import check_readable, map_bounded
from npmcore.corpus.blocks import split_document
from npmcore.corpus.dedup import CONFIG as DEDUP_CONFIG
from npmcore.corpus.extend import copy_shards, extended_corpus
from npmcore.corpus.inputs import expand_inputs
from npmcore.corpus.partitions import IngestConfig, IngestedShard, Partition, ReusedPage, write_table
from npmcore.corpus.readers import (
    COMPRESSION_ERRORS,
    CorpusError,
    Document,
    Format,
    WikiPage,
    detect_format,
    input_wiki,
    iter_wiki_pages,
    read_jsonl,
    read_lines,
    read_wikiextractor,
    record_delimiter,
    source_name,
    wiki_documents,
)
from npmcore.corpus.reuse import document_hash, page_hash, previous_rows, previous_sources, reusable, reused_if_known
from npmcore.corpus.warc import EXTRACTOR, check_language
from npmcore.corpus.warc_shards import deduplicate, extract_warc
from npmcore.snapshots import BLOCK_SCHEMA, CORPUS
from npmcore.sources import Source, describe, source_of, totals
from npmcore.storage import Manifest, SnapshotWriter, existing_snapshot, join, sha256_file, snapshot_id, snapshot_url

log = logging.getLogger(__name__)


def plan_partitions(
    files: list[str], formats: list[Format], config: IngestConfig, previous: str | None = None, first: int = 0
) -> Iterator[Partition]:
    """Partitions of all inputs, numbered in input order from ``first`` (lazy: dumps are streamed).
    Dump pages found in the ``previous`` corpus snapshot (by source hash) become :class:`ReusedPage`
    items. A WARC file is one partition: its gzip members can only be found by reading it through."""
    known = previous_sources(previous) if previous else {}
    index = first
    for url, fmt in zip(files, formats, strict=True):
        source, wiki = source_name(url), input_wiki(url, fmt)
        if fmt == "mediawiki":
            pages, read = iter_wiki_pages(url), 0
            while batch := list(islice(pages, config.pages_per_partition)):
                items = tuple(reused_if_known(page, known) for page, _, _ in batch)
                done = batch[-1][2]  # the bytes of the dump read up to its last page
                yield Partition(
                    index,
                    source,
                    fmt,
                    url,
                    done - read,
                    pages=items,
                    prefixes=batch[0][1],
                    previous=previous,
                    wiki=wiki,
                )
                index, read = index + 1, done
            continue
        fs, path = fsspec.core.url_to_fs(url)
        size = fs.size(path)
        if fmt == "warc" or infer_compression(url):  # compressed streams cannot be split: one partition per file
            yield Partition(index, source, fmt, url, size, wiki=wiki)
            index += 1
            continue
        delimiter = record_delimiter(url, fmt)
        for offset in range(0, size, config.partition_bytes):
            length = min(config.partition_bytes, size - offset)
            yield Partition(index, source, fmt, url, length, offset, length, wiki=wiki, delimiter=delimiter)
            index += 1


def _read_bytes(part: Partition) -> tuple[bytes, int]:
    delimiter = part.delimiter
    with fsspec.open(part.url, "rb", compression="infer") as f:
        if part.length is None:
            return f.read(), 0
        f.seek(part.offset)
        if part.offset > 0:
            seek_delimiter(f, delimiter, 1 << 16)
        start = f.tell()
        f.seek(part.offset + part.length)
        seek_delimiter(f, delimiter, 1 << 16)
        end = f.tell()
        f.seek(start)
        return f.read(end - start), start


def _read_range(part: Partition) -> tuple[str, int]:
    """Text of a partition's delimiter-aligned byte range and the byte offset it starts at."""
    try:
        data, start = _read_bytes(part)
    except COMPRESSION_ERRORS as e:
        if not infer_compression(part.url):
            raise
        raise CorpusError(f"{part.url}: truncated or corrupt compressed stream ({e})") from e
    try:
        return data.decode("utf-8"), start
    except UnicodeDecodeError as e:
        raise CorpusError(f"{part.url}: not UTF-8 text near byte {start + e.start}") from e


def _of_wiki(docs: Iterable[Document], part: Partition) -> Iterator[Document]:
    """The documents of a WikiExtractor partition, each checked to be a page of its file's wiki (the one its
    first page names: a file holds one wiki's pages, its source)."""
    for doc in docs:
        if doc.wiki != part.wiki:
            raise CorpusError(
                f"{part.url}: page {doc.doc_id} ({doc.title[:60]!r}) is of {doc.wiki or 'no wiki'}, the file's "
                f"first page of {part.wiki or 'no wiki'}: one file holds one wiki's pages"
            )
        yield doc


def documents(part: Partition) -> Iterator[Document]:
    """The documents of a partition (of a dump partition: its pages that are not reused)."""
    if part.format == "mediawiki":
        return wiki_documents([p for p in part.pages if isinstance(p, WikiPage)], part.prefixes, part.source)
    text, start = _read_range(part)
    if part.format == "wikiextractor":
        return _of_wiki(read_wikiextractor(text, part.source, part.url, start), part)
    if part.format == "jsonl":
        return read_jsonl(text, part.source, start, part.url)
    return read_lines(text, part.source, start)


def sources(part: Partition) -> Iterator[tuple[str, Document | None]]:
    """(source hash, document) of each document of a partition, in order; the document is
    None for a reused dump page (its rows are copied)."""
    if part.format != "mediawiki":
        yield from ((document_hash(doc), doc) for doc in documents(part))
        return
    for page in part.pages:
        if isinstance(page, ReusedPage):
            yield page.source_hash, None
        else:  # a disambiguation page gives no document
            yield from ((page_hash(page), doc) for doc in wiki_documents([page], part.prefixes, part.source))


def write_shard(
    part: Partition, tokenizer: PreTrainedTokenizerFast, staging: str, config: IngestConfig
) -> IngestedShard:
    """Read, clean, split and tokenize one partition; write its Parquet shard (runs on a worker)."""
    if part.format == "warc":
        return extract_warc(part, staging, config)
    rows = {name: [] for name in BLOCK_SCHEMA.names}
    copied = previous_rows(part)
    docs = empty = tokens = 0
    for digest, doc in sources(part):
        docs += 1
        if doc is None:
            for row in copied[digest]:
                for name in BLOCK_SCHEMA.names:
                    rows[name].append(part.source if name == "source" else row[name])
                tokens += len(row["token_ids"])
            continue
        if not doc.text.strip():
            empty += 1
            continue
        for block in split_document(doc, tokenizer, config.max_tokens):
            for name in BLOCK_SCHEMA.names:
                rows[name].append(digest if name == "source_hash" else getattr(block, name))
            tokens += len(block.token_ids)
    path = f"blocks/part-{part.index:05d}.parquet"
    entry = write_table(pa.table(rows, schema=BLOCK_SCHEMA), join(staging, path))
    reused = sum(isinstance(page, ReusedPage) for page in part.pages)
    return IngestedShard(
        part.index, path, entry, docs, empty, len(rows["block_id"]), tokens, reused, part.input_bytes,
        corpus_source=part.corpus_source,
    )  # fmt: skip


def ingest(
    inputs: list[str],
    store: str,
    config: IngestConfig = IngestConfig(),
    client: Client | None = None,
    on_shard: Callable[[IngestedShard], None] | None = None,
    previous: str | None = None,
    extends: str | None = None,
) -> str:
    """Ingest ``inputs`` into a corpus snapshot under ``store``; returns its URL.

    With ``client`` the partitions run on that Dask cluster, without it in this process;
    both give identical snapshots. An existing, verified snapshot of the same inputs and
    config is returned as is. ``on_shard`` is called with each finished shard's result.
    ``previous`` (a corpus snapshot of an earlier dump, same tokenizer and max_tokens) only
    saves work: its unchanged pages are copied instead of parsed; the snapshot is the same.
    ``extends`` (a corpus snapshot): the new snapshot holds the blocks of its sources that the inputs do
    not replace (another wiki's pages: Simple English beside English Wikipedia), then the inputs' own; of
    WARC inputs, the articles that are not duplicates of its articles (a monthly CC-News backfill). Inputs
    it already holds (same sha256) return it unchanged; inputs that replace all of it give the snapshot
    a plain ingest of them gives.
    """
    if config.max_tokens < 32:
        raise ValueError(f"max_tokens must be >= 32, got {config.max_tokens}")
    files = expand_inputs(inputs)
    formats = [detect_format(u) if config.format == "auto" else config.format for u in files]
    check_readable([u for u, f in zip(files, formats, strict=True) if f != "mediawiki"], client)  # dumps: read here
    from npmcore.encoder import load_tokenizer, tokenizer_fingerprint  # torch: not on the workers, which get this one

    tokenizer = load_tokenizer(config.encoder)
    input_entries = [
        {
            "url": u,
            "source": source_name(u),
            "format": f,
            **asdict(sha256_file(u)),
            **({"wiki": w} if (w := input_wiki(u, f)) else {}),
            **({"dump_date": config.dump_date} if config.dump_date else {}),
        }
        for u, f in zip(files, formats, strict=True)
    ]
    id_config = {
        "max_tokens": config.max_tokens,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "partition_bytes": config.partition_bytes,
        "pages_per_partition": config.pages_per_partition,
    }
    if "warc" in formats:  # only then: the ids of other ingests stay what they were
        id_config |= {"lang": check_language(config.lang), "extractor": EXTRACTOR, "dedup": DEDUP_CONFIG}
    base = extended_corpus(extends, id_config) if extends else None
    kept: list[Source] = []
    if base is not None:
        known = {e["sha256"] for e in base.manifest.inputs}
        if all(e["sha256"] in known for e in input_entries):
            log.info("corpus snapshot %s already holds %s; nothing to add", extends, ", ".join(files))
            return extends
        replaced = {source_of(e) for e in input_entries}
        kept = [s for s in base.sources if s.name not in replaced]
        if kept:
            id_config["extends"] = base.manifest.id
        else:  # every source replaced: a plain ingest of the inputs
            base = None
    identity = ("source", "format", "sha256", "wiki", "dump_date")
    snap_id = snapshot_id(CORPUS, [{k: e[k] for k in identity if k in e} for e in input_entries], id_config)
    url = snapshot_url(store, CORPUS, snap_id)
    if existing_snapshot(url):
        log.info("corpus snapshot %s already exists; nothing to do", url)
        return url

    if previous is not None and not reusable(previous, id_config):
        previous = None
    with SnapshotWriter(store, CORPUS, snap_id) as writer:
        staging = writer.url("").rstrip("/")
        first = copy_shards(base, kept, staging, client, writer) if base is not None else 0
        fn = functools.partial(write_shard, staging=staging, config=config)
        results = []
        for result in map_bounded(fn, plan_partitions(files, formats, config, previous, first), client, (tokenizer,)):
            results.append(result)
            if on_shard is not None:
                on_shard(result)
        results.sort(key=lambda r: r.index)
        warc_counts = {}
        if "warc" in formats:
            results, warc_counts = deduplicate(results, tokenizer, staging, config, client, base and base.url)
        added = describe(
            input_entries,
            ((r.corpus_source, r.path, {k: getattr(r, k) for k in ("docs", "empty_docs", "blocks", "tokens")})
             for r in results),
        )  # fmt: skip
        counts = totals(added)
        if counts["empty_docs"]:
            log.warning("skipped %d documents with no text", counts["empty_docs"])
        if previous is not None:
            log.info("%d of %d documents copied from %s", sum(r.reused_docs for r in results), counts["docs"], previous)
        if counts["blocks"] == 0:
            raise CorpusError(f"no document with text in {', '.join(files)} ({counts['docs']} documents read)")
        if base is not None:
            log.info(
                "%d new documents (%s) added to the %d of %s (%s)", counts["docs"], ", ".join(s.name for s in added),
                totals(kept)["docs"], extends, ", ".join(s.name for s in kept),
            )  # fmt: skip
            carried = {u for s in kept for u in s.inputs}
            input_entries = [e for e in base.manifest.inputs if e["url"] in carried] + input_entries
        for r in results:
            writer.add(r.path, r.entry)
        manifest = Manifest(
            kind=CORPUS,
            id=snap_id,
            inputs=input_entries,
            config={**id_config, "encoder": config.encoder or "default"},
            counts={**totals([*kept, *added]), "shards": len(writer.files), **warc_counts},
            files=dict(writer.files),
            sources=[s.to_dict() for s in [*kept, *added]],
        )
        return writer.commit(manifest)
