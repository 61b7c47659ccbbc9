"""Backfills of a new dump: the pages unchanged since the corpus snapshot of an earlier one (``previous``), reused.

Every block row keeps the sha256 of its document's source (:func:`page_hash`: page id, title and wikitext for a
dump page; :func:`document_hash` for a document of another kind), and a page whose source hash is found in the
previous snapshot (:func:`previous_sources`) is not parsed, split or tokenized again: it is planned as a
:class:`npmcore.corpus.partitions.ReusedPage` and its rows are copied from the previous shard that holds them
(:func:`previous_rows`). The result is the snapshot a full ingest gives, byte for byte, only built faster; rows of
another package version, tokenizer or block length are not reused (:func:`reusable`).

Imports the readers, the partitions, and the snapshots and storage at the top.
"""

import hashlib
import logging

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from npmcore import __version__
from npmcore.corpus.partitions import Partition, ReusedPage
from npmcore.corpus.readers import Document, WikiPage
from npmcore.snapshots import open_corpus, read_shard
from npmcore.storage import join

log = logging.getLogger(__name__)


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


def reused_if_known(page: WikiPage, known: dict[str, str]) -> WikiPage | ReusedPage:
    """``page``, or a :class:`ReusedPage` where ``known`` (:func:`previous_sources`) holds its source hash."""
    digest = page_hash(page)
    return ReusedPage(digest, known[digest]) if digest in known else page


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
