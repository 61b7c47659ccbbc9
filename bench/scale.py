"""Benchmark: the pipeline at the size of its job, stage by stage, on growing real corpora.

Usage: python bench/scale.py [--files 0 8 16 32 64] [--k 4096] [--queries 64] [--no-layouts]
                             [--nprobe 16 32 64 128 256] [--rerank 1 2 4] [--fault] [--keep DIR]
                             [--plot PNG]
       python bench/scale.py --merge OUTPUT [OUTPUT ...] [--plot PNG]

Each point is the embedded default corpus plus the first N files of ../shared/data/enwiki_sample
(``--files``: 0 is the default corpus alone, 64 all of the 96k-article extract), run through the
real flows a user runs (``ingest_corpus``, then ``index_corpus``: datastore, FAISS, BM25) on a
local Dask cluster of two single-threaded workers and one Prefect API, in a fresh store and a fresh
driver process (with its own workers) per point. Per stage (ingest, embed, index, bm25; their
times are the Prefect task runs'): seconds, tokens/s, and the peak RSS of the driver (the point's
process: the flows, FAISS gathering, the Lucene JVM) and of each worker, sampled every 0.2 s (also
their anonymous memory: RSS less file-backed pages). Then, per point: bytes on disk per content
token of the corpus, datastore, FAISS index (with token ids and offsets) and BM25 index; the
index's recall of the exact top-k (brute force, shard by shard over the datastore) for the two mask
vectors of ``--queries`` real masked sentences of wiki_63 (indexed or not); warm
open-set (top-3 BM25 passages) and closed-set (kNN, label words) latency of one query at a time.

At the largest point (unless ``--no-layouts``) the other layout of that size is built too (IVF-PQ
when the default scans its PQ codes exhaustively, else the exhaustive PQ), and both are searched
with every ``--rerank`` (IVF: at every ``--nprobe``): recall of the exact top-k and the p50 latency
of one query vector's search, which is where IVF starts paying; ``--fault`` embeds the same corpus again into another
store, kills a worker process once half of the shards are done, and checks the datastore it
finishes against the uninterrupted one (every file's sha256) and that no shard finished before the
kill was embedded again. Nothing else should run on the machine meanwhile.

Prints one line per point and, last, one JSON object:
``{"points": [{"files", "tokens", "seconds": {stage}, "tokens_per_s": {stage}, "peak_rss_mb": {stage},
"rss_mb": {stage: {"driver", "workers"}}, "bytes_per_token": {"corpus", "datastore", "index", "bm25"},
"factory", "recall_at_k", "p50_open_ms", "p95_open_ms", "p50_closed_ms", "p95_closed_ms"}],
"exponent": {stage}, "rss_growth", "layouts", "fault"}``: ``exponent`` is the slope of log seconds over
log tokens between the smallest and the largest point, ``rss_growth`` the largest stage peak RSS at
the largest point over the same at the second largest.
"""

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "enwiki_sample"
STAGES = {"ingest": "ingest-corpus", "embed": "build-datastore", "index": "build-faiss", "bm25": "build-bm25"}
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()


class RssSampler:
    """Peak RSS per process over time: this process and the given worker processes, every ``every`` s."""

    def __init__(self, workers: list[int], every: float = 0.2):
        import psutil

        self.processes = {"driver": psutil.Process()} | {f"worker-{pid}": psutil.Process(pid) for pid in workers}
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            rss = {}
            for name, process in self.processes.items():
                try:
                    info = process.memory_info()
                except Exception:  # a worker that died (the fault run) or restarted
                    continue
                rss[name], rss[f"{name} anon"] = info.rss, info.rss - info.shared  # anon: less file-backed pages
            self.samples.append((time.time(), rss))

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def peaks(self, start: float, end: float) -> dict[str, float]:
        """MB within [start, end]: the driver's peak RSS and the largest worker's, and the same of their
        anonymous memory (RSS less file-backed pages: memory-mapped shards the kernel can drop)."""
        inside = [rss for t, rss in self.samples if start <= t <= end] or [self.samples[-1][1]]

        def peak(anon: bool, driver: bool) -> float:
            keys = lambda r: [k for k in r if k.endswith(" anon") == anon and k.startswith("driver") == driver]  # noqa: E731
            return round(max((r[k] for r in inside for k in keys(r)), default=0) / 2**20, 1)

        return {
            "driver": peak(False, True),
            "workers": peak(False, False),
            "driver_anon": peak(True, True),
            "workers_anon": peak(True, False),
        }


