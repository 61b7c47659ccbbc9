"""Flow ``pipeline``: the main job, ingest -> train -> build_index -> evaluate.

Each stage is a flow of its own. One MLflow parent run (experiment ``npm-pipeline``)
holds a nested run per stage: ingest and index (snapshot ids and counts), the training
run (experiment ``npm-train``) and one evaluation run per task (``npm-eval``), each with
the corpus snapshot, encoder and index it used.
"""

import mlflow
from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from flows.evaluate import EvalParams, evaluate
from flows.index import IndexParams, index_corpus
from flows.ingest import ingest_corpus
from flows.params import CLOZE_TEST, ClusterParams, IngestParams, StoreURL, default_store
from flows.results import Answered, EvalRow, PipelineResult, ShownAnswer
from flows.train import TrainParams, train_encoder
from npmcore.answer.inference import NPM
from npmcore.cluster import dask_cluster
from npmcore.index.indexer import store_root
from npmcore.serve.serving import read_serving, set_serving
from npmcore.snapshots import newest_corpus, open_index
from npmcore.storage import read_manifest
from npmcore.tracking import log_snapshot_input, model_version, tracking
from npmcore.tracking_store import tracking_uri
from tasks import link_runs

GATE = 0.01  # a new index may score at most this much below the served one and still be served


class PipelineParams(BaseModel):
    ingest: IngestParams = Field(default_factory=IngestParams)
    train: TrainParams | None = Field(
        None,
        description="Train an encoder on the new corpus snapshot (its store and corpus come from the ingest stage); "
        "empty = index with the shipped NPM-trained default encoder.",
    )
    index: IndexParams = Field(
        default_factory=IndexParams, description="Its store, corpus and encoder come from the earlier stages."
    )
    evaluate: EvalParams = Field(
        default_factory=lambda: EvalParams(tasks=["cloze"], data=str(CLOZE_TEST)),
        description="Tasks evaluated against the new index (default: the cloze facts of the embedded default corpus).",
    )
    queries: list[str] = Field([], description="Queries with one [MASK] answered against the new index at the end.")
    experiment: str = Field("npm-pipeline", description="MLflow experiment of the parent run.")
    serve: bool = Field(
        True,
        description="Move the store's serving pointer to the new index if it passes the gate (npmcore api), "
        "or create it in a store that has none.",
    )


@flow(name="pipeline")
def pipeline(params: PipelineParams | None = None, progress: bool = False) -> PipelineResult:
    """Ingest, train on the new corpus snapshot (or take the shipped default encoder), index
    it with that encoder, evaluate against the index; every stage a nested MLflow run."""
    params = params or PipelineParams()
    store = params.ingest.store
    with (
        tracking(tracking_uri(store), params.experiment),
        mlflow.start_run(run_name="pipeline") as parent,
        dask_cluster(params.ingest.cluster.dask_address, params.ingest.cluster.n_workers, store) as address,
    ):
        link_runs(tracking_uri(store))
        cluster = ClusterParams(dask_address=address)  # one cluster for every stage: its workers stay warm
        with mlflow.start_run(run_name="ingest", nested=True, experiment_id=parent.info.experiment_id):
            corpus = ingest_corpus(params.ingest.model_copy(update={"cluster": cluster}), progress)
            log_snapshot("corpus", corpus)
        encoder = None
        if params.train:  # its run under this one, in this experiment
            stage = {"store": store, "corpus": corpus, "experiment": params.experiment}
            encoder = train_encoder(params.train.model_copy(update=stage), progress)
        index_params = params.index.model_copy(update={"store": store, "cluster": cluster})
        index, rows = index_and_evaluate(corpus, encoder, index_params, params.evaluate, params.experiment, progress)
        if params.serve:
            mlflow.set_tag("serving", gate_and_serve(store, index, rows, GATE, "pipeline"))
    return result(corpus, encoder, index, rows, answer(index, params.queries), parent.info.run_id)


class RebuildParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    model: str = Field(
        "models:/npm-encoder@champion", description="Encoder: registry URI, local folder or cached name."
    )
    corpus: str | None = Field(None, description="Corpus snapshot URL; empty = the newest in the store.")
    index: IndexParams = Field(
        default_factory=IndexParams, description="Its store, corpus and encoder come from the fields above."
    )
    evaluate: EvalParams = Field(
        default_factory=lambda: EvalParams(tasks=["trex", "google_re"], limit=1000),
        description="Tasks evaluated against the rebuilt index.",
    )
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    experiment: str = Field("npm-pipeline", description="MLflow experiment of the parent run.")
    serve: bool = Field(
        True, description="Move the store's serving pointer to the new index if it passes the gate (npmcore api)."
    )
    gate: float = Field(
        GATE,
        ge=0,
        description="The gate: the new index's mean score may fall at most this much below the served index's.",
    )


