"""Exact top-k and top-k agreement, shared by the benchmarks that compare vectors or indexes."""

import numpy as np


def top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Ids (len(queries), k) of the exact top-k inner products of ``vectors[queries]`` over ``vectors``."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index.search(np.ascontiguousarray(vectors[queries], dtype=np.float32), k)[1]


def overlap(found, truth) -> float:
    """Mean share of each row of ``truth`` (exact top-k ids) that the same row of ``found`` holds."""
    return float(np.mean([len(np.intersect1d(a, b)) / len(b) for a, b in zip(found, truth, strict=True)]))
