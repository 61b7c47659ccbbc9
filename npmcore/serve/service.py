"""The query service behind ``npmcore api``: the served index, hot-swapped, and the batches of queries run on it.

Concurrent requests are batched: a request waits at most ``max_wait_ms`` for others to share its
encoder forward, batches hold at most ``max_batch`` queries, and a bounded queue refuses more
(:class:`Overloaded`: 503 with ``Retry-After``, never a hang). The served index follows the store's serving pointer
(:mod:`npmcore.serve.serving`): a watcher loads a new index beside the old one, checks it (checksums,
its datastore's sizes, counts, canary queries) and switches in one assignment; requests already
holding the old index finish on it, and it is dropped when the last of them is done. An index that
cannot be loaded or fails a check (corrupt, missing, a pointer written by hand) is refused and the
old one keeps serving; it is kept as the :class:`Refusal` that ``/v1/index`` names until the pointer names an index
served, and the metrics and the log say so too. A refused index is tried again when the pointer is written again.

No HTTP here (the FastAPI application is :mod:`npmcore.serve.api`): imports the answer stage, the precision
settings of the index stage, the serving pointer, and the snapshots and storage at the top.
"""

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from npmcore.answer.answering import replies, reply_json, sure_from
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.retrieval import Unsupported
from npmcore.answer.sure import sure_of
from npmcore.answer.tokens import classify, label_token_ids
from npmcore.ask.asking import ask
from npmcore.index.precision import Setting
from npmcore.serve.serving import Serving, check_datastore, serving_pointer
from npmcore.snapshots import open_corpus
from npmcore.storage import read_manifest

log = logging.getLogger(__name__)
CANARIES = ["The capital of France is [MASK].", "[MASK] is a city."]  # any index answers these with something


@dataclass
class Settings:
    """What the service serves and how (``npmcore api``'s options)."""

    store: str
    index: str | None = None  # a fixed index (the pointer is then not followed)
    max_batch: int = 16  # queries per batch
    max_wait_ms: float = 3.0  # how long a request waits for others to share its batch
    queue_limit: int = 64  # queued queries beyond which requests get 503
    max_queries: int = 32  # queries per request
    max_query_chars: int = 1000
    max_body_bytes: int = 64 * 1024
    poll_s: float = 2.0  # how often the serving pointer is read
    token: str | None = None  # bearer token every request but /livez and /readyz must carry
    precision: Setting = "auto"  # of the query encoder (npmcore.index.precision)
    # the encoder of queries (a query encoder: npmcore.model.query_encoder); None: each index's own
    model: str | None = None


class Served:
    """An index loaded for queries, with the requests using it (freed when retired and unused)."""

    def __init__(self, url: str, precision: Setting = "auto", model: str | None = None):
        self.url = url
        self.npm = NPM(url, encoder=model, precision=precision)  # verifies every file's checksum
        self.manifest = read_manifest(url)
        self.sources = open_corpus(self.npm.index_snapshot.corpus).sources  # what its answers come from
        self.loaded_at = time.time()
        self.in_flight = 0
        self.retired = False

    def refusals(self) -> dict[str, str | None]:
        """Why this index cannot answer each kind of request (None: it can): predict restricted to its
        top BM25 passages, predict by kNN search of its vectors, classify (kNN search too)."""
        knn = self.npm.retrieval.refused(restrict=False)
        return {"restricted": self.npm.retrieval.refused(restrict=True), "knn": knn, "classify": knn}

    def answers(self) -> dict[str, bool]:
        """The kinds of request this index answers (``/v1/index``)."""
        return {kind: why is None for kind, why in self.refusals().items()}

    def check(self) -> None:
        """Refuse an index whose parts disagree with its manifest or that cannot answer."""
        check_datastore(self.npm.index_snapshot)  # its own files' checksums: NPM verified them
        counts = self.manifest.counts
        vectors = (
            counts["tokens"] if self.npm.retrieval.index is None else self.npm.retrieval.index.ntotal
        )  # BM25 alone: no vectors
        if vectors != counts["tokens"] or len(self.npm.corpus.tokens) != counts["tokens"]:
            raise ValueError(
                f"index {self.url}: {vectors} vectors and {len(self.npm.corpus.tokens)} token ids, "
                f"its manifest says {counts['tokens']}"
            )
        if len(self.npm.corpus.offsets) != counts["blocks"] + 1:
            raise ValueError(
                f"index {self.url}: {len(self.npm.corpus.offsets) - 1} blocks, manifest {counts['blocks']}"
            )
        # its table of articles opened now, not by the first query that asks for a kind (an index from before it held
        # one gets one written into the cache here, before it serves)
        log.info("index %s: articles' openings read from %s", self.url, self.npm.articles.path)
        # also warms the encoder, BM25 and the datastore reads
        answered = self.npm.predict(CANARIES, InferenceConfig(restrict=self.answers()["restricted"]))
        if not any(answered):
            raise ValueError(f"index {self.url} answers none of its canary queries")

    def close(self) -> None:
        self.npm.close()


