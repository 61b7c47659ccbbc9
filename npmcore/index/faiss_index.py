"""FAISS indexes over a datastore: index-factory strings, inner product throughout.

An index holds every content token of a datastore under its global token id (shard
after shard, block after block). What to build is chosen up front (:func:`choose_index`,
like autofaiss: the factory, its training sample, whether the inverted lists live on disk,
and the expected size, memory and time, within a RAM budget when one is given). Building it
(:mod:`npmcore.index.indexer` drives these on a Dask cluster):

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

import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import faiss
import numpy as np

log = logging.getLogger(__name__)

BYTES_PER_TOKEN = 64  # the most the default index takes on disk a token: code (IVF ids, direct map) and token id
CODE_BYTES = 32  # the default's PQ code: a shortlist re-scored from the datastore needs no more (bench/factories.py)
TOKEN_BYTES = 2  # tokens.npy: a uint16 token id per token (vocabularies up to 65,536)
# Below, the default scans its PQ codes exhaustively; above, an IVF narrows the scan. Exhaustive search time grows
# with the tokens, an IVF's with the lists probed (docs/scale.md: measured by bench/scale.py and bench/factories.py).
IVF_FROM_TOKENS = 1_000_000
IVF_PROBE_SHARE = 64  # the default nprobe: 1 in 64 of the lists, at least IVF_MIN_PROBES
IVF_MIN_PROBES = 64  # 1,024 lists (1.2M tokens) need 64 probes as 4,096 do: 0.98 with k x 4, 16 probes 0.86
IVF_BYTES = 8 + 8  # an IVF list entry's id, and its direct-map entry
# The default shortlist of compressed indexes, re-scored exactly: k x RERANK. On the demo's datastore
# (bench/factories.py --rerank 3 4) PQ32np keeps 0.997 of the exact top-4096 at k x 4, as an OPQ rotation did at
# k x 3, and trains in 1-2 s where the rotation took 6 s (AMD EPYC) to 14-19 s (Intel with AMX); at 13.3M tokens
# (bench/scale.py, docs/scale.md) OPQ-IVF-PQ's k x 2 kept 0.92-0.93 at any nprobe, k x 4 0.98 at 1 list in 64.
RERANK = 4
# OPQ's alternating optimisation (the IVF default's rotation): FAISS's default is 50 rounds (34 s on the demo's
# 21,373 vectors); 5 rounds keep more of the exact top-4096 at k x 3 (0.9966) than 50 at k x 2 (0.9933)
OPQ_ITERATIONS = 5
RESCORE_BATCH = 16  # queries re-scored together: their shortlists' vectors (16 x 8,192 x 384 floats) read at once
TRAIN_SHARE = 32  # the default training sample: 1 in 32 of the tokens, within the bounds below
TRAIN_MIN = 20_000  # k-means of 256 centroids per PQ sub-quantizer wants 39 x 256 (about 10k) points
TRAIN_MAX = 100_000
IVF_TRAIN_PER_LIST = 30  # an IVF's coarse k-means: at least this many training points per list
# The plan's build rates are this machine's own (index_rates: a probe, cached); Lucene's is this project's 2-core
# machine's, measured by bench/pipeline.py (plan against log)
BM25_TOKENS_PER_S = 500_000  # Lucene indexing in one thread
# vectors the rate probe trains on: the least default sample (any corpus up to 640k tokens trains on it). An OPQ
# rotation's rounds cost much the same at a tenth of it (19 s for 21,373 vectors, 13 s for 4,096, on the 2-core
# machine with AMX): a probe of a smaller sample would not scale to the sample trained
PROBE_TRAIN = TRAIN_MIN
PROBE_ENCODE = 16_384  # vectors it encodes on one thread, as a worker encodes a shard's (a fifth of a second)
PROBE_LISTS = 256  # centroids of its k-means, timed for an IVF's coarse quantizer
# vector x list pairs its assignment to an IVF's lists scores on one thread (1-2 s): an IVF's encoding is mostly that at
# scale (8,192 flat lists: 2,500 vectors/s a thread where the PQ codes alone take 55,000, Intel with AMX)
PROBE_ASSIGN = 2**25


@dataclass(frozen=True)
class IndexChoice:
    """An index to build, and what it will cost (estimates from the measured rates above)."""

    factory: str
    search_params: str
    train_size: int
    rerank: int
    on_disk: bool
    reason: str  # why this factory
    tokens: int
    dim: int
    disk_bytes: int  # FAISS files and token ids
    ram_bytes: int  # what a process serving the index holds of it (memory-mapped lists and token ids left out)
    build_ram_bytes: int  # the largest of the build's processes, beyond its libraries: the training sample or the index

    @property
    def train_s(self) -> float:
        """Training the index on the driver, at this machine's rates (:func:`index_rates`)."""
        if _is_exact(self.factory):
            return 0.0
        rates, n = index_rates(self.factory, self.dim), min(self.train_size, self.tokens)
        return n * rates["train_s_per_vector"] + n * _nlist(self.factory) * rates.get("kmeans_s_per_point_list", 0.0)

    @property
    def encode_s(self) -> float:
        """Encoding the vectors, in worker-seconds (divide by the workers), at this machine's rates: their
        codes, and an IVF's assignment of each to a list."""
        rates = index_rates(self.factory, self.dim)
        assign = self.tokens * _nlist(self.factory) * rates.get("assign_s_per_point_list", 0.0)
        return self.tokens / rates["encode_tokens_per_s"] + assign

    @property
    def bm25_s(self) -> float:
        return self.tokens / BM25_TOKENS_PER_S

    def rows(self) -> list[tuple[str, str]]:
        """The plan, as (what, value) lines for a log or a table."""
        gib = 2**30
        rows = [
            ("factory", f"{self.factory} ({self.reason})"),
            (
                "search",
                f"{self.search_params or 'exhaustive'}; top k x {self.rerank} re-scored from the datastore"
                if self.rerank > 1
                else (self.search_params or "exhaustive"),
            ),
            ("training sample", f"{self.train_size:,} of {self.tokens:,} vectors"),
            (
                "index size",
                f"{self.disk_bytes / gib:.2f} GiB on disk ({self.disk_bytes / max(1, self.tokens):.1f} B/token)"
                + (", inverted lists memory-mapped" if self.on_disk else ""),
            ),
            ("memory", f"{self.ram_bytes / gib:.2f} GiB to serve, {self.build_ram_bytes / gib:.2f} GiB to build"),
            (
                "time",
                f"training {duration(self.train_s)}, encoding {duration(self.encode_s)} of worker time, "
                f"BM25 {duration(self.bm25_s)}",
            ),
        ]
        return rows