def task_times(flow_run_id) -> dict[str, tuple[float, float]]:
    """(start, end) epoch seconds of each task run of a flow run, by task name (its run suffix dropped)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name.rsplit("-", 1)[0]: (run.start_time.timestamp(), run.end_time.timestamp()) for run in runs}


def folder_bytes(url: str, prefix: str | None = None, exclude: str | None = None) -> int:
    from npmcore.storage import read_manifest

    files = read_manifest(url).files
    return sum(
        e.bytes
        for p, e in files.items()
        if (prefix is None or p.startswith(prefix)) and (exclude is None or not p.startswith(exclude))
    )


def exact_top_k(datastore: str, queries: np.ndarray, k: int) -> np.ndarray:
    """Ids (nq, k) of the exact top-k inner products over the datastore, one shard in memory at a time."""
    from npmcore.snapshots import iter_shards

    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for first, arrays in iter_shards(datastore):
        vectors = np.asarray(arrays["vectors"], dtype=np.float32)
        if not len(vectors):
            continue
        sims = queries @ vectors.T
        keep = min(k, sims.shape[1])
        top = np.argpartition(-sims, keep - 1, axis=1)[:, :keep]
        cand_s = np.concatenate([best_s, np.take_along_axis(sims, top, 1)], axis=1)
        cand_i = np.concatenate([best_i, top + first], axis=1)
        order = np.argsort(-cand_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, order, 1), np.take_along_axis(cand_i, order, 1)
    return best_i


def latencies(npm, queries: list[str], k: int) -> dict[str, float]:
    """Warm latency of one query at a time: open-set (BM25-restricted) and closed-set (kNN, two labels)."""
    from npmcore.answer.inference import InferenceConfig
    from npmcore.answer.tokens import classify

    labels = [np.array(npm.tokenizer.convert_tokens_to_ids(w)) for w in (["great", "good"], ["terrible", "bad"])]
    npm.predict(queries[:2], InferenceConfig(restrict=True))  # starts the JVM
    classify(npm, queries[:2], labels, config=InferenceConfig(k=k, tau=5.0))
    ms = {"open": [], "closed": []}
    for query in queries:
        start = time.perf_counter()
        npm.predict([query], InferenceConfig(restrict=True))
        ms["open"].append(1000 * (time.perf_counter() - start))
        start = time.perf_counter()
        classify(npm, [query], labels, config=InferenceConfig(k=k, tau=5.0))
        ms["closed"].append(1000 * (time.perf_counter() - start))
    return {f"p{p}_{kind}_ms": round(float(np.percentile(v, p)), 1) for kind, v in ms.items() for p in (50, 95)}


def build_point(files: int, store: Path) -> dict:
    """Run the flows on the default corpus plus ``files`` extract files into ``store``, in this process
    (a fresh one per point: ``--point``) with a local cluster of two workers; stage times and peak RSS."""
    from distributed import Client

    from flows.index import IndexParams, index_corpus
    from flows.ingest import ingest_corpus
    from flows.params import ClusterParams, IngestParams
    from flows.prefect_api import prefect_api
    from npmcore.cluster import dask_cluster
    from npmcore.corpus.readers import default_corpus

    inputs = [*default_corpus(), *(str(DATA / f"wiki_{i:02d}") for i in range(files))]
    times = {}
    with prefect_api(), dask_cluster(n_workers=2) as address:
        with Client(address) as client:
            workers = list(client.run(os.getpid).values())
        cluster = ClusterParams(dask_address=address)
        with RssSampler(workers) as rss:
            state = ingest_corpus(IngestParams(inputs=inputs, store=str(store), cluster=cluster), return_state=True)
            corpus = state.result()
            times.update(task_times(state.state_details.flow_run_id))
            state = index_corpus(IndexParams(store=str(store), corpus=corpus, cluster=cluster), return_state=True)
            index = state.result()
            times.update(task_times(state.state_details.flow_run_id))
    return {
        "corpus": corpus,
        "index": index,
        "seconds": {stage: times[task][1] - times[task][0] for stage, task in STAGES.items()},
        "rss_mb": {stage: rss.peaks(*times[task]) for stage, task in STAGES.items()},
    }


def measure_point(files: int, root: Path, args) -> tuple[dict, dict]:
    """Build a point in a fresh process, then measure its index here; the point's figures, and what
    the later measurements need (store, corpus, datastore, index, query vectors, exact top-k)."""
    from index import masked_sentences
    from topk import overlap

    from npmcore.answer.inference import NPM
    from npmcore.snapshots import open_index
    from npmcore.storage import read_manifest

    store = root / f"files-{files}"
    run = subprocess.run(
        [sys.executable, __file__, "--point", str(files), "--store", str(store)], stdout=subprocess.PIPE, text=True
    )
    if run.returncode != 0:
        raise SystemExit(f"the flows failed at {files} files (exit status {run.returncode})")
    built = json.loads(run.stdout.strip().splitlines()[-1])
    corpus, index = built["corpus"], built["index"]
    datastore = open_index(index).datastore
    manifest = read_manifest(index)
    tokens = manifest.counts["tokens"]
    npm = NPM(index)
    queries = masked_sentences(DATA / "wiki_63", args.queries)
    q = npm.encode_queries(queries, 2).reshape(-1, npm.retrieval.index.d) * npm.scale
    truth = exact_top_k(datastore, q, args.k)
    _, found = npm.retrieval.search(q, args.k)
    point = {
        "files": files,
        "tokens": tokens,
        "seconds": {s: round(v, 1) for s, v in built["seconds"].items()},
        "tokens_per_s": {s: round(tokens / v, 1) for s, v in built["seconds"].items()},
        "peak_rss_mb": {s: max(v["driver"], v["workers"]) for s, v in built["rss_mb"].items()},
        "rss_mb": built["rss_mb"],
        "bytes_per_token": {
            "corpus": round(folder_bytes(corpus) / tokens, 2),
            "datastore": round(folder_bytes(datastore) / tokens, 2),
            "index": round(folder_bytes(index, exclude="bm25/") / tokens, 2),
            "bm25": round(folder_bytes(index, prefix="bm25/") / tokens, 2),
        },
        "factory": manifest.config["factory"],
        "rerank": manifest.config["rerank"],
        "search_params": manifest.config["search_params"],
        "recall_at_k": round(overlap(found, truth), 4),
        **latencies(npm, queries, args.k),
    }
    return point, {"store": store, "corpus": corpus, "datastore": datastore, "index": index, "q": q, "truth": truth}


def measure_layouts(last: dict, address: str, args) -> list[dict]:
    """At the largest point: the default index and the other layout of the same size (exhaustive PQ or
    IVF-PQ, whichever the default is not), each searched with every ``--rerank`` (and, IVF, every
    ``--nprobe``): recall of the exact top-k and the p50 latency of one query vector's search."""
    from distributed import Client
    from topk import overlap

    from npmcore.answer.inference import NPM
    from npmcore.index.faiss_index import is_ivf
    from npmcore.index.index_choice import default_factory
    from npmcore.index.indexer import IndexConfig, build_index
    from npmcore.storage import read_manifest

    default = NPM(last["index"])
    ivf = is_ivf(default.retrieval.index)
    other = default_factory(default.retrieval.index.d, default.retrieval.index.ntotal, ivf=not ivf)
    start = time.perf_counter()
    with Client(address) as client:
        url = build_index(last["datastore"], IndexConfig(factory=other, bm25=False), client)
    build_s = time.perf_counter() - start
    layouts = []
    for npm, built_s in ((default, None), (NPM(url), build_s)):
        manifest = read_manifest(npm.url)
        rows = []
        for nprobe in args.nprobe if is_ivf(npm.retrieval.index) else [None]:
            for rerank in args.rerank:
                params = None if nprobe is None else f"nprobe={nprobe}"
                _, found = npm.retrieval.search(last["q"], args.k, rerank, params)
                timed = []
                for row in last["q"]:
                    start = time.perf_counter()
                    npm.retrieval.search(row[None], args.k, rerank, params)
                    timed.append(1000 * (time.perf_counter() - start))
                rows.append(
                    {
                        "nprobe": nprobe,
                        "rerank": rerank,
                        "recall_at_k": round(overlap(found, last["truth"]), 4),
                        "p50_search_ms": _p50(timed),
                    }
                )
                print(f"{manifest.config['factory']}: {rows[-1]}", file=sys.stderr, flush=True)
        layouts.append(
            {
                "factory": manifest.config["factory"],
                "default": built_s is None,
                "build_s": built_s,
                "bytes_per_token": round(folder_bytes(npm.url, exclude="bm25/") / manifest.counts["tokens"], 2),
                "rows": rows,
            }
        )
    return layouts


