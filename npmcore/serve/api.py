"""The query service (``npmcore api``): answers from the store's serving index over HTTP.

One process loads the encoder, the FAISS index, the datastore and BM25 once and answers:

* ``POST /v1/predict``: NPM phrase prediction, each answer with its evidence passages and where they come from
  (source, dump date, article, address); a question without a mask is asked as the statements it stands for
  (:func:`npmcore.answer.asking.ask`; ``"ask": "paper"``: as the paper asks NQ), and the answer says how;
* ``POST /v1/classify``: closed-set label scores (labels given as verbalizer words);
* ``GET /v1/index``: what is served; ``GET /livez``; ``GET /readyz`` (503 until loaded and warm);
  ``GET /metrics`` (Prometheus); ``GET /``: a page with a query box (``/?q=QUERY`` answers QUERY at once).

Concurrent requests are batched: a request waits at most ``max_wait_ms`` for others to share its
encoder forward, batches hold at most ``max_batch`` queries, and a bounded queue answers 503 with
``Retry-After`` when full (never a hang). The served index follows the store's serving pointer
(:mod:`npmcore.serve.serving`): a watcher loads a new index beside the old one, checks it (checksums,
its datastore's sizes, counts, canary queries) and switches in one assignment; requests already
holding the old index finish on it, and it is dropped when the last of them is done. An index that
cannot be loaded or fails a check (corrupt, missing, a pointer written by hand) is refused and the
old one keeps serving; ``/v1/index`` names it and why until the pointer names an index served, and
``/metrics`` and the log say so too. A refused index is tried again when the pointer is written again.
"""

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from npmcore.answer.asking import Form, ask
from npmcore.answer.confidence import Calibrator, abstention
from npmcore.answer.inference import MASK, NPM, InferenceConfig, Scoring, Unsupported, label_token_ids
from npmcore.evaluation.templates import CLOSED_SPECS
from npmcore.index.precision import Setting
from npmcore.serve.serving import Serving, check_datastore, read_serving, serving_pointer
from npmcore.snapshots import open_corpus
from npmcore.storage import read_manifest

log = logging.getLogger(__name__)
CANARIES = ["The capital of France is [MASK].", "[MASK] is a city."]  # any index answers these with something
PAGE = Path(__file__).parent / "api_page.html"


@dataclass
class Settings:
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
        knn = self.npm.refused(restrict=False)
        return {"restricted": self.npm.refused(restrict=True), "knn": knn, "classify": knn}

    def answers(self) -> dict[str, bool]:
        """The kinds of request this index answers (``/v1/index``)."""
        return {kind: why is None for kind, why in self.refusals().items()}

    def check(self) -> None:
        """Refuse an index whose parts disagree with its manifest or that cannot answer."""
        check_datastore(self.npm.index_snapshot)  # its own files' checksums: NPM verified them
        counts = self.manifest.counts
        vectors = counts["tokens"] if self.npm.index is None else self.npm.index.ntotal  # BM25 alone: no vectors
        if vectors != counts["tokens"] or len(self.npm.corpus.tokens) != counts["tokens"]:
            raise ValueError(
                f"index {self.url}: {vectors} vectors and {len(self.npm.corpus.tokens)} token ids, "
                f"its manifest says {counts['tokens']}"
            )
        if len(self.npm.corpus.offsets) != counts["blocks"] + 1:
            raise ValueError(
                f"index {self.url}: {len(self.npm.corpus.offsets) - 1} blocks, manifest {counts['blocks']}"
            )
        # also warms the encoder, BM25 and the datastore reads
        answered = self.npm.predict(CANARIES, InferenceConfig(restrict=self.answers()["restricted"]))
        if not any(answered):
            raise ValueError(f"index {self.url} answers none of its canary queries")

    def close(self) -> None:
        if self.npm._bm25 is not None:
            self.npm._bm25.close()


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


