"""FAISS indexes over a datastore: index-factory strings, inner product throughout.

An index holds every content token of a datastore under its global token id (shard
after shard, block after block). What to build is chosen up front (:mod:`npmcore.index.index_choice`:
the factory, its training sample, whether the inverted lists live on disk, and the expected size,
memory and time). Building it (:mod:`npmcore.index.indexer` drives these on a Dask cluster):

1. :func:`train_index`: the factory string (``Flat``, ``HNSW32``, ``IVF1024,PQ32``,
   ``OPQ32,IVF1024,PQ32`` …) with ``METRIC_INNER_PRODUCT`` for every part (coarse
   quantizer and codes alike), trained on a sample drawn evenly from all shards;
2. each shard is encoded on a worker: IVF indexes fill a copy of the trained index that
   :func:`merge_ivf` merges, in memory or into one memory-mapped ``.ivfdata`` file
   (``faiss.contrib.ondisk``) for indexes larger than RAM; flat-code indexes (PQ, SQ, Flat)
   return codes that :func:`add_codes` appends in shard order; graphs (HNSW) and fast-scan
   layouts cannot take codes, so their vectors are added in order where the index is;
3. :func:`finalize`: IVF indexes get a direct map (id -> list position) so that any
   token's vector can be reconstructed from its code.

Search re-ranks: the index's top ``k x rerank`` of a query are scored again with the
datastore's exact (fp16) vectors (:func:`rescore`), so compact codes only have to find a
shortlist. NPM scores every candidate span by its first and last token; those are read
from the datastore too, or decoded from the index when the datastore is gone.
A GPU is used for training and search when faiss has one.
"""

from collections.abc import Callable

import faiss
import numpy as np

# OPQ's alternating optimisation (the IVF default's rotation): FAISS's default is 50 rounds (34 s on the demo's
# 21,373 vectors); 5 rounds keep more of the exact top-4096 at k x 3 (0.9966) than 50 at k x 2 (0.9933)
OPQ_ITERATIONS = 5
RESCORE_BATCH = 16  # queries re-scored together: their shortlists' vectors (16 x 8,192 x 384 floats) read at once


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


