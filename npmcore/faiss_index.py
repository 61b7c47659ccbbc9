"""FAISS indexes over a datastore: index-factory strings, inner product throughout.

An index holds every content token of a datastore under its global token id (shard
after shard, block after block). Building it:

1. :func:`train_index`: the factory string (``Flat``, ``HNSW32``, ``IVF1024,PQ32``,
   ``OPQ32,IVF1024,PQ32`` …) with ``METRIC_INNER_PRODUCT`` for every part (coarse
   quantizer and codes alike), trained on a sample drawn evenly from all shards;
2. IVF indexes: :func:`add_shard` adds each shard to a copy of the trained index (on a
   Dask worker) and :func:`merge_ivf` merges the shard indexes, in memory or into one
   memory-mapped ``.ivfdata`` file (``faiss.contrib.ondisk``) for indexes larger than
   RAM. Other indexes (Flat, HNSW, PQ) cannot be merged; :func:`add_all` adds the shards
   in order;
3. :func:`finalize`: IVF indexes get a direct map (id -> list position) so that any
   token's vector can be reconstructed from its code. NPM scores every candidate span by
   its first and last token, most of which the search did not return: they are rescored
   from the index itself, never from a second full-precision copy.

The default (:func:`default_factory`) is a product quantizer after an OPQ rotation, sized
to stay under 64 bytes per token with the token ids beside it (the paper's reference code keeps 2 KB).
A GPU is used for training and search when faiss has one.
"""

import logging
import math

import faiss
import numpy as np

log = logging.getLogger(__name__)

BYTES_PER_TOKEN = 64  # budget of the default index: codes (plus IVF ids and direct map) and the token id together
IVF_FROM_TOKENS = 20_000_000  # below, the default scans PQ codes exhaustively; above, an IVF narrows the scan
_IVF_BYTES = 8 + 8  # an IVF list entry's id, and its direct-map entry
TRAIN_SHARE = 32  # the default training sample: 1 in 32 of the tokens, within the bounds below
TRAIN_MIN = 20_000  # k-means of 256 centroids per PQ sub-quantizer wants 39 x 256 (about 10k) points
TRAIN_MAX = 100_000


def default_factory(dim: int, n_tokens: int, token_bytes: int = 2) -> str:
    """The largest product quantizer (8-bit sub-quantizers dividing ``dim``) within
    :data:`BYTES_PER_TOKEN`, after an OPQ rotation: exhaustive ``OPQ{m},PQ{m}np`` (no ids: a
    token's id is its position) up to :data:`IVF_FROM_TOKENS` tokens, ``OPQ{m},IVF{sqrt n},PQ{m}np``
    beyond (``np``: no polysemous training, which takes minutes and only serves Hamming-filtered
    search).

    Measured by ``bench/factories.py`` (393k enwiki tokens, the shipped encoder, 128 real query
    vectors): the exact top-4096 is kept at 0.93 with the rotation, 0.85 without (PQ48, 48 code
    bytes either way); the rotation's training adds about two minutes on two cores."""
    ivf = n_tokens > IVF_FROM_TOKENS
    budget = BYTES_PER_TOKEN - token_bytes - (_IVF_BYTES if ivf else 0)
    m = max(m for m in range(1, budget + 1) if dim % m == 0)
    if not ivf:
        return f"OPQ{m},PQ{m}np"
    nlist = 2 ** min(16, max(4, round(math.log2(math.sqrt(n_tokens)))))
    return f"OPQ{m},IVF{nlist},PQ{m}np"