def confidence_of(npm: NPM) -> dict:
    """What ``/v1/index`` says of the answers' confidence: whether there is one, the default threshold (from which an
    answer is shown as sure), what the calibrator was fitted on, and whether replies are checked and rated by a
    reply's confidence (:mod:`npmcore.answer.sure`)."""
    if npm.calibrator is None:
        return {"calibrated": False, "min_confidence": None, "fitted_on": None, "checked": False}
    checked = sure_of(npm.encoder_source, npm.calibrator) is not None
    return {
        "calibrated": True,
        "min_confidence": sure_from(npm),
        "fitted_on": npm.calibrator.provenance,
        "checked": checked,
    }


@dataclass(frozen=True)
class Refusal:
    """An index the service would not serve, and why (``/v1/index``, ``/readyz``)."""

    index: str
    reason: str  # the error's first line: the file that failed its checksum, the check that failed
    pointer_at: str | None  # when the pointer naming it was written (None: --index); written again: tried again

    def public(self) -> dict[str, str]:
        return {"index": self.index, "reason": self.reason}


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("npm_requests", "Requests answered", ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram(
            "npm_request_seconds",
            "Request latency",
            ["endpoint"],
            buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=self.registry,
        )
        self.batch = Histogram(
            "npm_batch_queries", "Queries per batch", buckets=(1, 2, 4, 8, 16, 32), registry=self.registry
        )
        self.served = Gauge("npm_served_index", "The served index (1)", ["index"], registry=self.registry)
        self.swaps = Counter("npm_index_swaps", "Indexes swapped in", registry=self.registry)
        self.refused = Counter("npm_index_refused", "Indexes refused", ["reason"], registry=self.registry)


class Overloaded(Exception):
    """The queue is full: the client should come back later."""


@dataclass
class Item:
    """A query of a request, queued to be answered in a batch (``request``: its settings)."""

    query: str
    request: Any
    extra: dict = field(default_factory=dict)


def run_predict(service: "Service", items: list[Item]) -> list[dict | Unsupported]:
    """Answer a batch of predict items (grouped by their settings: one forward per group); an item the
    index cannot answer gets the exception saying why."""
    out: dict[int, dict | Unsupported] = {}
    with service.using() as served:
        groups: dict[tuple, list[int]] = {}
        for n, item in enumerate(items):
            r = item.request
            groups.setdefault((r.answers, r.evidence, r.k, r.tau, r.restrict, r.passages, r.scoring, r.ask), []).append(
                n
            )
        for (answers, evidence, k, tau, restrict, passages, scoring, form), members in groups.items():
            config = InferenceConfig(
                k=k, tau=tau, restrict=restrict, passages=passages, answers=answers, evidence=evidence, scoring=scoring
            )
            started = time.perf_counter()
            asked = {n: ask(items[n].query, form) for n in members}
            try:
                found = replies(served.npm, [asked[n] for n in members], config)
            except Unsupported as e:  # the index swapped to one that cannot answer these: only their requests fail
                out |= dict.fromkeys(members, e)
                continue
            seconds = time.perf_counter() - started
            for n, reply in zip(members, found, strict=True):
                out[n] = {
                    **reply_json(served.npm, reply, items[n].request.min_confidence, items[n].request.explain),
                    "index": served.url,
                    "batch_ms": round(1000 * seconds, 1),
                    "batch_queries": len(members),
                }
    return [out[n] for n in range(len(items))]


def run_classify(service: "Service", items: list[Item]) -> list[dict]:
    out = []
    with service.using() as served:
        for item in items:  # label sets differ per request; each query is one short forward
            r = item.request
            names = list(r.labels)
            words = [label_token_ids(served.npm.tokenizer, r.labels[name])[0] for name in names]
            scores = classify(served.npm, [item.query], words, config=InferenceConfig(k=r.k, tau=r.tau))[0]
            finite = {n: (float(s) if math.isfinite(s) else None) for n, s in zip(names, scores, strict=True)}
            best = names[int(np.argmax(scores))] if np.isfinite(scores).any() else None
            out.append({"query": item.query, "scores": finite, "label": best, "index": served.url})
    return out


RUNNERS = {"predict": run_predict, "classify": run_classify}


class Service:
    """The served index, its swaps, and the batches of queries run against it."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.metrics = Metrics()
        self.current: Served | None = None
        self.refused: Refusal | None = None  # the index last named and refused, until another is served
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="npm-batch")  # torch uses the cores within
        self._queues: dict[str, asyncio.Queue] = {}

    # --- the served index -------------------------------------------------------------------

    def metrics_text(self) -> str:
        """The Prometheus exposition of the service's metrics."""
        return generate_latest(self.metrics.registry).decode()

    def first(self) -> None:
        """Load the index to serve at start: the one given (``--index``), else the pointer's."""
        if self.settings.index is not None:
            self.load(self.settings.index)
        else:
            self.follow(serving_pointer(self.settings.store))

    def follow(self, pointer: Serving) -> None:
        """Serve the index ``pointer`` names: load it unless it is served, or was refused under this same pointer."""
        if self.current is not None and pointer.index == self.current.url:
            self.refused = None  # named the served index again (a rollback after a refusal)
        elif self.refused is None or (self.refused.index, self.refused.pointer_at) != (pointer.index, pointer.at):
            self.load(pointer.index, pointer.at)

    def load(self, url: str, pointer_at: str | None = None) -> None:
        """Load and check ``url`` beside the served index, then switch to it; a failure leaves the old one
        serving and is kept in :attr:`refused` (``pointer_at``: when the pointer that named it was written)."""
        try:
            new = Served(url, self.settings.precision, self.settings.model)
            new.check()
        except Exception as e:  # a broken index of any kind: refused, the old one keeps serving
            self.refused = Refusal(url, f"{type(e).__name__}: {e}".splitlines()[0][:500], pointer_at)
            self.metrics.refused.labels(reason=type(e).__name__).inc()
            log.error("index %s refused: %s", url, self.refused.reason)
            return
        self.refused = None
        with self._lock:
            old, self.current = self.current, new
            if old is not None:
                old.retired = True
                self.metrics.served.labels(index=old.url).set(0)
                if old.in_flight == 0:
                    old.close()
        self.metrics.served.labels(index=url).set(1)
        if old is not None:
            self.metrics.swaps.inc()
            log.info("now serving %s (was %s)", url, old.url)
        else:
            log.info("serving %s", url)

    def watch(self) -> None:
        """Follow the serving pointer until stopped (a thread)."""
        while not self._stop.wait(self.settings.poll_s):
            try:
                pointer = serving_pointer(self.settings.store)
            except Exception as e:  # the store does not answer: keep serving, try again
                log.warning("cannot read the serving pointer: %s", e)
                continue
            self.follow(pointer)

    @contextmanager
    def using(self) -> Iterator[Served]:
        """The served index for one batch; a swap meanwhile retires it only after the batch."""
        with self._lock:
            served = self.current
            if served is None:
                raise RuntimeError("no index is loaded yet")
            served.in_flight += 1
        try:
            yield served
        finally:
            with self._lock:
                served.in_flight -= 1
                if served.retired and served.in_flight == 0:
                    served.close()

    # --- batches ----------------------------------------------------------------------------

    async def submit(self, kind: str, items: list[Any]) -> list[Any]:
        """Queue ``items`` (queries with their settings) for batching; their results in order."""
        queue = self._queues[kind]
        if queue.qsize() + len(items) > self.settings.queue_limit:
            raise Overloaded()
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in items]
        for item, future in zip(items, futures, strict=True):
            queue.put_nowait((item, future))
        return await asyncio.gather(*futures)

    async def batches(self, kind: str) -> None:
        """Take queued items as batches (a short wait for company, bounded size) and run each."""
        queue = self._queues[kind]
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            deadline = loop.time() + self.settings.max_wait_ms / 1000
            while len(batch) < self.settings.max_batch:
                try:
                    batch.append(queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), timeout))
                except TimeoutError:
                    break
            self.metrics.batch.observe(len(batch))
            try:
                results = await loop.run_in_executor(self._executor, RUNNERS[kind], self, [i for i, _ in batch])
            except Exception as e:  # noqa: BLE001 - every request of the batch gets the error
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    def start(self, loop: asyncio.AbstractEventLoop) -> list[asyncio.Task]:
        self._queues = {kind: asyncio.Queue() for kind in RUNNERS}
        return [loop.create_task(self.batches(kind)) for kind in RUNNERS]

    def stop(self) -> None:
        self._stop.set()
        self._executor.shutdown(wait=True)
