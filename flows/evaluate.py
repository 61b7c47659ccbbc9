"""Flow ``evaluate``: zero-shot tasks against their reference corpora, each run logged to MLflow."""

import json
import tempfile
from pathlib import Path
from typing import Literal

import mlflow
from prefect import flow, task
from pydantic import BaseModel, Field, field_validator

from flows.index import IndexParams, build_index, dask_runner
from flows.ingest import ingest_corpus
from flows.params import ClusterParams, IngestParams, absolute_store, default_store
from flows.train import tracking_uri
from npmcore.evaluation.references import write_reference_corpus
from npmcore.evaluation.run import Result, evaluate as run_evaluation
from npmcore.evaluation.tasks import CLOSED_TASKS, DEFAULT_DATA_DIR, Task, load_task
from npmcore.inference import NPM, InferenceConfig
from npmcore.storage import read_manifest
from npmcore.tracking import tracking


class EvalParams(BaseModel):
    tasks: list[str] = Field(["mr"], description="Task names (sst2, mr, cr, rt, subj, agn, rte, trex, google_re, nq, triviaqa, cloze).")
    store: str = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    index: str | None = Field(None, description="Evaluate against this index; empty = build each task's reference corpus and index.")
    model: str | None = Field(None, description="Encoder of the reference indexes (path, cached name or models:/…); empty = MiniLM-L6.")
    data: str | None = Field(None, description="The jsonl file of a cloze task.")
    wiki_files: int = Field(1, ge=0, le=64, description="enwiki_sample files added to the open-set reference corpora.")
    limit: int | None = Field(3000, ge=1, description="Seeded sample of at most this many examples per task.")
    seed: int = 0
    system: Literal["npm", "npm-single"] = "npm"
    restrict: bool = Field(True, description="Open-set: search only the top BM25 passages, exactly.")
    k: int = Field(4096, ge=1)
    tau: float | None = Field(None, gt=0, description="Temperature; empty = 5 for closed-set tasks, 1 for open-set.")
    experiment: str = Field("npm-eval", description="MLflow experiment.")
    cluster: ClusterParams = Field(default_factory=ClusterParams)

    @field_validator("store")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return absolute_store(value)


@task(name="load-task")
def load_task_task(name: str, params: EvalParams) -> Task:
    return load_task(name, limit=params.limit, seed=params.seed, path=params.data)


def reference_index(evaluated: Task, params: EvalParams) -> str:
    """Ingest and index the task's reference corpus (its evaluated examples left out) with the
    ingest_corpus and build_index flows; returns the index URL (reused when the corpus is unchanged)."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [write_reference_corpus(evaluated, DEFAULT_DATA_DIR, Path(tmp) / f"{evaluated.name}.jsonl")]
        if evaluated.kind == "open":
            inputs += [str(DEFAULT_DATA_DIR / "enwiki_sample" / f"wiki_{i:02d}") for i in range(params.wiki_files)]
        inputs = [i for i in inputs if Path(i).stat().st_size > 0]
        corpus = ingest_corpus(IngestParams(inputs=inputs, store=params.store, cluster=params.cluster))
    index_params = IndexParams(store=params.store, corpus=corpus, model=params.model, cluster=params.cluster)
    return build_index.with_options(task_runner=dask_runner(params.cluster))(index_params)


@task(name="evaluate-task")
def evaluate_task(evaluated: Task, index: str, params: EvalParams) -> Result:
    """Run the task against the index and log the run (lineage params, score, predictions) to MLflow."""
    tau = params.tau if params.tau is not None else (5.0 if evaluated.name in CLOSED_TASKS else 1.0)
    config = InferenceConfig(k=params.k, tau=tau, restrict=params.restrict)
    npm = NPM(index, encoder=params.model if params.model and not params.model.startswith("models:/") else None)
    result = run_evaluation(evaluated, npm, params.system, config)
    manifest = read_manifest(index)
    with tracking(tracking_uri(params.store), params.experiment), mlflow.start_run(run_name=f"{evaluated.name}/{params.system}"):
        mlflow.log_params({
            "task": evaluated.name, "system": params.system, "model": params.model or manifest.config["encoder"],
            "index": index, "index_id": manifest.id,
            "factory": manifest.config["factory"], "corpus_id": manifest.inputs[0]["corpus_id"],
            "datastore_id": manifest.inputs[0]["datastore_id"], "encoder": manifest.config["encoder"],
            "encoder_fingerprint": manifest.config["encoder_fingerprint"], "corpus_tokens": manifest.counts["tokens"],
            "k": config.k, "tau": config.tau, "restrict": config.restrict, "limit": params.limit, "seed": params.seed,
        })
        mlflow.log_metrics({result.metric: result.score, "n": result.n, **{k: v for k, v in result.notes.items()}})
        mlflow.log_text("".join(json.dumps(r.__dict__) + "\n" for r in result.records), "predictions.jsonl")
    return result


@flow(name="evaluate")
def evaluate(params: EvalParams | None = None) -> list[Result]:
    """Evaluate every task of ``params`` (building reference indexes unless an index is given)."""
    params = params or EvalParams()
    results = []
    for name in params.tasks:
        evaluated = load_task_task(name, params)
        index = params.index or reference_index(evaluated, params)
        results.append(evaluate_task(evaluated, index, params))
    return results
