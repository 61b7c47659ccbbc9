"""What FAISS index to build over a datastore, chosen up front like autofaiss (:func:`choose_index`): the factory,
its training sample, its default search parameters, whether its inverted lists live on disk, and what it will cost
(its bytes on disk and in memory, its training and encoding time at this machine's rates: :func:`index_rates`, a
probe of :mod:`npmcore.index.faiss_index`'s training and encoding, measured once and cached), within a RAM budget
when one is given. An :class:`IndexChoice` holds all of it; an index snapshot's plan
(:class:`npmcore.index.indexer.IndexPlan`) is a choice and the snapshot's id.

Imports the shared modules and :mod:`npmcore.index.faiss_index` (the steps its probe times)."""

import hashlib
import logging
import math
import time
from dataclasses import dataclass

import faiss
import numpy as np

from npmcore.durations import duration_in_one_unit
from npmcore.index.faiss_index import sa_encode, takes_codes, train_index

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
                f"training {duration_in_one_unit(self.train_s)}, "
                f"encoding {duration_in_one_unit(self.encode_s)} of worker time, "
                f"BM25 {duration_in_one_unit(self.bm25_s)}",
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