def choose_index(
    dim: int,
    tokens: int,
    *,
    factory: str | None = None,
    search_params: str | None = None,
    train_size: int | None = None,
    on_disk: bool = False,
    rerank: int | None = None,
    max_memory: int | None = None,
) -> IndexChoice:
    """The index to build over ``tokens`` vectors of ``dim`` dimensions; whatever is None is chosen.

    The default factory is a product quantizer of :data:`CODE_BYTES` 8-bit sub-quantizers (dividing
    ``dim``; fewer where :data:`BYTES_PER_TOKEN` with the token id says so), its search re-scored from
    the datastore (``rerank``): exhaustive ``PQ{m}np`` (no ids: a token's id is its position) up to
    :data:`IVF_FROM_TOKENS` tokens, ``OPQ{m},IVF{~sqrt n},PQ{m}np`` beyond, after an OPQ rotation
    (``np``: no polysemous training). Within ``max_memory``
    (bytes a serving process may hold): the same in RAM when it fits, else IVF with its inverted
    lists memory-mapped (``on_disk``); a budget even that exceeds is refused with the least one.
    """
    reason = "given"
    if factory is None:
        ivf = tokens > IVF_FROM_TOKENS or on_disk
        factory = default_factory(dim, tokens, ivf)
        reason = f"{CODE_BYTES}-byte PQ codes find a shortlist that the datastore re-scores; " + (
            f"IVF above {IVF_FROM_TOKENS:,} tokens"
            if tokens > IVF_FROM_TOKENS
            else f"exhaustive up to {IVF_FROM_TOKENS:,} tokens"
        )
        if max_memory is not None and _ram_bytes(factory, dim, tokens, on_disk) > max_memory:
            if not on_disk:
                factory, on_disk = default_factory(dim, tokens, True), True
                reason += f"; IVF with memory-mapped lists to fit {max_memory / 2**30:.2f} GiB"
            need = _ram_bytes(factory, dim, tokens, True)
            if need > max_memory:
                raise ValueError(
                    f"max_memory {max_memory / 2**30:.2f} GiB is too little for {tokens:,} tokens: even {factory} "
                    f"with memory-mapped lists holds {need / 2**30:.2f} GiB (its direct map)"
                )
    ivf = "IVF" in factory
    if on_disk and not ivf:
        raise ValueError(f"on_disk needs an IVF index, got factory {factory!r}")
    if search_params is None:
        search_params = _default_search_params(factory)
    if rerank is None:
        rerank = 1 if _is_exact(factory) else RERANK
    if rerank < 1:
        raise ValueError(f"rerank must be >= 1, got {rerank}")
    if train_size is None:
        train_size = default_train_size(tokens, _nlist(factory))
    code = _code_bytes(factory, dim)
    disk = tokens * (code + TOKEN_BYTES + (IVF_BYTES if ivf else 0))
    ram = _ram_bytes(factory, dim, tokens, on_disk)
    sample = min(train_size, tokens) * dim * 4
    return IndexChoice(
        factory=factory,
        search_params=search_params,
        train_size=train_size,
        rerank=rerank,
        on_disk=on_disk,
        reason=reason,
        tokens=tokens,
        dim=dim,
        disk_bytes=disk,
        ram_bytes=ram,
        build_ram_bytes=max(3 * sample, ram),  # the sample and its rotated copies; then the gathered index
    )


