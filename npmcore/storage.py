"""Snapshots: immutable, content-addressed folders of files under a store root.

Every location is an fsspec URL (a plain path, ``file://…`` or ``s3://…``). A snapshot
lives at ``{store}/{kind}/{id}/`` and is complete only when its ``manifest.json`` is
there: the manifest is written last and lists the sha256 of every other file.

* On a local filesystem files are written under a hidden temporary folder that is
  renamed into place once the manifest is in it, so a reader never sees a partial one.
  Before the rename every file and folder of it is flushed to disk (fsync), and the kind's
  folder after it, so that a power cut leaves the old state or the whole new snapshot.
  A temporary folder names its writer (``.tmp-{id}-{rand}-{pid}@{host}``): a writer removes
  those of writers of its host that are gone (killed: SIGKILL, the OOM killer, a power cut).
* On object stores (no atomic rename) files go straight to the final prefix and the
  manifest is the commit marker: without it the prefix is not a snapshot. A write that fails
  removes its manifest (a commit whose answer was lost may have left it) before its files.

The id is derived from what the snapshot is made of (kind, input hashes, config,
package version), so the same inputs map to the same snapshot and re-running is free.

A store that fills up (ENOSPC, EDQUOT) while a snapshot is written stops the write with a
:class:`StoreFullError` naming the store, the snapshot and the bytes it had written; nothing
of it is published (a resumable writer keeps its finished pieces, hidden, for the next try).
"""

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from npmcore import __version__

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
_CHUNK = 1 << 20

# How S3 requests ride out an outage of the store: a try gives up on connecting after 10 s and on an answer
# after 60 s, and botocore tries again up to 10 times (11 tries) after a 5xx answer, a reset or a timeout, backing
# off exponentially (at most 20 s apart): up to about 3 minutes with the endpoint gone, then the command fails naming
# it; s3fs tries a read whose answer broke off again itself. Every request of a snapshot's write or read is safe to
# repeat (tests/test_s3.py: a store failing a fifth of them). fsspec's FSSPEC_S3 variable (JSON of S3FileSystem
# options, e.g. '{"config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 4}}}') replaces these.
S3_CLIENT = {"connect_timeout": 10, "read_timeout": 60, "retries": {"mode": "standard", "max_attempts": 10}}
fsspec.config.conf.setdefault("s3", {}).setdefault("config_kwargs", S3_CLIENT)


class SnapshotError(RuntimeError):
    """A snapshot is missing, incomplete or fails its checksums."""


class StoreError(SnapshotError):
    """A store's filesystem does not answer (no credentials, access denied, endpoint unreachable),
    so none of its snapshots can be read."""


class StoreFullError(SnapshotError):
    """The store's filesystem has no room left for a snapshot being written."""


FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def caused_by(error: BaseException | None, test: Callable[[BaseException], bool]) -> bool:
    """Whether ``error``, or an error it was raised from (its cause or context, transitively), passes ``test``."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if test(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, is a filesystem out of space (pyarrow and others
    raise an OSError without its errno, so the message counts too)."""
    return caused_by(
        error,
        lambda e: (
            isinstance(e, OSError)
            and (e.errno in FULL_ERRNOS or "No space left on device" in str(e) or "Disk quota exceeded" in str(e))
        ),
    )


def bytes_free(path: str | Path) -> str | None:
    """``"N bytes free"`` on the filesystem of a local ``path``; None where that cannot be read."""
    try:
        return f"{shutil.disk_usage(path).free:,} bytes free"
    except OSError:
        return None


@dataclass(frozen=True)
class FileEntry:
    sha256: str  # hex digest of the file's bytes
    bytes: int


