"""Flow ``learning_curve``: evaluation metrics of a training run's checkpoints, against the step.

Every checkpoint (and the initial encoder, as step 0) is exported as an fp16 encoder
folder, evaluated with the ``evaluate`` flow (its runs go to MLflow as usual), and each
score is logged into the *training* run as ``eval.<task>`` at the checkpoint's step (with
``held_out``, also the training objective's own metrics on a held-out corpus snapshot, as
``heldout.<metric>``: the MLM stage's masked-token accuracy, NPM's in-batch top-1), with
a plot of metric vs step as the run's ``learning_curve.png`` (every point logged so far, so
step ranges evaluated by separate invocations add up): regressions are visible.
"""

from mlflow import MlflowClient
from prefect import flow
from pydantic import BaseModel, Field

from flows.evaluate import EvalParams, evaluate
from flows.params import ClusterParams, StoreURL, default_store
from npmcore.model.checkpointing import checkpoint_steps
from npmcore.plots import line_plot
from npmcore.storage import cache_dir
from npmcore.tracking import logged_curve
from npmcore.tracking_store import tracking_uri
from tasks.train import export_checkpoint_task, held_out_task


class CurveParams(BaseModel):
    run_id: str = Field(description="MLflow run id of a training run (experiment npm-train).")
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    tasks: list[str] = Field(
        ["mr", "cloze"], description="Tasks evaluated at every checkpoint (none: held-out metrics only)."
    )
    held_out: str | None = Field(
        None,
        description="Corpus snapshot never trained on: the objective's loss and accuracies on it at every checkpoint.",
    )
    held_out_batches: int = Field(
        20, ge=1, description="Batches of the held-out corpus (seeded, the same at every step)."
    )
    data: str | None = Field(
        None, description="The jsonl file of the cloze task; empty = the default corpus's cloze facts of the split."
    )
    split: str = Field("dev", description="dev (tuning data: sst2, trex, google_re and the cloze file given) or test.")
    corpus: str | None = Field(
        None, description="Evaluate against this corpus snapshot instead of each task's reference corpus."
    )
    limit: int = Field(100, ge=1, description="Seeded sample of at most this many examples per task.")
    steps: list[int] | None = Field(
        None, description="Checkpoint steps to evaluate; empty = all, plus 0 (the initial encoder)."
    )
    cluster: ClusterParams = Field(default_factory=ClusterParams)


class CurvePoint(BaseModel):
    step: int
    scores: dict[str, float]  # eval.<task> -> score, heldout.<metric> -> value


@flow(name="learning_curve")
def learning_curve(params: CurveParams) -> list[CurvePoint]:
    """Evaluate checkpoints of a training run; returns one point per evaluated step."""
    uri = tracking_uri(params.store)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run_dir = client.get_run(params.run_id).data.tags.get("run_dir")
    if run_dir is None:
        raise ValueError(f"MLflow run {params.run_id} is not a training run (no run_dir tag)")
    steps = params.steps if params.steps is not None else [0, *checkpoint_steps(run_dir)]
    points = []
    for step in steps:
        scores = {}
        if params.tasks:
            model = export_checkpoint_task(run_dir, step, cache_dir() / "curves" / params.run_id / f"step-{step:07d}")
            rows = evaluate(
                EvalParams(
                    tasks=params.tasks,
                    store=params.store,
                    model=model,
                    data=params.data,
                    corpus=params.corpus,
                    limit=params.limit,
                    split=params.split,
                    cluster=params.cluster,
                )
            )
            scores = {f"eval.{row.task}": row.score for row in rows}
        if params.held_out:
            held_out = held_out_task(run_dir, step, params.held_out, params.held_out_batches)
            scores |= {f"heldout.{name}": value for name, value in held_out.items()}
        points.append(CurvePoint(step=step, scores=scores))
        for name, score in scores.items():
            client.log_metric(params.run_id, name, score, step=step)
    curve = logged_curve(client, params.run_id)
    curves = {
        name: [(s, scores[name]) for s, scores in curve.items() if name in scores]
        for name in {t for v in curve.values() for t in v}
    }
    figure = line_plot(dict(sorted(curves.items())), "training step", "score", "evaluation during training")
    client.log_figure(params.run_id, figure, "learning_curve.png")
    return points