def default_train_size(n_tokens: int) -> int:
    """Vectors sampled to train an index of ``n_tokens`` tokens: 1 in :data:`TRAIN_SHARE`, between
    :data:`TRAIN_MIN` and :data:`TRAIN_MAX`, so that training costs a small share of embedding the
    corpus (an OPQ rotation trains at about 1.3 ms a vector on two cores, the encoder embeds 0.3 ms a
    token). Measured by ``bench/factories.py`` on the embedded default corpus (683,959 tokens, 21,373
    vectors instead of 100k): docs/index-and-query.md."""
    return min(TRAIN_MAX, max(TRAIN_MIN, n_tokens // TRAIN_SHARE))


def is_ivf(index: faiss.Index) -> bool:
    try:
        faiss.extract_index_ivf(index)
    except RuntimeError:
        return False
    return True


def to_gpu(index: faiss.Index) -> faiss.Index:
    """The index on all GPUs when faiss has them (faiss-gpu), else unchanged."""
    if faiss.get_num_gpus() == 0:
        return index
    return faiss.index_cpu_to_all_gpus(index)


def train_index(factory: str, sample: np.ndarray) -> faiss.Index:
    """An empty index of ``factory`` (inner product) trained on ``sample`` (n, d)."""
    if sample.ndim != 2:
        raise ValueError(f"training sample must be (n, d), got shape {sample.shape}")
    try:
        index = faiss.index_factory(sample.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(f"invalid FAISS index-factory string {factory!r}: {str(e).strip().splitlines()[-1]}") from None
    if not index.is_trained:
        sample = np.ascontiguousarray(sample, dtype=np.float32)
        if is_ivf(index) and faiss.get_num_gpus() > 0:  # k-means of the coarse quantizer on the GPU
            ivf = faiss.extract_index_ivf(index)
            ivf.clustering_index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(ivf.d))
        index.train(sample)
    return index


def emptied(path: str) -> faiss.Index:
    """The trained but empty index of an index file (its codebooks and coarse quantizer
    reused: nothing to train again); IVF inverted lists are not even read."""
    index = faiss.read_index(path, faiss.IO_FLAG_SKIP_IVF_DATA)
    if is_ivf(index):
        ivf = faiss.extract_index_ivf(index)
        ivf.set_direct_map_type(faiss.DirectMap.NoMap)
        ivf.replace_invlists(faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size), True)
    index.reset()
    return index


def add_shard(trained: faiss.Index, vectors: np.ndarray, first_id: int) -> faiss.Index:
    """A copy of the trained IVF index holding ``vectors`` under ids ``first_id, first_id + 1, …``."""
    index = faiss.clone_index(trained)
    _add(index, vectors, first_id)
    return index


def _add(index: faiss.Index, vectors: np.ndarray, first_id: int, chunk: int = 65536) -> None:
    for lo in range(0, len(vectors), chunk):
        x = np.ascontiguousarray(vectors[lo : lo + chunk], dtype=np.float32)
        if is_ivf(index):
            index.add_with_ids(x, np.arange(first_id + lo, first_id + lo + len(x), dtype=np.int64))
        else:
            if index.ntotal != first_id + lo:
                raise ValueError(
                    f"{type(index).__name__} takes ids in order: expected first id {index.ntotal}, got {first_id + lo}"
                )
            index.add(x)


def add_all(trained: faiss.Index, shards: list[tuple[int, np.ndarray]]) -> faiss.Index:
    """The trained index (modified) holding every shard's vectors; shards (first id, vectors) in order."""
    for first_id, vectors in shards:
        _add(trained, vectors, first_id)
    return trained


def merge_ivf(trained: faiss.Index, shard_files: list[str], ivfdata: str | None = None) -> faiss.Index:
    """One IVF index from shard indexes written by :func:`add_shard` (``faiss.write_index``).

    With ``ivfdata`` the inverted lists are merged into that file (memory-mapped, not
    held in RAM; open the written index with :func:`read_index`); otherwise in memory.
    """
    index = faiss.clone_index(trained)
    if ivfdata is not None:
        from faiss.contrib.ondisk import merge_ondisk

        merge_ondisk(index, shard_files, ivfdata)
        return index
    ivf = faiss.extract_index_ivf(index)
    for path in shard_files:
        shard = faiss.read_index(path)
        ivf.merge_from(faiss.extract_index_ivf(shard), 0)
    index.ntotal = ivf.ntotal  # a pre-transform (OPQ) wrapper keeps its own count
    return index


def finalize(index: faiss.Index) -> faiss.Index:
    """Make every token's code reachable by id (IVF: a direct map)."""
    if is_ivf(index):
        faiss.extract_index_ivf(index).make_direct_map()
    return index


def read_index(path: str) -> faiss.Index:
    """Read an index written by ``faiss.write_index``; on-disk inverted lists are looked
    up beside the index file (so the snapshot folder can move)."""
    index = faiss.read_index(path, faiss.IO_FLAG_ONDISK_SAME_DIR)
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise ValueError(f"{path}: index metric is {index.metric_type}, expected inner product")
    return index


def set_search_params(index: faiss.Index, params: str) -> None:
    """FAISS search parameters such as ``"nprobe=64"`` (IVF) or ``"efSearch=256"`` (HNSW)."""
    if params:
        faiss.ParameterSpace().set_index_parameters(index, params)


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` inner products: (D, I), each (nq, k); I is -1 where fewer than k were found."""
    if queries.ndim != 2 or queries.shape[1] != index.d:
        raise ValueError(f"queries must be (nq, {index.d}), got shape {queries.shape}")
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, index.ntotal))


def reconstruct(index: faiss.Index, ids: np.ndarray) -> np.ndarray:
    """Vectors (n, d) of the tokens ``ids`` as the index stores them (exact for Flat, decoded codes otherwise)."""
    return index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))
