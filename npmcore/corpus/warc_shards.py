"""WARC files (CC-News) to block shards, in two rounds around the deduplication of their articles.

First each file's articles in the ingest's language are extracted on a worker (:mod:`npmcore.corpus.warc`) and
staged in ``articles/`` with their dedup keys (:func:`extract_warc`); then the driver decides which are duplicates,
of each other and of the articles of the corpus the ingest extends (:mod:`npmcore.corpus.dedup`), and the workers
split and tokenize the articles kept into their shards, with each article's URL, date and MinHash signature
(:func:`deduplicate`, :func:`write_articles`).

Imports the partitions, the crawl reader, the deduplicator and the blocks of this stage, and at the top the block
schemas, the storage and the cluster's bounded mapping.
"""

import functools
from dataclasses import fields, replace

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client
from transformers import PreTrainedTokenizerFast

from npmcore.cluster import map_bounded
from npmcore.corpus.blocks import split_document
from npmcore.corpus.dedup import ArticleKey, find_duplicates, signature, text_hash
from npmcore.corpus.partitions import IngestConfig, IngestedShard, Partition, write_table
from npmcore.corpus.warc import Article, WarcCounts, read_articles
from npmcore.snapshots import BLOCK_SCHEMA, WARC_BLOCK_SCHEMA
from npmcore.storage import join

# The articles of a WARC file, staged between their extraction and their tokenization (not part of a snapshot)
_ARTICLES = pa.schema(
    [
        *(pa.field(name, pa.string()) for name in ("doc_id", "title", "text", "source", "url")),
        WARC_BLOCK_SCHEMA.field("date"),
        pa.field("source_hash", pa.string()),
        WARC_BLOCK_SCHEMA.field("minhash"),
    ]
)


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
    entry = write_table(pa.table(columns, schema=_ARTICLES), join(staging, path))
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
    entry = write_table(pa.table(rows, schema=WARC_BLOCK_SCHEMA), join(staging, path))
    fsspec.core.url_to_fs(staging)[0].rm(join(staging, staged.path))
    tokens = sum(len(ids) for ids in rows["token_ids"])
    docs = staged.docs - len(drop)
    return replace(staged, path=path, entry=entry, docs=docs, blocks=len(rows["block_id"]), tokens=tokens, articles=())


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
