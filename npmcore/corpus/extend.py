"""A corpus extended by new sources: the snapshot an ingest extends, checked, and the shards it carries over.

A corpus holds sources (:mod:`npmcore.sources`): a wiki's pages, or a file of another kind. An ingest that
``extends`` a corpus snapshot (:func:`npmcore.corpus.ingest.ingest`) copies the shards of its sources that the
inputs do not replace (a source of the same name: the same wiki), checked against their checksums, then adds the
inputs' own after them; of WARC files, the articles that duplicate one of the corpus's articles are dropped
(:mod:`npmcore.corpus.warc_shards`).

Imports the readers' error and, at the top, the snapshots, sources, storage and the cluster's bounded mapping.
"""

import functools

import fsspec
from distributed import Client

from npmcore.cluster import map_bounded
from npmcore.corpus.readers import CorpusError
from npmcore.snapshots import CorpusSnapshot, open_corpus
from npmcore.sources import Source
from npmcore.storage import FileEntry, SnapshotError, SnapshotWriter, join, sha256_bytes


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
