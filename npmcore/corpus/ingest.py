"""Ingestion: raw corpora to a corpus snapshot of Parquet block shards, in parallel on Dask.

Inputs are cut into partitions: delimiter-aligned byte ranges of uncompressed
line-based files, whole compressed files, and batches of pages streamed from a
MediaWiki dump (the driver decompresses and splits the XML in constant memory; the
workers do the expensive part: wikitext parsing, sentence splitting, tokenization).
Each partition becomes one shard ``blocks/part-NNNNN.parquet`` written by the worker
straight into the snapshot's staging area; the driver keeps only per-shard checksums.

Backfills of a new dump (``previous``: the corpus snapshot of an earlier one): every
block row keeps the sha256 of its document's source (page id, title and wikitext for a
dump page), and a page whose source hash is found in the previous snapshot is not parsed,
split or tokenized again: its rows are copied from the previous shard that holds them.
The result is the snapshot a full ingest gives, byte for byte, only built faster.

WARC files (CC-News) take two rounds: each file's articles are extracted on a worker and staged
with their dedup keys, the driver drops the duplicates (:mod:`npmcore.corpus.dedup`), and the workers
then split and tokenize the articles kept.

A corpus holds sources (:mod:`npmcore.sources`): a wiki's pages, or a file of another kind. An ingest
that ``extends`` a corpus snapshot copies the shards of its sources that the inputs do not replace (a
source of the same name: the same wiki), then adds the inputs' own; of WARC files, the articles that
duplicate one of the corpus's articles are dropped.
"""

import functools
import hashlib
import io
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import islice
from typing import Literal

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from distributed import Client
from fsspec.utils import infer_compression, seek_delimiter
from transformers import PreTrainedTokenizerFast

from npmcore import __version__
from npmcore.cluster import check_readable, map_bounded
from npmcore.corpus.blocks import split_document
from npmcore.corpus.dedup import CONFIG as DEDUP_CONFIG
from npmcore.corpus.dedup import ArticleKey, find_duplicates, signature, text_hash
from npmcore.corpus.inputs import expand_inputs
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
from npmcore.corpus.warc import EXTRACTOR, Article, WarcCounts, check_language, read_articles
from npmcore.snapshots import BLOCK_SCHEMA, CORPUS, WARC_BLOCK_SCHEMA, CorpusSnapshot, open_corpus, read_shard
from npmcore.sources import Source, describe, source_of, totals
from npmcore.storage import (
    FileEntry,
    Manifest,
    SnapshotError,
    SnapshotWriter,
    existing_snapshot,
    join,
    sha256_bytes,
    sha256_file,
    snapshot_id,
    snapshot_url,
)

log = logging.getLogger(__name__)

# The articles of a WARC file, staged between their extraction and their tokenization (not part of a snapshot)
_ARTICLES = pa.schema(
    [
        *(pa.field(name, pa.string()) for name in ("doc_id", "title", "text", "source", "url")),
        WARC_BLOCK_SCHEMA.field("date"),
        pa.field("source_hash", pa.string()),
        WARC_BLOCK_SCHEMA.field("minhash"),
    ]
)


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


def page_hash(page: WikiPage) -> str:
    return hashlib.sha256(f"{page.wiki}:{page.page_id}\n{page.title}\n{page.wikitext}".encode()).hexdigest()


def document_hash(doc: Document) -> str:
    return hashlib.sha256(f"{doc.key}\n{doc.title}\n{doc.text}".encode()).hexdigest()


def previous_sources(url: str) -> dict[str, str]:
    """Source hash -> shard path of every document of the corpus snapshot at ``url`` (only that
    column is read; the worker that copies rows verifies the shard's checksum). A snapshot made
    before source hashes were kept gives {}: nothing is reused."""
    manifest = open_corpus(url).manifest
    fs, root = fsspec.core.url_to_fs(url)
    found: dict[str, str] = {}
    for path in sorted(manifest.files):
        shard = join(root, path)
        if "source_hash" not in pq.read_schema(shard, filesystem=fs).names:
            log.info("corpus snapshot %s has no source hashes: nothing of it is reused", url)
            return {}
        found.update(
            dict.fromkeys(pq.read_table(shard, columns=["source_hash"], filesystem=fs).column(0).to_pylist(), path)
        )
    return found


