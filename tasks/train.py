"""Training task: NPM training with per-step MLflow metrics, then registry logging."""

from contextlib import nullcontext
from dataclasses import asdict

import mlflow
from prefect import task

from npmcore.progress import step_progress
from npmcore.storage import join
from npmcore.train import StepStats, TrainConfig, train
from npmcore.tracking import flat_params, log_encoder, tracking
from tasks import inputs_and_version, is_transient


def _log_step(stats: StepStats) -> None:
    metrics = asdict(stats)
    mlflow.log_metrics({k: v for k, v in metrics.items() if k != "step" and v is not None}, step=stats.step)


@task(
    name="train-encoder", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient,
    cache_key_fn=inputs_and_version, persist_result=True,
)
def train_task(config: TrainConfig, store: str, tracking_uri: str, experiment: str, alias: str | None, progress: bool) -> str:
    """Train in a new MLflow run (resuming from its run folder's newest checkpoint on a retry)
    and register the encoder; returns the registered model URI. The same config, store and
    package version give the cached URI without training again."""
    with tracking(tracking_uri, experiment), mlflow.start_run(nested=True) as run:
        mlflow.log_params(flat_params(asdict(config)))
        run_dir = join(store, "runs", run.info.run_id)
        mlflow.set_tag("run_dir", run_dir)
        with step_progress("training", config.steps) if progress else nullcontext() as show:

            def on_step(stats: StepStats) -> None:
                _log_step(stats)
                if show is not None:
                    show(stats)

            tokenizer, model = train(config, run_dir, on_step=on_step)
        return log_encoder(tokenizer, model, alias)

