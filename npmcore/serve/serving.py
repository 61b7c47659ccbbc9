"""The store's serving pointer: which index snapshot the query service answers from.

``{store}/serving.json`` names one index snapshot of the store, with the earlier ones it named
(newest first, for rollback), when and why it moved, and the evaluation scores that let it move.
It is replaced whole (written under a temporary name, then renamed; a single PUT on S3), so a
reader sees the old pointer or the new one, never a mix.

Which index is served is always a choice someone made, never a side effect: the pipeline's own
builds write the pointer (``npmcore demo`` and an index rebuild when they pass their evaluation
gate, a backfill when the index it followed was the served one, ``npmcore index`` when the store
has no pointer yet: :func:`serve_if_unset`); ``npmcore serving set/rollback`` move it by hand. An
evaluation's reference indexes live in the same store and never move it. ``npmcore api`` watches
it and swaps the index it serves; a store without a pointer serves nothing until one is set.

What is checked when (:func:`verify_index`): every move of the pointer (set, rollback, the pipeline's and the
backfill's) reads every file of the index against its sha256 and lists its datastore's files against their sizes,
and refuses a mismatch naming the file: a read of the index once per rebuild, not of the datastore (whose sha256,
terabytes at scale, were checked shard by shard when the index was built from it). ``npmcore api`` checks the same
again as it loads an index beside the served one (the pointer may have been written by hand or by an older
version, or a disk gone bad since), so a refused index costs no request.
"""

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import fsspec

from npmcore.snapshots import INDEX, IndexSnapshot, open_datastore, open_index
from npmcore.storage import SnapshotError, join, list_snapshots, replace_json

POINTER = "serving.json"
HISTORY = 10  # earlier indexes kept for rollback


@dataclass(frozen=True)
class Serving:
    index: str  # the index snapshot URL served
    previous: list[str] = field(default_factory=list)  # what it pointed at before, newest first
    reason: str = ""  # why it moved: "index-rebuild passed its gate", "set by hand", "rollback"
    scores: dict[str, float] = field(default_factory=dict)  # the evaluation that let it move, if any
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


def read_serving(store: str) -> Serving | None:
    """The store's pointer; None before anything was set."""
    fs, path = fsspec.core.url_to_fs(join(store, POINTER))
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as f:
        data = json.load(f)
    data.setdefault("at", "")  # a pointer written by hand may not say when: not now at every read
    return Serving(**data)


def serving_index(store: str) -> str:
    """The index to serve: the pointer's (a store without one serves nothing, whatever it holds)."""
    return serving_pointer(store).index


def serving_pointer(store: str) -> Serving:
    """The store's pointer; a store without one raises, saying how to set one."""
    if (pointer := read_serving(store)) is not None:
        return pointer
    if not list_snapshots(store, INDEX):
        raise ValueError(f"no index snapshot in {store}: build one first (npmcore index, or npmcore demo)")
    raise ValueError(
        f"{store} has no serving pointer: choose the index to serve with `npmcore serving set INDEX` "
        "(npmcore demo and npmcore index set it in a store that has none)"
    )


def set_serving(store: str, index: str, reason: str = "set by hand", scores: dict[str, float] | None = None) -> Serving:
    """Point the store at ``index`` (a complete, intact index snapshot of this store: :func:`verify_index`),
    keeping the old value."""
    snapshot = open_index(index, verify=False)  # refuses anything but a complete index snapshot
    if not index.rstrip("/").startswith(join(store, INDEX)):
        raise ValueError(f"{index} is not an index snapshot of the store {store}")
    verify_index(snapshot.url)
    current = read_serving(store)
    previous = [] if current is None else [current.index, *current.previous]
    pointer = Serving(snapshot.url, [p for p in previous if p != snapshot.url][:HISTORY], reason, dict(scores or {}))
    replace_json(join(store, POINTER), asdict(pointer))
    return pointer


def serve_if_unset(store: str, index: str, reason: str) -> Serving | None:
    """Point a store that has no serving pointer at ``index``; a store with one keeps it (returns None)."""
    if read_serving(store) is not None:
        return None
    return set_serving(store, index, reason)


def rollback_serving(store: str) -> Serving:
    """Point the store back at the index it served before the last move."""
    current = read_serving(store)
    if current is None or not current.previous:
        raise ValueError(f"{store} has no earlier serving index to roll back to")
    verify_index(current.previous[0])
    pointer = Serving(current.previous[0], current.previous[1:], "rollback")
    replace_json(join(store, POINTER), asdict(pointer))
    return pointer


def verify_index(url: str) -> IndexSnapshot:
    """The index at ``url`` if it is fit to serve: the sha256 of each of its files as its manifest says, and its
    datastore's files (:func:`check_datastore`); else a :class:`SnapshotError` naming the file."""
    snapshot = open_index(url, verify=True)
    check_datastore(snapshot)
    return snapshot


def check_datastore(index: IndexSnapshot) -> None:
    """Refuse an index whose datastore (where its exact vectors are read) lacks a file or has one of another
    size than its manifest says: one listing, no hashing. An index of BM25 alone has no datastore; one whose
    datastore was deleted whole is served without it (passages are encoded again:
    ``npmcore.answer.retrieval.stored_vectors``)."""
    if not index.vectors:
        return
    try:
        datastore = open_datastore(index.datastore)
    except SnapshotError:
        return
    fs, root = fsspec.core.url_to_fs(datastore.url)
    prefix = root.rstrip("/") + "/"
    sizes = {path.removeprefix(prefix): info["size"] for path, info in fs.find(root, detail=True).items()}
    for relpath, entry in sorted(datastore.manifest.files.items()):
        if relpath not in sizes:
            raise SnapshotError(f"datastore {datastore.url} of index {index.url}: file {relpath} is missing")
        if sizes[relpath] != entry.bytes:
            raise SnapshotError(
                f"datastore {datastore.url} of index {index.url}: {relpath} has {sizes[relpath]} bytes, "
                f"its manifest says {entry.bytes}"
            )
