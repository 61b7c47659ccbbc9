"""Flow ``learning_curve``: evaluation metrics of a training run's checkpoints, against the step.

Every checkpoint (and the initial encoder, as step 0) is exported as an fp16 encoder
folder, evaluated with the ``evaluate`` flow (its runs go to MLflow as usual), and each
score is logged into the *training* run as ``eval.<task>`` at the checkpoint's step, with
a plot of metric vs step as the run's ``learning_curve.png`` (every point logged so far, so
step ranges evaluated by separate invocations add up): regressions are visible.
"""

from pathlib import Path

import matplotlib
from mlflow import MlflowClient
from prefect import flow, task
from pydantic import BaseModel, Field

from flows.evaluate import EvalParams, evaluate
from flows.params import ClusterParams, StoreURL, default_store
from flows.train import tracking_uri
from npmcore.encoder import base_encoder_path, local_model_dir, save_fp16
from npmcore.train import checkpoint_steps, load_trained


class CurveParams(BaseModel):
    run_id: str = Field(description="MLflow run id of a training run (experiment npm-train).")
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    tasks: list[str] = Field(["mr", "cloze"], description="Tasks evaluated at every checkpoint.")
    data: str | None = Field(None, description="The jsonl file of the cloze task (use a dev split).")
    corpus: str | None = Field(None, description="Evaluate against this corpus snapshot instead of each task's reference corpus.")
    limit: int = Field(100, ge=1, description="Seeded sample of at most this many examples per task.")
    steps: list[int] | None = Field(None, description="Checkpoint steps to evaluate; empty = all, plus 0 (the initial encoder).")
    cluster: ClusterParams = Field(default_factory=ClusterParams)


@task(name="export-checkpoint")
def export_checkpoint(run_dir: str, step: int, out: Path) -> str:
    """The checkpoint of ``step`` (0: the initial encoder) as an fp16 encoder folder (made once)."""
    if not (out / "config.json").exists():
        _, model, config = load_trained(run_dir, step)
        save_fp16(model, local_model_dir(str(config.encoder or base_encoder_path())), out)
    return str(out)


@flow(name="learning_curve")
def learning_curve(params: CurveParams) -> dict[int, dict[str, float]]:
    """Evaluate checkpoints of a training run; returns {step: {task: score}}."""
    uri = tracking_uri(params.store)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.get_run(params.run_id)
    run_dir = run.data.tags.get("run_dir")
    if run_dir is None:
        raise ValueError(f"MLflow run {params.run_id} is not a training run (no run_dir tag)")
    steps = params.steps if params.steps is not None else [0, *checkpoint_steps(run_dir)]
    curve: dict[int, dict[str, float]] = {}
    for step in steps:
        model = export_checkpoint(run_dir, step, Path.home() / ".cache" / "npmcore" / "curves" / params.run_id / f"step-{step:07d}")
        rows = evaluate(EvalParams(
            tasks=params.tasks, store=params.store, model=model, data=params.data, corpus=params.corpus, limit=params.limit, cluster=params.cluster
        ))
        curve[step] = {row.task: row.score for row in rows}
        for name, score in curve[step].items():
            client.log_metric(params.run_id, f"eval.{name}", score, step=step)
    client.log_figure(params.run_id, _plot(logged_curve(client, params.run_id)), "learning_curve.png")
    return curve


def logged_curve(client: MlflowClient, run_id: str) -> dict[int, dict[str, float]]:
    """Every ``eval.<task>`` point of a training run (the newest value per step): earlier invocations included."""
    curve: dict[int, dict[str, float]] = {}
    for key in client.get_run(run_id).data.metrics:
        if key.startswith("eval."):
            for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp):
                curve.setdefault(m.step, {})[key.removeprefix("eval.")] = m.value
    return curve


def _plot(curve: dict[int, dict[str, float]]):
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.5))
    for name in sorted({t for scores in curve.values() for t in scores}):
        points = sorted((step, scores[name]) for step, scores in curve.items() if name in scores)
        axes.plot(*zip(*points, strict=True), marker="o", label=name)
    axes.set(xlabel="training step", ylabel="score", ylim=(0, 1), title="evaluation during NPM training")
    axes.legend()
    figure.tight_layout()
    return figure
