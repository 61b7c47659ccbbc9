"""MLflow: where runs go, and logging a trained encoder into the Model Registry."""

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow
import requests
import torch
import transformers
from mlflow import MlflowClient
from transformers import PreTrainedModel, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

REGISTERED_MODEL = "npm-encoder"
_URI_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


@contextmanager
def tracking(uri: str, experiment: str) -> Iterator[None]:
    """Point MLflow tracking and the model registry at ``uri`` and select ``experiment``
    for the duration of the block.

    MLflow's setters also write ``MLFLOW_TRACKING_URI`` / ``MLFLOW_REGISTRY_URI`` into the
    environment; both are restored afterwards, so a long-lived process (a Prefect worker)
    does not carry one run's store into the next.
    """
    previous = {name: os.environ.get(name) for name in _URI_VARIABLES}
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if uri.startswith("sqlite:///") and mlflow.get_experiment_by_name(experiment) is None:
        # a store-local database keeps its artifacts beside it, not in ./mlruns of whatever folder the process runs in
        artifacts = Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts" / experiment
        try:
            mlflow.create_experiment(experiment, artifact_location=artifacts.as_uri())
        except mlflow.exceptions.MlflowException:  # created meanwhile by another process
            pass
    mlflow.set_experiment(experiment)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def flat_params(value: dict, prefix: str = "") -> dict[str, object]:
    """Nested config dict as MLflow params: {"masking": {"ratio": …}} -> {"masking.ratio": …}."""
    flat: dict[str, object] = {}
    for key, sub in value.items():
        flat.update(flat_params(sub, f"{prefix}{key}.") if isinstance(sub, dict) else {f"{prefix}{key}": sub})
    return flat


class TrackingError(RuntimeError):
    """The MLflow tracking server cannot be reached."""


def check_server(uri: str, timeout_s: float = 10) -> None:
    """Fail within ``timeout_s`` with :class:`TrackingError` when ``uri`` is an MLflow server
    (http/https) that does not answer ``/health``; MLflow's own client would retry for minutes.
    Database and file URIs are not checked."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        requests.get(f"{uri.rstrip('/')}/health", timeout=timeout_s).raise_for_status()
    except requests.RequestException as e:
        raise TrackingError(
            f"cannot reach the MLflow server at {uri} within {timeout_s:g} s ({type(e).__name__}): start it "
            "(`mlflow server …`) or unset MLFLOW_TRACKING_URI to log into the store's own database"
        ) from e


def default_tracking_uri(store: str) -> str:
    """A SQLite tracking store inside a local store root (used when MLFLOW_TRACKING_URI is unset)."""
    if "://" in store and not store.startswith("file://"):
        raise ValueError(
            f"store {store} is not local: set MLFLOW_TRACKING_URI to an MLflow server (mlflow server …)"
        )
    root = Path(store.removeprefix("file://")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


def log_encoder(tokenizer: PreTrainedTokenizerFast, model: PreTrainedModel, alias: str | None = None) -> str:
    """Log the encoder with its MLM head (transformers flavour, a ``*ForMaskedLM`` model) in the
    active run, register it as ``npm-encoder`` and optionally point ``alias`` at the new
    version; returns its URI."""
    info = mlflow.transformers.log_model(
        transformers_model={"model": model, "tokenizer": tokenizer},
        name="encoder",
        task="fill-mask",
        registered_model_name=REGISTERED_MODEL,
        # Stated, not inferred: inference imports optional packages (torchvision) that are not installed.
        pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"transformers=={transformers.__version__}"],
    )
    version = str(info.registered_model_version)
    if alias:
        MlflowClient().set_registered_model_alias(REGISTERED_MODEL, alias, version)
    log.info("registered %s version %s%s", REGISTERED_MODEL, version, f" as @{alias}" if alias else "")
    return f"models:/{REGISTERED_MODEL}/{version}"


def export_encoder(model_uri: str, store: str) -> str:
    """Copy a registered encoder (``models:/npm-encoder@champion``, ``models:/npm-encoder/3``)
    out of MLflow into an encoder snapshot ``{store}/encoder/{weights digest}`` that every
    worker can load like any Hugging Face model folder; returns its URL (reused when there)."""
    import tempfile

    from npmcore.encoder import encoder_fingerprint
    from npmcore.storage import Manifest, SnapshotError, SnapshotWriter, open_snapshot, snapshot_url

    try:
        components = mlflow.transformers.load_model(model_uri, return_type="components")
    except mlflow.exceptions.MlflowException as e:
        raise ValueError(f"cannot load {model_uri} from the MLflow registry at {mlflow.get_registry_uri()}: {e.message}") from e
    model, tokenizer = components["model"], components["tokenizer"]
    snap_id = encoder_fingerprint(model)
    url = snapshot_url(store, "encoder", snap_id)
    try:
        open_snapshot(url)
        return url
    except SnapshotError:
        pass
    with tempfile.TemporaryDirectory() as tmp, SnapshotWriter(store, "encoder", snap_id) as writer:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for path in sorted(Path(tmp).iterdir()):
            with open(path, "rb") as src:
                data = src.read()
            writer.write_bytes(path.name, data)
        manifest = Manifest("encoder", snap_id, [{"model_uri": model_uri}], {"fingerprint": snap_id}, {}, dict(writer.files))
        return writer.commit(manifest)
