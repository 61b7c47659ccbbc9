"""Writing an index snapshot: its files copied from a local folder into the snapshot's staging folder
(:func:`upload`) or written there whole (:func:`write_renamed`), a build step marked finished so that a rerun
skips it (:func:`finish`, :func:`finished`; the marks cleared before the commit), and the snapshot published
with its manifest, written last (:func:`publish`). The index with vectors (:mod:`npmcore.index.indexer`, in
resumable steps) and the index of BM25 alone (:mod:`npmcore.index.bm25_index`, at once) are written by these
same steps.

Imports the shared modules."""

import json
import shutil
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import fsspec

from npmcore.snapshots import INDEX
from npmcore.storage import FileEntry, Manifest, SnapshotWriter, join, sha256_file


def upload(staging: str, workdir: Path, files: Iterable[Path]) -> dict[str, FileEntry]:
    """Copy local files into the staging folder under their paths relative to ``workdir``."""
    entries = {}
    for path in files:
        relpath = str(path.relative_to(workdir))
        with open(path, "rb") as src, fsspec.open(join(staging, relpath), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        entries[relpath] = sha256_file(str(path))
    return entries


def write_renamed(url: str, data: bytes) -> None:
    """Write ``data`` to ``url`` under a temporary name, then rename: a file there is whole."""
    with fsspec.open(f"{url}.tmp", "wb") as f:
        f.write(data)
    fs, _ = fsspec.core.url_to_fs(url)
    fs.mv(f"{url}.tmp", url)


def finish(staging: str, step: str, entries: dict[str, FileEntry]) -> dict[str, FileEntry]:
    """Mark a step finished (its files' entries in ``{step}.json``, written last, renamed into place)."""
    marker = join(staging, f"{step}.json")
    with fsspec.open(f"{marker}.tmp", "w") as f:
        json.dump({k: asdict(v) for k, v in entries.items()}, f)
    fs, _ = fsspec.core.url_to_fs(marker)
    fs.mv(f"{marker}.tmp", marker)
    return entries


def finished(staging: str, step: str) -> dict[str, FileEntry] | None:
    """The entries of a step a previous try finished, if every file is still there at its size."""
    marker = join(staging, f"{step}.json")
    fs, path = fsspec.core.url_to_fs(marker)
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as f:
        entries = {k: FileEntry(**v) for k, v in json.load(f).items()}
    for relpath, entry in entries.items():
        fs_file, file_path = fsspec.core.url_to_fs(join(staging, relpath))
        if not fs_file.exists(file_path) or fs_file.size(file_path) != entry.bytes:
            return None
    return entries


def clear_finished(staging: str, steps: Iterable[str]) -> None:
    """Remove the marks of finished ``steps``: the published snapshot holds its files and its manifest only."""
    fs, staging = fsspec.core.url_to_fs(staging)
    for step in steps:
        marker = join(staging, f"{step}.json")
        if fs.exists(marker):
            fs.rm(marker)


def publish(
    writer: SnapshotWriter,
    files: dict[str, FileEntry],
    inputs: list[dict[str, Any]],
    config: dict[str, Any],
    counts: dict[str, int],
) -> str:
    """Publish the index snapshot that ``writer`` stages: ``files`` (relative path -> entry, each in its
    staging folder) and the manifest of them all, written last; returns the snapshot's URL."""
    for relpath, entry in files.items():
        writer.add(relpath, entry)
    manifest = Manifest(kind=INDEX, id=writer.id, inputs=inputs, config=config, counts=counts, files=dict(writer.files))
    return writer.commit(manifest)
