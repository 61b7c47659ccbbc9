"""Training tasks: a training run (both sides, or query-side) with per-step MLflow metrics and registry logging;
checkpoint export."""

import tempfile
from dataclasses import asdict
from pathlib import Path

import mlflow
from prefect import task

from npmcore.adapt.query_train import QueryStepStats, QueryTrainConfig, export_query_encoder, train_query
from npmcore.encoder import load_masked_lm
from npmcore.model.query_encoder import QUERY_ENCODER, passage_side
from npmcore.model.step_stats import StepStats
from npmcore.model.train import held_out_metrics, train
from npmcore.model.train_config import TrainConfig
from npmcore.model.trained import export_checkpoint, load_trained
from npmcore.progress import step_progress
from npmcore.storage import join
from npmcore.tracking import QUERY_MODEL, describe_version, log_config, log_encoder, log_snapshot_input, tracking
from tasks import HOUR, inputs_and_version, is_transient, link_runs

# a training task: retried once on a transient failure (resuming its newest checkpoint), cached by its inputs
TRAINING = dict(
    retries=1,
    retry_delay_seconds=30,
    retry_condition_fn=is_transient,
    timeout_seconds=7 * 24 * HOUR,
    cache_key_fn=inputs_and_version,
    persist_result=True,
)


def _log_step(stats: StepStats | QueryStepStats) -> None:
    metrics = asdict(stats)
    mlflow.log_metrics({k: v for k, v in metrics.items() if k != "step" and v is not None}, step=stats.step)


@task(name="train-encoder", **TRAINING)
def train_task(
    config: TrainConfig, preset: str, store: str, tracking_uri: str, experiment: str, alias: str | None, progress: bool
) -> str:
    """Train in a new MLflow run (resuming from its run folder's newest checkpoint on a retry)
    and register the encoder, described by its run; returns the registered model URI. The same
    config, store and package version give the cached URI without training again."""
    run_name = f"{config.objective} {preset} {config.steps} steps"
    with tracking(tracking_uri, experiment), mlflow.start_run(run_name=run_name, nested=True) as run:
        run_dir = join(store, "runs", run.info.run_id)
        log_config(asdict(config), run_dir)
        mlflow.set_tag("preset", preset)
        log_snapshot_input("corpus", config.corpus, "training")
        link_runs(tracking_uri)
        last: list[StepStats] = []
        with step_progress("training", config.steps, terminal=progress) as show:

            def on_step(stats: StepStats) -> None:
                _log_step(stats)
                last[:] = [stats]
                show(stats)

            tokenizer, model = train(config, run_dir, on_step=on_step)
        uri = log_encoder(tokenizer, model, alias)
        describe_version(uri, description(config, preset, run.info.run_id, last[0] if last else None))
        return uri


def description(config: TrainConfig, preset: str, run_id: str, final: StepStats | None) -> str:
    """A registered version's description: what trained it and how far it got."""
    start = config.encoder or "MiniLM-L6 as published"
    text = (
        f"{config.objective} training (preset {preset}) from {start}: {config.steps} steps of {config.batch_size} "
        f"sequences, lr {config.lr:g}, on corpus snapshot {config.corpus}. MLflow run {run_id}."
    )
    if final is not None:
        accuracies = {
            k: getattr(final, k) for k in ("start_acc", "end_acc", "mlm_acc") if getattr(final, k) is not None
        }
        text += f" Final step: loss {final.loss:.3f}" + "".join(f", {k} {v:.3f}" for k, v in accuracies.items()) + "."
    return text


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


@task(name="train-query-encoder", **TRAINING)
def train_query_task(
    config: QueryTrainConfig, store: str, tracking_uri: str, experiment: str, alias: str | None, progress: bool
) -> str:
    """Query-side training in a new MLflow run (nested in the active one, such as a paper table's; resuming its
    run folder's newest checkpoint on a retry); the query encoder is registered as ``npm-query-encoder`` with the
    passage encoder it names (its ``query_encoder.json`` an artifact, the encoder and its weights tags); returns
    the registered model URI."""
    run_name = f"query side {config.steps} steps"
    with tracking(tracking_uri, experiment), mlflow.start_run(run_name=run_name, nested=True) as run:
        run_dir = join(store, "runs", run.info.run_id)
        log_config(asdict(config), run_dir)
        mlflow.set_tag("side", "query")
        log_snapshot_input("index", config.index, "training")
        link_runs(tracking_uri)
        with step_progress("query-side training", config.steps, terminal=progress) as show:

            def on_step(stats: QueryStepStats) -> None:
                _log_step(stats)
                show(stats)

            train_query(config, run_dir, on_step=on_step)
        with tempfile.TemporaryDirectory() as tmp:
            folder = export_query_encoder(run_dir, Path(tmp) / "query-encoder")
            side = passage_side(str(folder))
            mlflow.set_tags({"passage_encoder": side.encoder, "passage_fingerprint": side.fingerprint})
            mlflow.log_artifact(str(folder / QUERY_ENCODER))
            tokenizer, model = load_masked_lm(folder)
            uri = log_encoder(tokenizer, model, alias, QUERY_MODEL)
        describe_version(
            uri,
            f"Query encoder for passage encoder {side.encoder} (weights {side.fingerprint}): {config.steps} steps of "
            f"{config.batch_size} queries ({config.examples}) against the top {config.passages} BM25 passages of "
            f"index {config.index}, lr {config.lr:g}. MLflow run {run.info.run_id}.",
        )
        return uri
