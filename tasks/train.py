"""Training tasks: a training run with per-step MLflow metrics and registry logging; checkpoint export."""

from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import mlflow
from prefect import task

from npmcore.progress import step_progress
from npmcore.storage import join
from npmcore.tracking import log_config, log_encoder, tracking
from npmcore.train import StepStats, TrainConfig, export_checkpoint, held_out_metrics, load_trained, train
from tasks import HOUR, inputs_and_version, is_transient


def _log_step(stats: StepStats) -> None:
    metrics = asdict(stats)
    mlflow.log_metrics({k: v for k, v in metrics.items() if k != "step" and v is not None}, step=stats.step)


@task(
    name="train-encoder",
    retries=1,
    retry_delay_seconds=30,
    retry_condition_fn=is_transient,
    timeout_seconds=7 * 24 * HOUR,
    cache_key_fn=inputs_and_version,
    persist_result=True,
)
def train_task(
    config: TrainConfig, store: str, tracking_uri: str, experiment: str, alias: str | None, progress: bool
) -> str:
    """Train in a new MLflow run (resuming from its run folder's newest checkpoint on a retry)
    and register the encoder; returns the registered model URI. The same config, store and
    package version give the cached URI without training again."""
    with tracking(tracking_uri, experiment), mlflow.start_run(nested=True) as run:
        run_dir = join(store, "runs", run.info.run_id)
        log_config(asdict(config), run_dir)
        with step_progress("training", config.steps) if progress else nullcontext() as show:

            def on_step(stats: StepStats) -> None:
                _log_step(stats)
                if show is not None:
                    show(stats)

            tokenizer, model = train(config, run_dir, on_step=on_step)
        return log_encoder(tokenizer, model, alias)


@task(name="export-checkpoint", timeout_seconds=HOUR)
def export_checkpoint_task(run_dir: str, step: int, out: Path) -> str:
    """The checkpoint of ``step`` (0: the initial encoder) as an fp16 encoder folder (made once)."""
    if not (out / "config.json").exists():
        export_checkpoint(run_dir, step, out)
    return str(out)


@task(name="held-out-metrics", timeout_seconds=HOUR)
def held_out_task(run_dir: str, step: int, corpus: str, batches: int) -> dict[str, float]:
    """The training objective's loss and accuracies of a checkpoint (0: the initial encoder,
    with the run's fresh MLM head) on ``batches`` batches of a held-out corpus snapshot."""
    tokenizer, model, config = load_trained(run_dir, step)
    return held_out_metrics(model, tokenizer, config, corpus, batches)