def index_rates(factory: str, dim: int) -> dict[str, float]:
    """This machine's rates of building an index of ``factory`` over ``dim``-dimensional vectors, measured once
    and cached (:func:`npmcore.machine.measured_rates`): ``train_s_per_vector`` (the factory without its IVF
    trained on :data:`PROBE_TRAIN` vectors on all cores, as the driver trains: seconds to a minute),
    ``kmeans_s_per_point_list`` (an IVF's coarse k-means, per training vector and list),
    ``assign_s_per_point_list`` (its coarse quantizer assigning vectors to its lists, one thread, per vector and
    list: about :data:`PROBE_ASSIGN` pairs) and ``encode_tokens_per_s`` (one thread, as a worker encodes a shard:
    its float16 vectors' checksum verified, then their codes; an index that takes no codes adds its vectors).
    Seeded Gaussian vectors stand in for the datastore's: k-means rounds, OPQ rounds, a flat quantizer's
    assignment and encoding cost the same whatever the vectors are (a graph quantizer's search somewhat less on
    real vectors)."""
    from npmcore.machine import cpu_description, cpu_flags, measured_rates

    threads = faiss.omp_get_max_threads()
    machine = f"{cpu_description(cpu_flags())} faiss {faiss.__version__} threads {threads} shards verified"
    shape = ",".join(part for part in factory.split(",") if not part.startswith("IVF"))
    nlist = _nlist(factory)
    kmeans = nlist > 0

    def measure() -> dict[str, float]:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((max(PROBE_TRAIN, PROBE_ENCODE), dim), dtype=np.float32)
        started = time.perf_counter()
        index = train_index(shape, x[:PROBE_TRAIN])
        rates = {"train_s_per_vector": (time.perf_counter() - started) / PROBE_TRAIN}
        if kmeans:
            clustering = faiss.Kmeans(dim, PROBE_LISTS, niter=faiss.ClusteringParameters().niter, seed=0)
            started = time.perf_counter()
            clustering.train(x[:PROBE_TRAIN])
            rates["kmeans_s_per_point_list"] = (time.perf_counter() - started) / (PROBE_TRAIN * PROBE_LISTS)
        shard = x[:PROBE_ENCODE].astype(np.float16)
        faiss.omp_set_num_threads(1)
        try:
            if kmeans:  # the trained IVF's quantizer: nlist centroids in its own index ("IVF8192_HNSW32": HNSW32)
                ivf_part = next(part for part in factory.split(",") if part.startswith("IVF"))
                quantizer = faiss.index_factory(dim, ivf_part.partition("_")[2] or "Flat", faiss.METRIC_INNER_PRODUCT)
                quantizer.add(rng.standard_normal((nlist, dim), dtype=np.float32))
                n = max(1, min(PROBE_ENCODE, PROBE_ASSIGN // nlist))
                started = time.perf_counter()
                quantizer.search(x[:n], 1)
                rates["assign_s_per_point_list"] = (time.perf_counter() - started) / (n * nlist)
            started = time.perf_counter()
            hashlib.sha256(shard.data).hexdigest()
            if takes_codes(index):
                sa_encode(index, shard)
            else:
                index.add(shard.astype(np.float32))
            rates["encode_tokens_per_s"] = PROBE_ENCODE / (time.perf_counter() - started)
        finally:
            faiss.omp_set_num_threads(threads)
        assign = ""
        if kmeans:
            assign = f"; assigning them to {nlist:,} lists {1 / (nlist * rates['assign_s_per_point_list']):,.0f}/s"
        log.info(
            "index rate probe of %s: training %.2f ms a vector, encoding %s vectors/s on one thread%s",
            shape, 1000 * rates["train_s_per_vector"], f"{rates['encode_tokens_per_s']:,.0f}", assign,
        )  # fmt: skip
        return rates

    ivf = f"-ivf{nlist}" if kmeans else ""  # its lists' number: the assignment's rate is timed at it
    return measured_rates("index-rates", machine, f"{shape.replace(',', '-')}-{dim}{ivf}", measure)


def duration(seconds: float) -> str:
    """``7 s``, ``2.5 min``, ``3.1 h``."""
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.1f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def default_factory(dim: int, tokens: int, ivf: bool) -> str:
    """The default factory of ``tokens`` vectors, exhaustive or IVF (see :func:`choose_index`)."""
    budget = min(CODE_BYTES, BYTES_PER_TOKEN - TOKEN_BYTES - (IVF_BYTES if ivf else 0))
    m = max(m for m in range(1, budget + 1) if dim % m == 0)
    if not ivf:
        return f"PQ{m}np"
    return f"OPQ{m},IVF{ivf_lists(tokens)},PQ{m}np"


def ivf_lists(tokens: int) -> int:
    """Inverted lists of the default IVF: the power of two nearest sqrt(tokens), 16 to 65,536."""
    return 2 ** min(16, max(4, round(math.log2(math.sqrt(max(1, tokens))))))


def _nlist(factory: str) -> int:
    for part in factory.split(","):
        if part.startswith("IVF"):
            return int("".join(c for c in part[3:].split("_")[0] if c.isdigit()) or 1)
    return 0


def _is_exact(factory: str) -> bool:
    return factory.split(",")[-1] == "Flat" and "IVF" not in factory


def _code_bytes(factory: str, dim: int) -> int:
    """Bytes of one vector's code (an index of the factory, built empty: nothing is trained)."""
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT).sa_code_size()
    except RuntimeError as e:
        raise ValueError(f"invalid FAISS index-factory string {factory!r}: {str(e).strip().splitlines()[-1]}") from None


def _ram_bytes(factory: str, dim: int, tokens: int, on_disk: bool) -> int:
    """Bytes a serving process holds: codes (unless memory-mapped), IVF ids and direct map, the coarse centroids."""
    ivf = "IVF" in factory
    per_token = (0 if on_disk else _code_bytes(factory, dim) + (8 if ivf else 0)) + (8 if ivf else 0)
    return tokens * per_token + _nlist(factory) * dim * 4


def default_train_size(n_tokens: int, nlist: int = 0) -> int:
    """Vectors sampled to train an index of ``n_tokens`` tokens: 1 in :data:`TRAIN_SHARE`, between
    :data:`TRAIN_MIN` and :data:`TRAIN_MAX`, so that training costs a small share of embedding the
    corpus (an IVF's OPQ rotation trains at about 1.3 ms a vector on two cores, the encoder embeds 0.1-0.3 ms
    a token); an IVF of ``nlist`` lists gets at least :data:`IVF_TRAIN_PER_LIST` a list. Measured by
    ``bench/factories.py`` on the embedded default corpus (683,959 tokens, 21,373 vectors instead of
    100k): docs/index-and-query.md."""
    return max(min(TRAIN_MAX, max(TRAIN_MIN, n_tokens // TRAIN_SHARE)), IVF_TRAIN_PER_LIST * nlist)


def _default_search_params(factory: str) -> str:
    """IVF: probe 1 in :data:`IVF_PROBE_SHARE` of the lists (at least :data:`IVF_MIN_PROBES`); HNSW: efSearch 128;
    others: none."""
    for part in factory.split(","):
        if part.startswith("IVF"):
            nlist = _nlist(factory)
            return f"nprobe={min(nlist, max(IVF_MIN_PROBES, nlist // IVF_PROBE_SHARE))}"
        if part.startswith("HNSW"):
            return "efSearch=128"
    return ""


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