def reusable(previous: str, id_config: dict) -> bool:
    """Whether rows of the corpus snapshot ``previous`` can be copied: this package made them
    with the same tokenizer and block length (else they are not, with a warning)."""
    manifest = open_corpus(previous).manifest
    given = {
        "package_version": manifest.package_version,
        **{k: manifest.config[k] for k in ("tokenizer", "max_tokens")},
    }
    wanted = {
        "package_version": __version__,
        "tokenizer": id_config["tokenizer"],
        "max_tokens": id_config["max_tokens"],
    }
    differ = [f"{k} {given[k]!r}, not {v!r}" for k, v in wanted.items() if given[k] != v]
    if differ:
        log.warning("previous corpus %s has %s: every page is parsed again", previous, "; ".join(differ))
    return not differ


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
                items = tuple(_reused(page, known) for page, _, _ in batch)
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


def _reused(page: WikiPage, known: dict[str, str]) -> WikiPage | ReusedPage:
    digest = page_hash(page)
    return ReusedPage(digest, known[digest]) if digest in known else page


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


def previous_rows(part: Partition) -> dict[str, list[dict]]:
    """The rows of the partition's reused pages, by source hash, read from the previous snapshot."""
    wanted: dict[str, set[str]] = {}
    for page in part.pages:
        if isinstance(page, ReusedPage):
            wanted.setdefault(page.shard, set()).add(page.source_hash)
    if not wanted:
        return {}
    files = open_corpus(part.previous).manifest.files
    rows: dict[str, list[dict]] = {}
    for shard, hashes in wanted.items():
        table = read_shard(part.previous, shard, files[shard])
        for row in table.filter(pc.is_in(table["source_hash"], pa.array(sorted(hashes)))).to_pylist():
            rows.setdefault(row["source_hash"], []).append(row)
    return rows


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
    entry = _write_table(pa.table(rows, schema=BLOCK_SCHEMA), join(staging, path))
    reused = sum(isinstance(page, ReusedPage) for page in part.pages)
    return IngestedShard(
        part.index, path, entry, docs, empty, len(rows["block_id"]), tokens, reused, part.input_bytes,
        corpus_source=part.corpus_source,
    )  # fmt: skip


def extract_warc(part: Partition, staging: str, config: IngestConfig) -> IngestedShard:
    """The articles of one WARC file in ``config.lang`` and their dedup keys, staged in
    ``articles/`` until :func:`deduplicate` has decided which are duplicates (runs on a worker)."""
    articles, counts = read_articles(part.url, part.source, config.lang, config.strict)
    keys = tuple(ArticleKey(a.doc_id, a.url, text_hash(a.text), signature(a.text)) for a in articles)
    columns = {
        name: [getattr(a, name) for a in articles] for name in ("doc_id", "title", "text", "source", "url", "date")
    }
    columns |= {"source_hash": [k.text_hash for k in keys], "minhash": [k.signature for k in keys]}
    path = f"articles/part-{part.index:05d}.parquet"
    entry = _write_table(pa.table(columns, schema=_ARTICLES), join(staging, path))
    return IngestedShard(
        part.index, path, entry, len(articles), 0, 0, 0, 0, part.input_bytes, counts, keys, part.corpus_source
    )


def write_articles(
    job: tuple[IngestedShard, frozenset[str]], tokenizer: PreTrainedTokenizerFast, staging: str, config: IngestConfig
) -> IngestedShard:
    """Split and tokenize the staged articles of one WARC file, but the duplicates ``job`` names, into
    its shard with their URL, date and MinHash signature; the staged file is removed (runs on a worker)."""
    staged, drop = job
    with fsspec.open(join(staging, staged.path), "rb") as f:
        table = pq.read_table(f)
    rows = {name: [] for name in WARC_BLOCK_SCHEMA.names}
    for row in table.to_pylist():
        if row["doc_id"] in drop:
            continue
        article = Article(row["doc_id"], row["title"], row["text"], row["source"], url=row["url"], date=row["date"])
        for block in split_document(article, tokenizer, config.max_tokens):
            for name in BLOCK_SCHEMA.names:
                rows[name].append(row["source_hash"] if name == "source_hash" else getattr(block, name))
            rows["url"].append(row["url"])
            rows["date"].append(row["date"])
            rows["minhash"].append(row["minhash"] if block.block_index == 0 else None)
    path = f"blocks/part-{staged.index:05d}.parquet"
    entry = _write_table(pa.table(rows, schema=WARC_BLOCK_SCHEMA), join(staging, path))
    fsspec.core.url_to_fs(staging)[0].rm(join(staging, staged.path))
    tokens = sum(len(ids) for ids in rows["token_ids"])
    docs = staged.docs - len(drop)
    return replace(staged, path=path, entry=entry, docs=docs, blocks=len(rows["block_id"]), tokens=tokens, articles=())


