"""The query service over HTTP (``npmcore api``): the FastAPI application of :mod:`npmcore.serve.service`.

One process loads the encoder, the FAISS index, the datastore and BM25 once and answers:

* ``POST /v1/predict``: NPM phrase prediction, each answer with its evidence passages and where they come from
  (source, dump date, article, address); a question without a mask is asked as the statements it stands for
  (:func:`npmcore.ask.asking.ask`; ``"ask": "paper"``: as the paper asks NQ), and the answer says how;
* ``POST /v1/classify``: closed-set label scores (labels given as verbalizer words);
* ``GET /v1/index``: what is served; ``GET /livez``; ``GET /readyz`` (503 until loaded and warm);
  ``GET /metrics`` (Prometheus); ``GET /``: a page with a query box (``/?q=QUERY`` answers QUERY at once).

Here are the requests' schemas and checks (a bearer token, the body's size, queries per request and their length,
one line naming the field of a bad input), the routes and their errors; the batching, the served index and its
swaps are the service's. Imports the service, the serving pointer, the answer stage's query forms and the
closed-set tasks' label words (:mod:`npmcore.evaluation.templates`).
"""

import asyncio
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from npmcore.answer.inference import Scoring
from npmcore.answer.retrieval import Unsupported
from npmcore.ask.asking import Form, ask
from npmcore.evaluation.templates import CLOSED_SPECS
from npmcore.mask import MASK
from npmcore.serve.service import Item, Overloaded, Service, Settings, confidence_of
from npmcore.serve.serving import read_serving

PAGE = Path(__file__).parent / "api_page.html"


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
        "corpus' (abstained, the best guess still given); default: the one chosen on dev for answers shown as sure "
        "to be right 9 times in 10.",
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


def _error(status: int, message: str, endpoint: str, service: Service) -> Response:
    service.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
    return JSONResponse({"error": message}, status)


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
        if (refused := service.current.npm.retrieval.refused(restrict)) is not None:
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
            "confidence": confidence_of(served.npm),
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