def _p50(ms: list[float]) -> float:
    return round(float(np.percentile(ms, 50)), 1)


def measure_fault(last: dict, root: Path, address: str) -> dict:
    """Embed the largest corpus again into another store, kill a worker halfway; compare with the first datastore."""
    from distributed import Client

    from npmcore.index.datastore import build_datastore
    from npmcore.storage import open_snapshot

    store = root / "fault"
    shards = len(open_snapshot(last["corpus"]).files)
    killed: dict = {}

    def kill_halfway(client: Client) -> None:
        while True:
            done = list(store.glob("datastore/.partial-*/shards/*.json"))
            if len(done) >= shards // 2:
                break
            time.sleep(0.5)
        killed["finished_before"] = {p.stem: p.stat().st_mtime_ns for p in done}
        pid = next(iter(client.run(os.getpid).values()))
        os.kill(pid, signal.SIGKILL)
        killed["pid"] = pid
        killed["at"] = time.time()

    results = []
    with Client(address) as client:
        killer = threading.Thread(target=kill_halfway, args=(client,), daemon=True)
        killer.start()
        start = time.perf_counter()
        url = build_datastore(last["corpus"], str(store), client=client, on_shard=results.append)
        seconds = time.perf_counter() - start
        killer.join(timeout=1)
    clean, faulted = open_snapshot(last["datastore"]).files, open_snapshot(url).files
    # a shard embedded again would have rewritten its marker (the staging folder became the snapshot, mtimes kept)
    finished = killed.get("finished_before", {})
    embedded_again = [n for n, t in finished.items() if (Path(url) / "shards" / f"{n}.json").stat().st_mtime_ns != t]
    return {
        "killed_worker_pid": killed.get("pid"),
        "shards": shards,
        "finished_before_kill": len(killed.get("finished_before", [])),
        "resumed": sum(r.resumed for r in results),
        "embedded_again": embedded_again,
        "identical": clean == faulted,
        "seconds": round(seconds, 1),
    }