@flow(name="index_rebuild")
def index_rebuild(params: RebuildParams | None = None) -> PipelineResult:
    """Scheduled rebuild: index the newest corpus snapshot with the champion encoder and
    evaluate it, under one MLflow parent run."""
    params = params or RebuildParams()
    corpus = params.corpus or newest_corpus(params.store)
    version = model_version(params.model, params.store)  # fails now, with the way out, when the alias is missing
    with (
        tracking(tracking_uri(params.store), params.experiment),
        mlflow.start_run(run_name=f"index-rebuild {version}") as parent,
        dask_cluster(params.cluster.dask_address, params.cluster.n_workers, params.store) as address,
    ):
        link_runs(tracking_uri(params.store))
        cluster = ClusterParams(dask_address=address)
        index_params = params.index.model_copy(update={"store": params.store, "cluster": cluster})
        eval_params = params.evaluate.model_copy(update={"store": params.store, "cluster": cluster})
        index, rows = index_and_evaluate(corpus, params.model, index_params, eval_params, params.experiment)
        if params.serve:
            mlflow.set_tag(
                "serving", gate_and_serve(params.store, index, rows, params.gate, f"index-rebuild {version}")
            )
    return result(corpus, params.model, index, rows, [], parent.info.run_id)


def gate_and_serve(store: str, index: str, rows: list[EvalRow], tolerance: float, what: str) -> str:
    """Move the serving pointer to ``index`` if its mean score is at most ``tolerance`` below the served
    index's (or nothing is served yet, or it was not evaluated on these tasks); returns the decision."""
    scores = {f"{r.task}.{r.system}.{r.metric}": r.score for r in rows}
    mean = sum(scores.values()) / len(scores)
    served = read_serving(store)
    before = {k: v for k, v in (served.scores if served else {}).items() if k in scores}
    logger = get_run_logger()
    if served is not None and served.index == index:
        decision = "already served"
    elif len(before) == len(scores) and mean < sum(before.values()) / len(before) - tolerance:
        decision = f"kept {served.index}: mean score {mean:.4f} below its {sum(before.values()) / len(before):.4f}"
    else:
        set_serving(store, index, f"{what} passed its gate (mean score {mean:.4f})", scores)
        decision = f"serving {index}"
    logger.info("serving pointer: %s", decision)
    return decision


def index_and_evaluate(
    corpus: str,
    encoder: str | None,
    index: IndexParams,
    evaluation: EvalParams,
    experiment: str,
    progress: bool = False,
) -> tuple[str, list[EvalRow]]:
    """The index and evaluate stages inside an active MLflow parent run (whose params and
    metrics they fill): a nested run for the index, nested evaluation runs per task, all in
    the parent's ``experiment`` (MLflow shows a run's children from its own experiment)."""
    store, cluster = index.store, index.cluster
    with mlflow.start_run(run_name="index", nested=True):
        log_snapshot_input("corpus", corpus, "indexing")
        url = index_corpus(index.model_copy(update={"corpus": corpus, "model": encoder}), progress=progress)
        log_snapshot("index", url)
    stage = {"store": store, "index": url, "model": encoder, "cluster": cluster, "experiment": experiment}
    rows = evaluate(evaluation.model_copy(update=stage))
    version = model_version(encoder, store)
    mlflow.log_params(
        {
            "corpus": corpus,
            "encoder": encoder or "default",
            "encoder_version": version,
            "index": url,
            "precision": open_index(url).precision,
        }
    )
    log_snapshot_input("corpus", corpus, "pipeline")
    mlflow.log_metrics({f"{r.task}.{r.system}.{r.metric}": r.score for r in rows})
    return url, rows


def answer(index: str, queries: list[str], shown: int = 3) -> list[Answered]:
    """The best ``shown`` answers of each query against the index, with their best evidence."""
    if not queries:
        return []
    npm = NPM(index)
    answered = []
    for query, found in zip(queries, npm.predict(queries), strict=True):
        shown_answers = []
        for a in found[:shown]:
            span = npm.evidence.span(a.evidence[0])
            shown_answers.append(
                ShownAnswer(
                    answer=a.text,
                    score=a.score,
                    block_id=span.block_id,
                    passage=span.text,
                    start=span.start,
                    end=span.end,
                    source=span.source,
                )
            )
        answered.append(Answered(query=query, answers=shown_answers))
    return answered


def result(
    corpus: str, encoder: str | None, index: str, rows: list[EvalRow], answered: list[Answered], run_id: str
) -> PipelineResult:
    manifest = read_manifest(index)
    pointer = read_serving(store_root(index))
    return PipelineResult(
        corpus=corpus,
        encoder=encoder,
        index=index,
        factory=manifest.config["factory"],
        tokens=manifest.counts["tokens"],
        rows=rows,
        answered=answered,
        run_id=run_id,
        serving=None if pointer is None else pointer.index,
    )


def log_snapshot(kind: str, url: str) -> None:
    """A stage run's lineage: the snapshot's URL, id, inputs and config as params, its counts as metrics,
    the snapshot itself as a dataset."""
    manifest = read_manifest(url)
    mlflow.log_params({kind: url, f"{kind}_id": manifest.id, "package_version": manifest.package_version})
    for position, given in enumerate(manifest.inputs):
        mlflow.log_params({f"input.{position}.{k}": str(v)[:500] for k, v in given.items()})
    mlflow.log_params({f"config.{k}": str(v)[:500] for k, v in manifest.config.items()})
    mlflow.log_metrics({k: float(v) for k, v in manifest.counts.items()})
    log_snapshot_input(kind, url, "produced")
