"""Evaluation tasks: load a task's examples; run it against an index and log the run to MLflow."""

import json
from dataclasses import dataclass

import mlflow
from prefect import task

from npmcore.evaluation.run import Result, System, accuracy_by_length, answer_lengths, run_task
from npmcore.evaluation.tasks import Split, Task, load_task
from npmcore.inference import NPM, InferenceConfig
from npmcore.plots import bar_plot
from npmcore.snapshots import open_index
from npmcore.tracking import log_snapshot_input, tracking
from tasks import HOUR, inputs_and_version, link_runs


@dataclass(frozen=True)
class RunSettings:
    """What every evaluation run of a flow shares."""

    model: str | None  # the encoder as the user named it; None: each index's own
    model_version: str | None  # ``model`` with a registry alias resolved to its version (models:/npm-encoder/3)
    encoder: str | None  # ``model`` as a loadable location (registry URIs exported)
    calibrate: bool  # closed-set scores relative to the task's domain premise
    limit: int | None  # the examples' sample size and seed, logged with each run
    seed: int
    tracking_uri: str
    experiment: str


@task(name="load-task", timeout_seconds=HOUR)
def load_task_examples(name: str, limit: int | None, seed: int, data: str | None, split: Split) -> Task:
    """The task's (sampled) examples; ``data`` is the cloze task's file."""
    return load_task(name, limit=limit, seed=seed, path=data if name == "cloze" else None, split=split)


@task(name="evaluate-run", cache_key_fn=inputs_and_version, persist_result=True, timeout_seconds=6 * HOUR)
def evaluate_run_task(
    evaluated: Task, index: str, system: System, config: InferenceConfig, settings: RunSettings
) -> Result:
    """Run the task against the index inside one MLflow run (its duration is the evaluation's):
    lineage params, the index and corpus as dataset inputs, score, predictions and, for LAMA,
    the accuracy by answer length. The same inputs (index snapshots are immutable) give the
    cached result."""
    snapshot = open_index(index)
    run_name = f"{evaluated.name}/{system}/tau={config.tau:g}"
    with tracking(settings.tracking_uri, settings.experiment), mlflow.start_run(run_name=run_name, nested=True):
        link_runs(settings.tracking_uri)
        log_snapshot_input("index", index, "evaluation")
        log_snapshot_input("corpus", snapshot.corpus, "evaluation")
        npm = NPM(index, encoder=settings.encoder)
        result = run_task(evaluated, npm, system, config, calibrate=settings.calibrate)
        mlflow.log_params({
            "model": settings.model or snapshot.manifest.config["encoder"], "model_version": settings.model_version,
            "limit": settings.limit, "seed": settings.seed, "task": evaluated.name, "split": evaluated.split,
            "system": system, "index": index, "index_id": snapshot.manifest.id,
            "factory": snapshot.manifest.config["factory"],
            "corpus_id": snapshot.corpus_id, "datastore_id": snapshot.datastore_id,
            "encoder_fingerprint": npm.fingerprint, "index_encoder_fingerprint": snapshot.encoder_fingerprint,
            "corpus_tokens": snapshot.manifest.counts["tokens"], "k": config.k, "tau": config.tau,
            "restrict": system != "npm-no-bm25", "calibrate": settings.calibrate and evaluated.domain is not None,
            "content_words": config.content_words,
        })  # fmt: skip
        mlflow.log_metrics({result.metric: result.score, "n": result.n, **result.notes})
        mlflow.log_text("".join(json.dumps(r.__dict__) + "\n" for r in result.records), "predictions.jsonl")
        if evaluated.macro_key == "answer_length":
            by_length = accuracy_by_length(result, answer_lengths(evaluated, npm))
            mlflow.log_metrics({f"exact_match_len_{b}": v for b, v in by_length.items()})
            figure = bar_plot(by_length, "answer length (tokens)", "exact match", f"{evaluated.name}: {system}")
            mlflow.log_figure(figure, "accuracy_by_answer_length.png")
    return result