@dataclass(frozen=True)
class Refusal:
    """An index the service would not serve, and why (``/v1/index``, ``/readyz``)."""

    index: str
    reason: str  # the error's first line: the file that failed its checksum, the check that failed
    pointer_at: str | None  # when the pointer naming it was written (None: --index); written again: tried again

    def public(self) -> dict[str, str]:
        return {"index": self.index, "reason": self.reason}


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


class Overloaded(Exception):
    """The queue is full: the client should come back later."""


# --- requests and answers ----------------------------------------------------------------------


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _one_mask(query: str) -> str:
    count = query.count(MASK)
    if count != 1:
        raise ValueError(f"a query needs exactly one {MASK}, found {count}")
    return query


def _askable(query: str) -> str:
    ask(query)  # a ValueError saying what a query is
    return query


Query = Annotated[str, AfterValidator(_one_mask)]
Askable = Annotated[str, AfterValidator(_askable)]


class PredictRequest(Strict):
    queries: list[Askable] = Field(
        min_length=1,
        description='Sentences with one [MASK] each, or questions ("Where was Lionel Messi born?": asked as the '
        'statements they stand for, "Lionel Messi was born in [MASK].").',
    )
    ask: Form = Field(
        "statements",
        description="How a question is asked: statements (the statements it stands for, answers of the kind it asks "
        'for), or paper (as the paper asks NQ and TriviaQA: "Who taught Aristotle? The answer is [MASK].", also where '
        "no statement can be made of it).",
    )
    answers: int = Field(5, ge=1, le=20, description="Answers per query.")
    evidence: int = Field(3, ge=1, le=10, description="Evidence passages per answer.")
    k: int = Field(4096, ge=1, le=16384, description="Tokens retrieved per query vector (kNN search).")
    tau: float = Field(1.0, gt=0)
    restrict: bool = Field(True, description="Search the top BM25 passages (the paper's open-set setting).")
    passages: int = Field(3, ge=1, le=20, description="BM25 passages searched when restricted.")
    scoring: Scoring = Field(
        "evidence",
        description="evidence: NPM's candidates ranked by what their passages say around them as well; npm: the "
        "paper's scoring (summed similarities of each phrase's positions).",
    )
    explain: bool = Field(False, description="Each answer's score parts (evidence scoring): why it won.")
    min_confidence: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Evidence scoring: below this confidence of its first answer a query is answered 'not in this "
        "corpus' (abstained, the best guess still given); default: the calibrator's, chosen on dev.",
    )


class ClassifyRequest(Strict):
    queries: list[Query] = Field(min_length=1, description="Sentences with one [MASK] each.")
    labels: dict[str, list[str]] | None = Field(
        None, min_length=2, description='Each label and its verbalizer words: {"positive": ["great", "good"], …}.'
    )
    task: str | None = Field(None, description=f"Or a task's labels and words: {', '.join(CLOSED_SPECS)}.")
    k: int = Field(4096, ge=1, le=16384)
    tau: float = Field(5.0, gt=0)

    @field_validator("task")
    @classmethod
    def _known(cls, task: str | None) -> str | None:
        if task is not None and task not in CLOSED_SPECS:
            raise ValueError(f"unknown task; one of {', '.join(CLOSED_SPECS)}")
        return task

    @model_validator(mode="after")
    def _one_of(self) -> "ClassifyRequest":
        if (self.labels is None) == (self.task is None):
            raise ValueError("give labels or a task, not both or neither")
        if self.task is not None:
            spec = CLOSED_SPECS[self.task]
            self.labels = {label: [word] for label, word in zip(spec.labels, spec.words, strict=True)}
        return self


@dataclass
class Item:
    query: str
    request: Any
    extra: dict = field(default_factory=dict)