def train_index(factory: str, sample: np.ndarray, opq_iterations: int = OPQ_ITERATIONS) -> faiss.Index:
    """An empty index of ``factory`` (inner product) trained on ``sample`` (n, d); an OPQ rotation in
    ``opq_iterations`` rounds."""
    if sample.ndim != 2:
        raise ValueError(f"training sample must be (n, d), got shape {sample.shape}")
    if opq_iterations < 1:
        raise ValueError(f"opq_iterations must be >= 1, got {opq_iterations}")
    try:
        index = faiss.index_factory(sample.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(f"invalid FAISS index-factory string {factory!r}: {str(e).strip().splitlines()[-1]}") from None
    if isinstance(index, faiss.IndexPreTransform):
        for i in range(index.chain.size()):
            if isinstance(opq := faiss.downcast_VectorTransform(index.chain.at(i)), faiss.OPQMatrix):
                opq.niter = opq_iterations
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


def takes_codes(index: faiss.Index) -> bool:
    """Whether ``index`` (behind a rotation or not) stores flat codes that :func:`add_codes` appends."""
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    return isinstance(faiss.downcast_index(inner), faiss.IndexFlatCodes)


def sa_encode(index: faiss.Index, x: np.ndarray) -> np.ndarray:
    """``index.sa_encode(x)``: (n, sa_code_size) uint8, with the product quantizer's nearest centroids
    found by a BLAS search (``ProductQuantizer.compute_codes_with_assign_index``). FAISS's own
    encoder loops over centroids vector by vector when sub-vectors have fewer than 16 dimensions
    (PQ32 of 384 dimensions: 12): 47 us a vector here, 3x the BLAS search. Both pick the nearest
    centroid, so codes differ only where two centroids are equally near up to rounding.
    PQ and IVF-PQ (behind a rotation or not); any other index encodes itself."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    inner = index
    if isinstance(index, faiss.IndexPreTransform):
        for i in range(index.chain.size()):
            x = np.ascontiguousarray(index.chain.at(i).apply(x))
        inner = faiss.downcast_index(index.index)
    if isinstance(inner, faiss.IndexPQ):
        return _pq_codes(inner.pq, x)
    if isinstance(inner, faiss.IndexIVFPQ) and inner.by_residual:
        lists = inner.quantizer.assign(x, 1)[:, 0]
        residuals = np.empty_like(x)
        inner.quantizer.compute_residual_n(len(x), faiss.swig_ptr(x), faiss.swig_ptr(residuals), faiss.swig_ptr(lists))
        list_bytes = lists.astype("<i8").view(np.uint8).reshape(len(x), 8)[:, : inner.coarse_code_size()]
        return np.hstack([list_bytes, _pq_codes(inner.pq, residuals)])
    return inner.sa_encode(x)


def _pq_codes(pq: faiss.ProductQuantizer, x: np.ndarray) -> np.ndarray:
    if pq.dsub >= 16:  # FAISS searches by BLAS itself
        return pq.compute_codes(x)
    assign = faiss.IndexFlatL2(pq.dsub)  # held here: the product quantizer only points to it
    pq.assign_index = assign
    try:
        codes = np.empty((len(x), pq.code_size), dtype=np.uint8)
        pq.compute_codes_with_assign_index(faiss.swig_ptr(x), faiss.swig_ptr(codes), len(x))
    finally:
        pq.assign_index = None
    return codes


def add_codes(index: faiss.Index, codes: np.ndarray, ids: np.ndarray | None = None) -> None:
    """Add ``codes`` (n, sa_code_size) of vectors encoded by :func:`sa_encode` (behind a rotation
    too): a flat-code index (PQ, SQ, Flat) appends them under the next ids, an IVF index files
    each in the list its code names, under ``ids``."""
    if is_ivf(index):
        inner = faiss.extract_index_ivf(index)
        inner.add_sa_codes(np.ascontiguousarray(codes), np.ascontiguousarray(ids, dtype=np.int64))
    else:
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
        inner.add_sa_codes(np.ascontiguousarray(codes))
    index.ntotal = inner.ntotal  # a pre-transform (OPQ) wrapper keeps its own count


def stored_codes(index: faiss.Index, ids: np.ndarray) -> np.ndarray:
    """(len(ids), sa_code_size) uint8: the codes ``index`` holds for ``ids``, laid out as :func:`sa_encode`
    makes them (so :func:`add_codes` files them again): a flat-code index's (:func:`takes_codes`) by
    position; an IVF index's found through its direct map (:func:`finalize`), each after its list
    number (little-endian, as FAISS writes it); on-disk lists are read where they are mapped."""
    ids = np.asarray(ids, dtype=np.int64)
    if not is_ivf(index):
        inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
        inner = faiss.downcast_index(inner)
        codes = faiss.rev_swig_ptr(inner.codes.data(), inner.ntotal * inner.code_size)  # a view, not a copy
        return codes.reshape(inner.ntotal, inner.code_size)[ids]
    ivf = faiss.extract_index_ivf(index)
    if ivf.direct_map.type != faiss.DirectMap.Array:
        raise ValueError("the IVF index has no direct map: its codes cannot be found by id (finalize it)")
    # list number << 32 | offset in the list; a view of the direct map, not a copy of it for every call
    where = faiss.rev_swig_ptr(ivf.direct_map.array.data(), ivf.ntotal)[ids]
    lists, offsets = where >> 32, where & 0xFFFFFFFF
    coarse, size = ivf.coarse_code_size(), ivf.code_size
    out = np.empty((len(ids), coarse + size), dtype=np.uint8)
    out[:, :coarse] = (lists[:, None] >> (8 * np.arange(coarse))) & 0xFF
    order = np.argsort(lists, kind="stable")
    found, starts = np.unique(lists[order], return_index=True)
    for list_no, rows in zip(found.tolist(), np.split(order, starts[1:]), strict=True):
        n = ivf.invlists.list_size(list_no)
        codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(list_no), n * size).reshape(n, size)
        out[rows, coarse:] = codes[offsets[rows]]
    return out


def merge_ivf(trained: faiss.Index, shard_files: list[str], ivfdata: str | None = None) -> faiss.Index:
    """One IVF index from shard indexes (copies of ``trained`` holding each shard, ``faiss.write_index``).

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


def rescore(
    queries: np.ndarray, shortlist: np.ndarray, vectors_of: Callable[[np.ndarray], np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` (D, I) of each query over its ``shortlist`` of ids (nq, k'; -1 = none), scored
    exactly with the vectors ``vectors_of(ids)`` returns: a compact index's search re-ranked by
    full-precision inner products. Rows with fewer than ``k`` ids are padded with -1 / -inf.
    Queries go :data:`RESCORE_BATCH` at a time: their shortlists' vectors are read once, together."""
    D = np.full((len(queries), k), -np.inf, dtype=np.float32)
    I = np.full((len(queries), k), -1, dtype=np.int64)
    for lo in range(0, len(queries), RESCORE_BATCH):
        batch = shortlist[lo : lo + RESCORE_BATCH]
        ids = np.unique(batch[batch >= 0])
        sims = vectors_of(ids) @ np.asarray(queries[lo : lo + RESCORE_BATCH], dtype=np.float32).T  # (ids, batch)
        for col, found in enumerate(batch):
            found = found[found >= 0]
            mine = sims[np.searchsorted(ids, found), col]
            top = np.argpartition(-mine, k - 1)[:k] if len(mine) > k else np.arange(len(mine))
            top = top[np.argsort(-mine[top], kind="stable")]
            D[lo + col, : len(top)], I[lo + col, : len(top)] = mine[top], found[top]
    return D, I


def reconstruct(index: faiss.Index, ids: np.ndarray) -> np.ndarray:
    """Vectors (n, d) of the tokens ``ids`` as the index stores them (exact for Flat, decoded codes otherwise)."""
    return index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))
