"""Training task: NPM training with per-step MLflow metrics, then registry logging."""

from contextlib import nullcontext
from dataclasses import asdict

import mlflow
from prefect import task

from npmcore.progress import step_progress
from npmcore.train import StepStats, TrainConfig, train
from npmcore.tracking import log_encoder
from tasks import is_transient


def _log_step(stats: StepStats) -> None:
    metrics = asdict(stats)
    mlflow.log_metrics({k: v for k, v in metrics.items() if k != "step"}, step=stats.step)


@task(name="train-encoder", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient)
def train_task(config: TrainConfig, run_dir: str, alias: str | None, progress: bool) -> str:
    """Train (resuming from ``run_dir``'s newest checkpoint on a retry); returns the registered model URI."""
    with step_progress("training", config.steps) if progress else nullcontext() as show:

        def on_step(stats: StepStats) -> None:
            _log_step(stats)
            if show is not None:
                show(stats)

        tokenizer, model = train(config, run_dir, on_step=on_step)
    return log_encoder(tokenizer, model, alias)