def run_predict(service: Service, items: list[Item]) -> list[dict | Unsupported]:
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
                found = served.npm.answer([asked[n] for n in members], config)
            except Unsupported as e:  # the index swapped to one that cannot answer these: only their requests fail
                out |= dict.fromkeys(members, e)
                continue
            seconds = time.perf_counter() - started
            for n, (answered, answers_of) in zip(members, found, strict=True):
                out[n] = {
                    "query": items[n].query,
                    # how it was asked: the queries NPM was asked, and the one its answers come from
                    "asked": {"how": asked[n].how, "queries": list(asked[n].queries), "answered": answered},
                    **abstention(served.npm.calibrator, answers_of, items[n].request.min_confidence),
                    "answers": [_answer(served, a, items[n].request.explain) for a in answers_of],
                    "index": served.url,
                    "batch_ms": round(1000 * seconds, 1),
                    "batch_queries": len(members),
                }
    return [out[n] for n in range(len(items))]


def _answer(served: Served, answer, explain: bool) -> dict:
    spans = [served.npm.evidence.span(e) for e in answer.evidence]
    return {
        "text": answer.text,
        "score": answer.score,
        "confidence": answer.confidence,
        "evidence": [
            {
                "block_id": s.block_id,
                "title": s.title,
                "text": s.text,
                "start": s.start,
                "end": s.end,
                "score": s.score,
                "source": asdict(s.source),
            }
            for s in spans
        ],
        **({"parts": answer.parts} if explain else {}),
    }


def confidence_of(calibrator: Calibrator | None) -> dict:
    """What ``/v1/index`` says of the answers' confidence: whether there is one, the default threshold and what
    the calibrator was fitted on."""
    if calibrator is None:
        return {"calibrated": False, "min_confidence": None, "fitted_on": None}
    return {"calibrated": True, "min_confidence": calibrator.min_confidence, "fitted_on": calibrator.provenance}


def run_classify(service: Service, items: list[Item]) -> list[dict]:
    out = []
    with service.using() as served:
        for item in items:  # label sets differ per request; each query is one short forward
            r = item.request
            names = list(r.labels)
            words = [label_token_ids(served.npm.tokenizer, r.labels[name])[0] for name in names]
            scores = served.npm.classify([item.query], words, config=InferenceConfig(k=r.k, tau=r.tau))[0]
            finite = {n: (float(s) if math.isfinite(s) else None) for n, s in zip(names, scores, strict=True)}
            best = names[int(np.argmax(scores))] if np.isfinite(scores).any() else None
            out.append({"query": item.query, "scores": finite, "label": best, "index": served.url})
    return out


RUNNERS = {"predict": run_predict, "classify": run_classify}