def _write_table(table: pa.Table, url: str) -> FileEntry:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    data = buf.getvalue()
    with fsspec.open(url, "wb") as f:
        f.write(data)
    return FileEntry(sha256_bytes(data), len(data))


def deduplicate(
    results: list[IngestedShard],
    tokenizer: PreTrainedTokenizerFast,
    staging: str,
    config: IngestConfig,
    client: Client | None,
    extends: str | None,
) -> tuple[list[IngestedShard], dict[str, int]]:
    """Decide which staged articles of the WARC files are duplicates (:func:`npmcore.corpus.dedup.find_duplicates`,
    after the articles of the corpus ``extends``), then write the shards of the others. Returns all
    shards and the WARC counts of the ingest."""
    drops, verdicts = find_duplicates(((r.index, key) for r in results for key in r.articles), extends)
    jobs = [(r, drops.get(r.index, frozenset())) for r in results if r.warc is not None]
    fn = functools.partial(write_articles, staging=staging, config=config)
    written = {s.index: s for s in map_bounded(fn, jobs, client, (tokenizer,))}
    fs = fsspec.core.url_to_fs(staging)[0]
    if fs.exists(join(staging, "articles")):  # an empty folder, where the staged articles were
        fs.rm(join(staging, "articles"), recursive=True)
    counts = {f.name: sum(getattr(r.warc, f.name) for r in written.values()) for f in fields(WarcCounts)}
    return [written.get(r.index, r) for r in results], {**counts, **verdicts}


def extended_corpus(extends: str, id_config: dict) -> CorpusSnapshot:
    """The corpus snapshot an ingest extends, checked to take its blocks: same tokenizer and block length
    (and language, where both hold crawled articles) and sources recorded (:mod:`npmcore.sources`)."""
    base = open_corpus(extends)
    given = base.manifest.config
    keys = ["tokenizer", "max_tokens", *(["lang"] if "lang" in given and "lang" in id_config else [])]
    differ = [f"{k} {given[k]!r}, not {id_config[k]!r}" for k in keys if given[k] != id_config[k]]
    if differ:
        raise CorpusError(f"corpus {extends} cannot be extended: it has {'; '.join(differ)}")
    if not base.sources:
        raise CorpusError(
            f"corpus {extends} cannot be extended: made by npmcore {base.manifest.package_version}, before corpora "
            "recorded their sources; ingest its inputs again"
        )
    return base


def copy_shard(item: tuple[str, FileEntry], source: str, staging: str) -> tuple[str, FileEntry]:
    """Copy one block shard of the corpus snapshot ``source`` into ``staging``, checked against its
    checksum (runs on a worker)."""
    path, entry = item
    with fsspec.open(join(source, path), "rb") as f:
        data = f.read()
    if sha256_bytes(data) != entry.sha256:
        raise SnapshotError(f"snapshot {source}: checksum mismatch in {path} (manifest sha256 {entry.sha256[:12]}…)")
    with fsspec.open(join(staging, path), "wb") as f:
        f.write(data)
    return path, entry


def copy_shards(
    base: CorpusSnapshot, sources: list[Source], staging: str, client: Client | None, writer: SnapshotWriter
) -> int:
    """Copy the shards of ``sources`` of ``base`` into the snapshot being written; returns the next free shard
    index (after every shard of ``base``: the new shards come after the ones carried over)."""
    files = base.manifest.files
    fn = functools.partial(copy_shard, source=base.url, staging=staging)
    for path, entry in map_bounded(fn, [(path, files[path]) for s in sources for path in s.shards], client):
        writer.add(path, entry)
    return 1 + max(int(path.removesuffix(".parquet").rsplit("-", 1)[1]) for path, _ in base.shards)


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