@dataclass(frozen=True)
class Manifest:
    kind: str  # what the snapshot holds, e.g. "corpus"
    id: str  # content address: digest of kind, inputs, config and package version
    inputs: list[dict[str, Any]]  # each {"url", "sha256", "bytes"} (or another snapshot's id)
    config: dict[str, Any]  # everything that changes the output
    counts: dict[str, int]  # row counts and the like, e.g. {"docs": …, "blocks": …}
    files: dict[str, FileEntry]  # relative path -> checksum; every file but the manifest
    package_version: str = __version__
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    sources: list[dict[str, Any]] = field(default_factory=list)  # a corpus: what it holds (npmcore.sources)

    def to_json(self) -> str:
        data = asdict(self)
        if not self.sources:
            del data["sources"]
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        data["files"] = {k: FileEntry(**v) for k, v in data["files"].items()}
        return cls(**data)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(url: str) -> FileEntry:
    """Stream a file (any fsspec URL) through sha256."""
    digest, size = hashlib.sha256(), 0
    with fsspec.open(url, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return FileEntry(digest.hexdigest(), size)


class _Hashing:
    """A file being written that hashes what passes through it."""

    def __init__(self, file):
        self.file, self.digest, self.bytes = file, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.bytes += len(data)
        return self.file.write(data)


def save_array(url: str, array: np.ndarray) -> FileEntry:
    """``np.save`` an array to any fsspec URL, hashed as it is written (nothing is read back)."""
    with fsspec.open(url, "wb") as f:
        hashing = _Hashing(f)
        np.save(hashing, array)
    return FileEntry(hashing.digest.hexdigest(), hashing.bytes)


def snapshot_id(kind: str, inputs: Iterable[dict[str, Any]], config: dict[str, Any]) -> str:
    """Content address of a snapshot: 16 hex digits of sha256 over what determines it."""
    payload = json.dumps(
        {"kind": kind, "inputs": list(inputs), "config": config, "version": __version__},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def check_store(url: str) -> None:
    """Fail fast when the filesystem holding ``url`` (a store root or snapshot) cannot be used:
    one metadata request, whose failure becomes a :class:`StoreError` naming ``url``."""
    fs, path = fsspec.core.url_to_fs(url)
    try:
        fs.info(path)
    except FileNotFoundError:  # reachable, nothing written there yet
        pass
    except Exception as e:  # each filesystem fails its own way: botocore's errors on S3, OSError locally
        raise StoreError(f"cannot access the store at {url}: {e} ({type(e).__name__})") from e


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def snapshot_url(store: str, kind: str, snap_id: str) -> str:
    return join(store, kind, snap_id)


def _owner() -> str:
    """What names a staging folder's writer: ``{pid}@{host}``."""
    return f"{os.getpid()}@{socket.gethostname()}"


def _writer_gone(name: str) -> bool:
    """Whether the staging folder ``name`` (``.tmp-{id}-{rand}-{pid}@{host}``) was left by a writer of this
    host that no longer runs. Folders of other hosts, and of older versions (no owner), are never judged."""
    owner = name.rsplit("-", 1)[-1]
    pid, _, host = owner.partition("@")
    if not name.startswith(".tmp-") or host != socket.gethostname() or not pid.isdigit():
        return False
    import psutil  # here: the GPU path (tests/test_gpu_path.py) reads snapshots without it

    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def remove_stale_staging(folder: Path) -> list[Path]:
    """Remove the temporary folders under ``folder`` (a local store's kind folder) whose writers, on this host,
    are gone; returns them. A killed writer leaves its folder (hidden: never listed, never opened)."""
    removed = []
    for path in folder.glob(".tmp-*") if folder.is_dir() else []:
        if path.is_dir() and _writer_gone(path.name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log.info("removed %s, left by a writer that was killed", path)
    return removed


def fsync(path: Path) -> None:
    """Flush a file, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_json(url: str, data: object) -> None:
    """Write ``data`` as the JSON file ``url``, replacing it whole: on a local store a temporary file flushed to
    disk, renamed, the rename flushed (a power cut leaves the old file or the new one); on S3 one PUT."""
    fs, path = fsspec.core.url_to_fs(url)
    if not isinstance(fs, LocalFileSystem):
        with fsspec.open(url, "w") as f:
            json.dump(data, f, indent=1)
        return
    folder = Path(path).parent
    fd, partial = tempfile.mkstemp(dir=folder, prefix=f".{Path(path).name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    fsync(folder)


def fsync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder`` (itself included) to disk."""
    for path in [*sorted(folder.rglob("*")), folder]:
        fsync(path)


def folder_bytes(fs: fsspec.AbstractFileSystem, path: str) -> int:
    """Bytes of the files under ``path`` (0 when there is nothing)."""
    try:
        return sum(fs.du(path, total=False).values()) if fs.exists(path) else 0
    except OSError:
        return 0


class SnapshotWriter:
    """Writes one snapshot atomically; use as a context manager.

    Files are written with :meth:`url` (the writer or Dask workers write them) and
    registered with :meth:`add`; :meth:`commit` writes the manifest and publishes the
    folder. Leaving the ``with`` block without a commit removes what was written, unless
    the writer is ``resumable``: then the staging folder has a fixed name
    (``.partial-{id}``) and is kept, so a later writer of the same snapshot finds the
    pieces that were finished (each piece marks itself done; see ``npmcore.index.datastore``).
    A store that fills up meanwhile raises :class:`StoreFullError`.
    """

    def __init__(self, store: str, kind: str, snap_id: str, resumable: bool = False):
        self.store, self.kind, self.id = store, kind, snap_id
        self.final = snapshot_url(store, kind, snap_id)
        self.fs, _ = fsspec.core.url_to_fs(self.final)
        self.atomic_rename = isinstance(self.fs, LocalFileSystem)
        name = f".partial-{snap_id}" if resumable else f".tmp-{snap_id}-{uuid.uuid4().hex[:8]}-{_owner()}"
        self.staging = join(store, kind, name) if self.atomic_rename else self.final
        self.resumable = resumable
        self.files: dict[str, FileEntry] = {}
        self.committed = False

    def __enter__(self) -> "SnapshotWriter":
        if self.atomic_rename:
            remove_stale_staging(Path(self.fs._strip_protocol(join(self.store, self.kind))))
        try:
            self.fs.makedirs(self.staging, exist_ok=True)
        except OSError as e:
            if is_disk_full(e):
                raise self._full(e) from e
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Without a commit, remove what was written; a resumable writer keeps it for the next try. When the
        store itself failed, what cannot be removed stays: without its manifest it is no snapshot, and the
        store's error is the one raised. A full store raises :class:`StoreFullError` from the error."""
        if self.committed:
            return
        full = self._full(exc) if is_disk_full(exc) else None
        if not self.resumable:
            try:
                self._remove()
            except Exception as e:
                if exc is None:
                    raise
                log.warning("could not remove the unfinished %s: %s", self.staging, e)
        if full is not None and not isinstance(exc, StoreFullError):
            raise full from exc

    def _remove(self) -> None:
        """Remove what was written, the manifest first and alone: a commit that failed may have left it (on S3, a
        PUT the store did whose answer was lost), and an object store removes a batch of files one by one, in no
        set order, so removing them together would leave moments with the manifest and not all its files."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.url(MANIFEST))
        if self.fs.exists(self.staging):
            self.fs.rm(self.staging, recursive=True)

    def _full(self, error: BaseException) -> StoreFullError:
        """The one-line error of a store that filled up while this snapshot was written."""
        written = folder_bytes(self.fs, self.staging)
        free = bytes_free(self.fs._strip_protocol(self.store)) if self.atomic_rename else None
        free = f", {free}" if free else ""
        kept = f"; its finished pieces are kept in {self.staging}" if self.resumable else ""
        return StoreFullError(
            f"store {self.store} is full: writing {self.kind}/{self.id} needed more than the {written:,} bytes "
            f"written before the disk filled{free} ({error}); make room and run the command again{kept}"
        )

    def url(self, relpath: str) -> str:
        """Where to write ``relpath`` before the commit."""
        return join(self.staging, relpath)

    def add(self, relpath: str, entry: FileEntry) -> None:
        self.files[relpath] = entry

    def write_bytes(self, relpath: str, data: bytes) -> None:
        with fsspec.open(self.url(relpath), "wb") as f:
            f.write(data)
        self.add(relpath, FileEntry(sha256_bytes(data), len(data)))

    def commit(self, manifest: Manifest) -> str:
        """Write the manifest last and publish; returns the snapshot URL. On a local store the folder is
        flushed to disk, renamed into place (one atomic step) and the rename flushed too."""
        missing = set(self.files) ^ set(manifest.files)
        if missing:
            raise SnapshotError(f"manifest and written files disagree on {sorted(missing)}")
        with fsspec.open(self.url(MANIFEST), "w") as f:
            f.write(manifest.to_json())
        if self.atomic_rename:
            staging = Path(self.fs._strip_protocol(self.staging))
            final = Path(self.fs._strip_protocol(self.final))
            fsync_tree(staging)
            try:
                staging.rename(final)
            except OSError:
                if not (final / MANIFEST).exists():
                    raise
                shutil.rmtree(staging)  # the same content was published meanwhile
            fsync(final.parent)
        self.committed = True
        log.info("committed snapshot %s", self.final)
        return self.final


def read_manifest(url: str) -> Manifest:
    """The manifest of the snapshot at ``url``; refuses a folder without one, and a hidden folder (a writer's
    staging folder: ``.tmp-…``, ``.partial-…``), which is never a snapshot, manifest or not."""
    manifest = _load_manifest(url)
    if url.rstrip("/").rsplit("/", 1)[-1].startswith("."):  # its manifest is written before it is renamed
        raise SnapshotError(f"{url} is not a snapshot: it is the staging folder of an unfinished write")
    return manifest


def _load_manifest(url: str) -> Manifest:
    path = join(url, MANIFEST)
    try:
        with fsspec.open(path, "r") as f:
            text = f.read()
    except FileNotFoundError:
        raise SnapshotError(
            f"{url} is not a complete snapshot: {MANIFEST} is missing "
            "(it is written last, so the write that made this folder did not finish)"
        ) from None
    try:
        return Manifest.from_json(text)
    except (ValueError, TypeError, KeyError) as e:
        raise SnapshotError(f"{path} is not a valid manifest: {e}") from e


def open_snapshot(url: str, kind: str | None = None, verify: bool = True) -> Manifest:
    """Read a snapshot's manifest, check it is of ``kind`` (when given) and, with ``verify``,
    every file's sha256."""
    manifest = read_manifest(url)
    if kind is not None and manifest.kind != kind:
        raise SnapshotError(f"{url} is a {manifest.kind!r} snapshot, not a {kind!r} snapshot")
    if verify:
        verify_files(url, manifest)
    return manifest


def verify_files(url: str, manifest: Manifest) -> None:
    """Check the sha256 of every file ``manifest`` lists under ``url``."""
    for relpath, expected in sorted(manifest.files.items()):
        try:
            actual = sha256_file(join(url, relpath))
        except FileNotFoundError:
            raise SnapshotError(f"snapshot {url}: file {relpath} is missing") from None
        if actual != expected:
            raise SnapshotError(
                f"snapshot {url}: checksum mismatch in {relpath} "
                f"(manifest sha256 {expected.sha256[:12]}…, {expected.bytes} bytes; "
                f"found {actual.sha256[:12]}…, {actual.bytes} bytes)"
            )


def existing_snapshot(url: str, verify: bool = True) -> Manifest | None:
    """The manifest of a complete (and, with ``verify``, intact) snapshot at ``url``; None when
    there is none or it is incomplete or broken, so that it is built (again)."""
    try:
        return open_snapshot(url, verify=verify)
    except SnapshotError:
        return None


def cache_dir() -> Path:
    """Where local copies of remote snapshots and other derived files go: ``$XDG_CACHE_HOME/npmcore``
    (default ``~/.cache/npmcore``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npmcore"


def local_folder(url: str, cache: Path | None = None) -> Path:
    """A snapshot's folder on this machine: itself when local, else a verified copy made once
    in ``{cache}/{kind}/{id}`` (default :func:`cache_dir`; written under a temporary name, then renamed)."""
    fs, path = fsspec.core.url_to_fs(url)
    if isinstance(fs, LocalFileSystem):
        return Path(path)
    manifest = open_snapshot(url, verify=False)
    target = (cache or cache_dir()) / manifest.kind / manifest.id
    if not (target / MANIFEST).exists():
        partial = target.with_name(f".tmp-{manifest.id}-{uuid.uuid4().hex[:8]}")
        for relpath in [*manifest.files, MANIFEST]:
            (partial / relpath).parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(join(path, relpath), str(partial / relpath))
        verify_files(str(partial), _load_manifest(str(partial)))  # checksums of the copy
        if (target / MANIFEST).exists():  # copied meanwhile by another process
            shutil.rmtree(partial)
        else:
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
    return target


def list_snapshots(store: str, kind: str) -> list[tuple[str, Manifest]]:
    """Complete snapshots of ``kind`` under ``store`` (URL, manifest), oldest first."""
    fs, root = fsspec.core.url_to_fs(join(store, kind))
    if not fs.exists(root):
        return []
    found = []
    for path in fs.ls(root, detail=False):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(".") or not fs.exists(join(path, MANIFEST)):
            continue
        url = snapshot_url(store, kind, name)
        found.append((url, read_manifest(url)))
    return sorted(found, key=lambda item: item[1].created)