def exponent(points: list[dict], stage: str) -> float:
    a, b = points[0], points[-1]
    return round(math.log(b["seconds"][stage] / a["seconds"][stage]) / math.log(b["tokens"] / a["tokens"]), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[0, 8, 16, 32, 64], help="extract files per point")
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--queries", type=int, default=64, help="masked sentences (two query vectors each)")
    parser.add_argument("--layouts", action=argparse.BooleanOptionalAction, default=True, help="exhaustive vs IVF")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[16, 32, 64, 128, 256], help="IVF nprobe values")
    parser.add_argument("--rerank", type=int, nargs="+", default=[1, 2, 4], help="shortlists of k x N, re-scored")
    parser.add_argument("--fault", action="store_true", help="kill a worker while embedding the largest point again")
    parser.add_argument("--keep", default=None, help="folder for the stores, kept (default: a temporary one)")
    parser.add_argument("--plot", help="also draw seconds and peak RSS per stage against tokens into this PNG")
    parser.add_argument(
        "--merge", nargs="+", help="run nothing: summarize (and --plot) the points of earlier runs' outputs"
    )
    parser.add_argument("--point", type=int, help=argparse.SUPPRESS)  # one point's flows, in a fresh process
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point is not None:
        print(json.dumps(build_point(args.point, Path(args.store))))
        return
    if args.merge:
        report(*merged(args.merge), args.plot)
        return
    if sorted(set(args.files)) != args.files or not 0 <= args.files[0] or args.files[-1] > 64:
        parser.error("--files: increasing numbers of extract files, 0 to 64")

    from npmcore.cluster import dask_cluster

    with tempfile.TemporaryDirectory(prefix="npm-scale-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        points, last = [], None
        for files in args.files:
            point, state = measure_point(files, root, args)
            points.append(point)
            print(json.dumps(point), file=sys.stderr, flush=True)
            if last is not None and not args.keep:
                shutil.rmtree(last["store"])  # disk: only the largest store is kept for what follows
            last = state
        with dask_cluster(n_workers=2) as address:
            layouts = measure_layouts(last, address, args) if args.layouts else None
            fault = measure_fault(last, root, address) if args.fault else None
    report(points, layouts, fault, args.plot)


def report(points: list[dict], layouts: list[dict] | None, fault: dict | None, png: str | None) -> None:
    """Print the run's JSON line (growth exponents and RSS growth from its points); draw ``png``."""
    largest = max(points[-1]["peak_rss_mb"].values())
    result = {
        "points": points,
        "exponent": {stage: exponent(points, stage) for stage in STAGES} if len(points) > 1 else {},
        "rss_growth": round(largest / max(points[-2]["peak_rss_mb"].values()), 3) if len(points) > 1 else None,
        "layouts": layouts,
        "fault": fault,
    }
    if png:
        plot(result, Path(png))
    print(json.dumps(result))


def merged(outputs: list[str]) -> tuple[list[dict], list[dict] | None, dict | None]:
    """The points (one line each, a later run's point replacing an earlier one of the same size), layouts
    and fault of earlier runs' outputs, for a curve whose points were measured by several runs of this
    benchmark (the same code)."""
    points: dict[int, dict] = {}
    layouts = fault = None
    for output in outputs:
        for line in Path(output).read_text().splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "files" in record:
                points[record["files"]] = record
            layouts = record.get("layouts") or layouts
            fault = record.get("fault") or fault
    if not points:
        raise SystemExit(f"--merge: no points in {', '.join(outputs)}")
    return [points[f] for f in sorted(points)], layouts, fault


def plot(result: dict, path: Path) -> None:
    """Seconds (log-log, with the slope-1 line through each stage's first point) and peak RSS per stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    tokens = np.array([p["tokens"] for p in points]) / 1e6
    fig, (time_ax, rss_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for stage in STAGES:
        seconds = np.array([p["seconds"][stage] for p in points])
        (line,) = time_ax.loglog(tokens, seconds, "o-", label=f"{stage} (exponent {result['exponent'][stage]:.2f})")
        time_ax.loglog(tokens, seconds[0] * tokens / tokens[0], ":", color=line.get_color(), alpha=0.5)
        rss_ax.plot(tokens, [p["peak_rss_mb"][stage] / 1024 for p in points], "o-", label=stage)
    time_ax.set(xlabel="corpus tokens (millions)", ylabel="seconds", title="Stage time (dotted: linear growth)")
    rss_ax.set(xlabel="corpus tokens (millions)", ylabel="GiB", title="Peak RSS of the largest process")
    rss_ax.set_ylim(bottom=0)
    for ax in (time_ax, rss_ax):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("bench/scale.py: the flows on 2 workers, 2 cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