def create_app(settings: Settings) -> FastAPI:
    """The FastAPI application of a service over ``settings.store`` (the index loads at start-up)."""
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        tasks = service.start(loop)
        loading = loop.run_in_executor(None, service.first)
        watcher = threading.Thread(target=service.watch, daemon=True, name="npm-serving-pointer")
        loading.add_done_callback(lambda _: watcher.start() if settings.index is None else None)
        yield
        service.stop()
        for task in tasks:
            task.cancel()

    app = FastAPI(title="NPM query service", lifespan=lifespan)
    app.state.service = service

    @app.middleware("http")
    async def guard(request: Request, call_next):
        """Bearer token, body size, latency and status metrics."""
        endpoint = request.url.path
        if settings.token is not None and endpoint not in ("/livez", "/readyz"):
            if request.headers.get("authorization") != f"Bearer {settings.token}":
                return _error(401, "a bearer token is required (Authorization: Bearer …)", endpoint, service)
        size = request.headers.get("content-length")
        if size is not None and int(size) > settings.max_body_bytes:
            return _error(413, f"the body is larger than {settings.max_body_bytes} bytes", endpoint, service)
        started = time.perf_counter()
        response = await call_next(request)
        service.metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - started)
        service.metrics.requests.labels(endpoint=endpoint, status=str(response.status_code)).inc()
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "json_invalid":
            where, message = "body", "not valid JSON"
        elif first["type"] == "extra_forbidden":
            message = "unknown field"
        return JSONResponse({"error": f"{where}: {message}"}, status_code=422)

    @app.exception_handler(Unsupported)
    async def unsupported(request: Request, error: Unsupported):
        return JSONResponse({"error": str(error)}, 422)

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, error: Overloaded):
        return JSONResponse(
            {"error": "overloaded: too many queries waiting; retry shortly"}, 503, headers={"Retry-After": "1"}
        )

    def _limits(queries: list[str], restrict: bool) -> JSONResponse | None:
        """A refusal of queries beyond the limits, of an index still loading, or of a kind of query the
        served index cannot answer (``restrict``: to its top BM25 passages, else kNN search of its vectors)."""
        if len(queries) > settings.max_queries:
            return JSONResponse({"error": f"queries: at most {settings.max_queries} a request"}, 422)
        for n, query in enumerate(queries):
            if len(query) > settings.max_query_chars:
                return JSONResponse({"error": f"queries.{n}: longer than {settings.max_query_chars} characters"}, 422)
        if service.current is None:
            return JSONResponse({"error": "not ready: the index is loading"}, 503, headers={"Retry-After": "5"})
        if (refused := service.current.npm.refused(restrict)) is not None:
            return JSONResponse({"error": refused}, 422)
        return None

    @app.post("/v1/predict")
    async def predict(body: PredictRequest):
        if (refusal := _limits(body.queries, body.restrict)) is not None:
            return refusal
        started = time.perf_counter()
        results = await service.submit("predict", [Item(q, body) for q in body.queries])
        return {"results": results, "took_ms": round(1000 * (time.perf_counter() - started), 1)}

    @app.post("/v1/classify")
    async def classify(body: ClassifyRequest):
        if (refusal := _limits(body.queries, restrict=False)) is not None:  # labels are scored by kNN search
            return refusal
        started = time.perf_counter()
        results = await service.submit("classify", [Item(q, body) for q in body.queries])
        return {"results": results, "took_ms": round(1000 * (time.perf_counter() - started), 1)}

    @app.get("/v1/index")
    async def index():
        served = service.current
        if served is None:
            return JSONResponse({"error": "not ready: the index is loading"}, 503)
        m = served.manifest
        pointer = read_serving(settings.store) if settings.index is None else None
        return {
            "index": served.url,
            "id": m.id,
            "built": m.created,
            "package_version": m.package_version,
            "factory": m.config["factory"],
            "tokens": m.counts["tokens"],
            "blocks": m.counts["blocks"],
            "corpus": served.npm.index_snapshot.corpus,
            "sources": [
                {k: getattr(s, k) for k in ("name", "wiki", "dump_date", "sha256", "docs", "blocks", "tokens")}
                for s in served.sources
            ],
            "encoder": m.config["encoder"],
            "encoder_fingerprint": m.config["encoder_fingerprint"],
            "query_encoder": served.npm.encoder_source if served.npm.passage_side else None,
            "query_encoder_fingerprint": served.npm.fingerprint,
            "precision": served.npm.precision,
            "index_precision": served.npm.index_snapshot.precision,
            "loaded_at": served.loaded_at,
            "serving": {"reason": "given by npmcore api --index", "at": None, "scores": {}}
            if pointer is None
            else {"reason": pointer.reason, "at": pointer.at, "scores": pointer.scores},
            "answers": served.answers(),
            "confidence": confidence_of(served.npm.calibrator),
            "cannot": {kind: why for kind, why in served.refusals().items() if why},
            "refused": None if service.refused is None else service.refused.public(),
        }

    @app.get("/livez")
    async def livez():
        return {"live": True}

    @app.get("/readyz")
    async def readyz():
        if service.current is None:
            refused = None if service.refused is None else service.refused.public()
            return JSONResponse({"ready": False, "refused": refused}, 503)
        return {"ready": True, "index": service.current.url}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(service.metrics_text())

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    return app


def _error(status: int, message: str, endpoint: str, service: Service) -> Response:
    service.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
    return JSONResponse({"error": message}, status)
