"""A datastore's shards encoded with a trained FAISS index on the Dask workers (step 1 of an index build,
:mod:`npmcore.index.indexer`): each shard's codes (an IVF index: a shard index under the shard's global ids), the
codes of blocks whose vectors were copied from a previous datastore copied from that datastore's index instead of
encoded again.
"""

import functools

import faiss
import fsspec
import numpy as np

from npmcore.index.datastore import reusable_blocks
from npmcore.index.faiss_index import add_codes, is_ivf, read_index, sa_encode, stored_codes, takes_codes
from npmcore.index.staging import write_renamed
from npmcore.snapshots import open_corpus, open_datastore, open_index, read_shard, shard_arrays
from npmcore.storage import SnapshotError, local_folder, sha256_bytes


@functools.lru_cache(maxsize=1)
def trained_bytes(url: str, sha256: str) -> bytes:
    """The trained, empty index of the staging folder, read and checked once per worker: the task graph
    carries its URL, not its bytes (an IVF's centroids grow with the corpus: 12 MiB at 8,192 lists)."""
    with fsspec.open(url, "rb") as f:
        data = f.read()
    if sha256_bytes(data) != sha256:
        raise SnapshotError(f"{url}: the trained index changed while its shards were encoded (checksum mismatch)")
    return data


def encode_shard(
    trained: tuple[str, str], datastore: str, reuse: str | None, job: tuple[str, int, str]
) -> tuple[str, int, int]:
    """Encode one datastore shard (name, first global id, output URL) with the trained index (its URL and
    sha256) on a worker (:func:`~npmcore.index.faiss_index.sa_encode`): an IVF index gets a shard index holding the
    shard's codes under their global ids, any other the codes themselves, an (n, code_size) uint8 array.
    ``reuse``: an index of the same trained index over the datastore this one copied vectors from:
    the rows of copied blocks copy its codes instead (:func:`copied_rows`). Returns (URL, tokens, copied)."""
    name, first, out = job
    arrays = shard_arrays(datastore, name, open_datastore(datastore).manifest.files, verify=True)
    vectors = arrays["vectors"]
    fs, _ = fsspec.core.url_to_fs(out)
    if fs.exists(out):  # a previous try wrote it (renamed into place once whole)
        return out, len(vectors), 0
    index = faiss.deserialize_index(np.frombuffer(trained_bytes(*trained), dtype=np.uint8))
    codes = np.empty((len(vectors), index.sa_code_size()), dtype=np.uint8)
    rows, ids = copied_rows(reuse, datastore, name, arrays["offsets"]) if reuse else (np.empty(0, dtype=np.int64),) * 2
    if len(rows):
        codes[rows] = stored_codes(_previous_index(reuse), ids)
    fresh = np.ones(len(vectors), dtype=bool)
    fresh[rows] = False
    for lo, hi in _runs(fresh):
        for start in range(lo, hi, 65536):
            codes[start : min(hi, start + 65536)] = sa_encode(index, vectors[start : min(hi, start + 65536)])
    if is_ivf(index):
        add_codes(index, codes, np.arange(first, first + len(vectors), dtype=np.int64))
        data = faiss.serialize_index(index).tobytes()
    else:
        data = codes.tobytes()
    write_renamed(out, data)
    return out, len(vectors), len(rows)


def copied_rows(index: str, datastore: str, name: str, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of datastore shard ``name`` (its block ``offsets``) whose blocks have a content hash of
    ``index``'s datastore (so their vectors were copied from it: ``plan_datastore(reuse=…)``), and
    their ids in ``index``."""
    snapshot, old_url = open_datastore(datastore), open_index(index).datastore
    old, where = open_datastore(old_url), reusable_blocks(old_url)
    firsts = dict(zip(old.manifest.config["shards"], np.cumsum([0, *old.manifest.config["shard_tokens"][:-1]])))
    ((path, entry),) = [
        shard
        for shard, shard_name in zip(open_corpus(snapshot.corpus).shards, snapshot.manifest.config["shards"])
        if shard_name == name
    ]
    hashes = read_shard(snapshot.corpus, path, entry, ["content_hash"]).column("content_hash").to_pylist()
    rows, ids = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for i, content_hash in enumerate(hashes):
        if (found := where.get(content_hash)) is not None:
            old_name, lo, hi = found
            rows.append(np.arange(offsets[i], offsets[i + 1]))
            ids.append(np.arange(firsts[old_name] + lo, firsts[old_name] + hi))
    return np.concatenate(rows), np.concatenate(ids)


@functools.lru_cache(maxsize=1)
def _previous_index(index: str) -> faiss.Index:
    """The FAISS index of an index snapshot, checked and read once per worker (a remote one through a
    verified local copy; on-disk inverted lists stay memory-mapped)."""
    local = local_folder(index)
    open_index(str(local), verify=True)
    return read_index(str(local / "index.faiss"))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) ranges of the True entries of a bool array."""
    edges = np.flatnonzero(np.diff(np.r_[0, mask.astype(np.int8), 0]))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def codes_to_reuse(previous: str | None, datastore: str, trained: faiss.Index) -> str | None:
    """``previous`` (the index snapshot whose trained index ``trained`` is), when its codes can be copied: an index
    encoded by :func:`sa_encode` (IVF or flat codes) over the datastore that ``datastore`` copied unchanged blocks'
    vectors from."""
    if previous is None or not (is_ivf(trained) or takes_codes(trained)):
        return None
    copied_from = [i["reused"] for i in open_datastore(datastore).manifest.inputs if "reused" in i]
    if not copied_from or open_datastore(copied_from[0]).manifest.id != open_index(previous).datastore_id:
        return None
    return previous
