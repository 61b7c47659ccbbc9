"""MLflow: where runs go, the model registry (register, export, resolve) and the queries the CLI shows."""

import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow
import torch
import transformers
from mlflow import MlflowClient
from mlflow.tracking import fluent as _fluent  # MLflow's process globals, which no public API resets
from mlflow.tracking._model_registry import utils as _registry_utils
from mlflow.tracking._tracking_service import utils as _tracking_utils
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.answer.confidence import CONFIDENCE_FILE
from npmcore.answer.ranking import RANKER_FILE
from npmcore.model.query_encoder import QUERY_ENCODER
from npmcore.storage import StoreFullError, bytes_free, caused_by
from npmcore.tracking_store import tracking_uri

log = logging.getLogger(__name__)

REGISTERED_MODEL = "npm-encoder"
QUERY_MODEL = "npm-query-encoder"  # query encoders (npmcore.model.query_encoder), each naming its passage encoder
_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_ID")
# what MLflow's API and assistant read as an experiment of model training, not of GenAI traces
EXPERIMENT_KIND, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
# MLflow 3.17's UI opens every experiment on the view of its toggle (GenAI unless the browser chose another):
# a link with this query opens the runs (its model-training view)
MODEL_TRAINING_VIEW = "workflowType=machine_learning"


@contextmanager
def tracking(uri: str, experiment: str | None) -> Iterator[None]:
    """Point MLflow tracking and the model registry at ``uri`` and select ``experiment``
    (None: the registry only, no experiment selected or created) for the duration of the block. An
    experiment is marked as one of model training (:data:`EXPERIMENT_KIND`) the first time.

    MLflow's setters keep the URIs and the experiment in module globals and also write
    ``MLFLOW_TRACKING_URI``, ``MLFLOW_REGISTRY_URI`` and ``MLFLOW_EXPERIMENT_ID`` into the
    environment; all are restored afterwards, so that a long-lived process (a Prefect worker, a
    test session) does not carry one run's store into the next: a client made later with only a
    tracking URI, ``MlflowClient(tracking_uri=…)``, would otherwise read the model registry of the
    last store a block pointed at.

    Raises:
        StoreFullError: a store-local SQLite database (``sqlite:///…``) could not grow, in the block or before it.
    """
    previous = {name: os.environ.get(name) for name in _VARIABLES}
    previous_globals = (_tracking_utils._tracking_uri, _registry_utils._registry_uri, _fluent._active_experiment_id)
    try:
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        local = experiment is not None and uri.startswith("sqlite:///")
        if local and mlflow.get_experiment_by_name(experiment) is None:
            # a store-local database keeps its artifacts beside it, not in ./mlruns of the process's folder
            artifacts = Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts" / experiment
            try:
                mlflow.create_experiment(experiment, artifact_location=artifacts.as_uri())
            except mlflow.exceptions.MlflowException:
                if mlflow.get_experiment_by_name(experiment) is None:  # not created meanwhile by another process
                    raise
        if experiment is not None and EXPERIMENT_KIND not in mlflow.set_experiment(experiment).tags:
            mlflow.set_experiment_tag(EXPERIMENT_KIND, MODEL_TRAINING)
        yield
    except Exception as e:
        if uri.startswith("sqlite:///") and database_full(e):
            raise full_database(Path(uri.removeprefix("sqlite:///"))) from e
        raise
    finally:
        _tracking_utils._tracking_uri, _registry_utils._registry_uri, _fluent._active_experiment_id = previous_globals
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def database_full(error: BaseException) -> bool:
    """Whether SQLite's "database or disk is full" is in ``error``'s chain (SQLAlchemy and MLflow wrap it)."""
    return caused_by(error, lambda e: isinstance(e, sqlite3.OperationalError) and "database or disk is full" in str(e))


def full_database(path: Path) -> StoreFullError:
    """The error of a store whose MLflow database (``path``) could not grow: it names the database and the
    room left."""
    free = bytes_free(path.parent) or "its disk's free space unknown"
    return StoreFullError(
        f"store {path.parent} is full: its MLflow database {path.name} could not grow ({free}); "
        "make room and run the command again"
    )


def flat_params(value: dict, prefix: str = "") -> dict[str, object]:
    """Nested config dict as MLflow params: {"masking": {"ratio": …}} -> {"masking.ratio": …}."""
    flat: dict[str, object] = {}
    for key, sub in value.items():
        flat.update(flat_params(sub, f"{prefix}{key}.") if isinstance(sub, dict) else {f"{prefix}{key}": sub})
    return flat


def log_config(config: dict, run_dir: str) -> None:
    """A training run's config as params and its run folder (checkpoints) as the ``run_dir`` tag."""
    mlflow.log_params(flat_params(config))
    mlflow.set_tag("run_dir", run_dir)


def log_encoder(
    tokenizer: PreTrainedTokenizerFast, model: PreTrainedModel, alias: str | None = None, name: str = REGISTERED_MODEL
) -> str:
    """Log the encoder with its MLM head (transformers flavour, a ``*ForMaskedLM`` model) in the
    active run, register it as ``name`` (``npm-encoder``; query encoders ``npm-query-encoder``) and
    optionally point ``alias`` at the new version; returns its URI."""
    info = mlflow.transformers.log_model(
        transformers_model={"model": model, "tokenizer": tokenizer},
        name="encoder",
        task="fill-mask",
        registered_model_name=name,
        # Stated, not inferred: inference imports optional packages (torchvision) that are not installed.
        pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"transformers=={transformers.__version__}"],
    )
    version = str(info.registered_model_version)
    if alias:
        MlflowClient().set_registered_model_alias(name, alias, version)
    log.info(
        "registered %s version %s%s in the registry at %s",
        name, version, f" as @{alias}" if alias else "", mlflow.get_registry_uri(),
    )  # fmt: skip
    return f"models:/{name}/{version}"


def check_registered(model_uri: str, uri: str) -> None:
    """Fail unless ``model_uri`` (``models:/name/N``) is a version in the model registry at ``uri``."""
    name, version = model_uri.removeprefix("models:/").rsplit("/", 1)
    try:
        MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version(name, version)
    except mlflow.exceptions.MlflowException as e:
        raise RuntimeError(f"{model_uri} is not in the model registry at {uri}: {e.message}") from None


def register_checkpoint(run_dir: str, uri: str, experiment: str, alias: str | None = None) -> str:
    """Log the newest checkpoint of a run folder (e.g. written by ``torchrun -m npmcore.model.train``)
    in a new MLflow run, as :func:`log_config` and :func:`log_encoder` do for the train flow."""
    from dataclasses import asdict

    from npmcore.model.trained import load_trained

    tokenizer, model, config = load_trained(run_dir)
    with tracking(uri, experiment), mlflow.start_run():
        log_config(asdict(config), run_dir)
        return log_encoder(tokenizer, model, alias)


def register_encoder(folder: str, uri: str, experiment: str, alias: str | None = None) -> str:
    """Log an encoder folder (e.g. returned by a GPU run, weights in parts) in a new MLflow run;
    its ``training.json`` (config and metrics, written beside the weights) becomes params and metrics,
    and its evidence-scoring weights (``ranker.json``) an artifact that :func:`export_encoder` brings back;
    so does a query encoder's ``query_encoder.json``, which registers it as ``npm-query-encoder``."""
    import json

    from npmcore.encoder import load_masked_lm

    tokenizer, model = load_masked_lm(folder)
    with tracking(uri, experiment), mlflow.start_run():
        summary = Path(folder, "training.json")
        if summary.exists():
            training = json.loads(summary.read_text())
            log_config(training["config"], folder)
            mlflow.log_metrics({k: float(v) for k, v in training["metrics"].items()})
        for name in (RANKER_FILE, CONFIDENCE_FILE, QUERY_ENCODER):
            if Path(folder, name).exists():
                mlflow.log_artifact(str(Path(folder, name)))
        query = Path(folder, QUERY_ENCODER).exists()  # a query encoder: registered as one
        return log_encoder(tokenizer, model, alias, QUERY_MODEL if query else REGISTERED_MODEL)


def export_encoder(model_uri: str, store: str) -> str:
    """Copy a registered encoder (``models:/npm-encoder@champion``, ``models:/npm-encoder/3``)
    out of MLflow into an encoder snapshot ``{store}/encoder/{weights digest}`` that every
    worker can load like any Hugging Face model folder, with the ``ranker.json``, ``confidence.npz`` and (a query
    encoder's) ``query_encoder.json`` its run logged (:func:`register_encoder`); returns its URL (reused when there)."""
    import tempfile

    from npmcore.encoder import encoder_fingerprint
    from npmcore.snapshots import ENCODER
    from npmcore.storage import Manifest, SnapshotWriter, existing_snapshot, snapshot_url

    if "@" in model_uri:  # a missing alias gets a message that says how to make it
        name, alias = model_uri.removeprefix("models:/").split("@", 1)
        _version_by_alias(MlflowClient(), name, alias)
    try:
        components = mlflow.transformers.load_model(model_uri, return_type="components")
    except mlflow.exceptions.MlflowException as e:
        raise ValueError(
            f"cannot load {model_uri} from the MLflow registry at {mlflow.get_registry_uri()}: {e.message}"
        ) from e
    model, tokenizer = components["model"], components["tokenizer"]
    snap_id = encoder_fingerprint(model.base_model)
    url = snapshot_url(store, ENCODER, snap_id)
    if existing_snapshot(url):
        return url
    with tempfile.TemporaryDirectory() as tmp, SnapshotWriter(store, ENCODER, snap_id) as writer:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        run_id = mlflow.models.get_model_info(model_uri).run_id  # the run that logged it, its ranker.json and
        logged = {a.path for a in MlflowClient().list_artifacts(run_id)} if run_id else set()  # passage side
        for name in (RANKER_FILE, CONFIDENCE_FILE, QUERY_ENCODER):
            if name in logged:
                mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name, dst_path=tmp)
        for path in sorted(Path(tmp).iterdir()):
            with open(path, "rb") as src:
                data = src.read()
            writer.write_bytes(path.name, data)
        manifest = Manifest(
            ENCODER, snap_id, [{"model_uri": model_uri}], {"fingerprint": snap_id}, {}, dict(writer.files)
        )
        return writer.commit(manifest)


def resolve_encoder(model: str | None, store: str) -> str | None:
    """A loadable encoder location: registry URIs (``models:/…``) are exported into the store once."""
    if model is None or not model.startswith("models:/"):
        return model
    with tracking(tracking_uri(store), None):
        return export_encoder(model, store)


def model_version(model: str | None, store: str) -> str | None:
    """The registry version a model URI names now (``models:/npm-encoder@champion`` ->
    ``models:/npm-encoder/3``); other encoders as given."""
    if model is None or not model.startswith("models:/") or "@" not in model:
        return model
    name, alias = model.removeprefix("models:/").split("@", 1)
    with tracking(tracking_uri(store), None):
        return f"models:/{name}/{_version_by_alias(MlflowClient(), name, alias).version}"


def _version_by_alias(client: MlflowClient, name: str, alias: str):
    try:
        return client.get_model_version_by_alias(name, alias)
    except mlflow.exceptions.MlflowException as e:
        raise ValueError(
            f"no {name}@{alias} in the model registry at {mlflow.get_registry_uri()}: train one and promote it "
            f"(`npmcore train … --alias {alias}`, or the train deployment, which promotes), or point the "
            f"alias at a version (`npmcore promote models:/{name}/N --force`)"
        ) from e


def run_url(uri: str, run) -> str:
    """Where a run is seen: its page in the MLflow UI's model-training view for a tracking server, else its id
    in the store."""
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?{MODEL_TRAINING_VIEW}"
    return f"{uri} run {run.info.run_id}"


def log_snapshot_input(kind: str, url: str, context: str) -> None:
    """A snapshot read by the active run as an MLflow dataset input (the run page's "Datasets"):
    named by kind and id, digest = its content address."""
    import warnings

    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    from npmcore.storage import read_manifest

    manifest = read_manifest(url)
    with warnings.catch_warnings():  # a path is a local artifact source however MLflow could read it
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(url)
    mlflow.log_input(MetaDataset(source, name=f"{kind} {manifest.id}", digest=manifest.id), context=context)


def describe_version(model_uri: str, description: str) -> None:
    """Set the description of a registered version (``models:/name/N``) in the active registry."""
    name, version = model_uri.removeprefix("models:/").rsplit("/", 1)
    MlflowClient().update_model_version(name, version, description=description)


def logged_curve(client: MlflowClient, run_id: str) -> dict[int, dict[str, float]]:
    """Every learning-curve point of a training run, the newest value per step: ``eval.<task>``
    scores and ``heldout.<…>_acc`` accuracies, as {step: {metric: value}}."""
    curve: dict[int, dict[str, float]] = {}
    for key in client.get_run(run_id).data.metrics:
        if key.startswith("eval.") or (key.startswith("heldout.") and key.endswith("acc")):
            for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp):
                curve.setdefault(m.step, {})[key] = m.value
    return curve


SCORES = ("accuracy", "exact_match", "macro_exact_match")


def compare(uri: str, experiment: str, items: list[str]) -> dict[str, dict[str, str]]:
    """Scores side by side: per item (an evaluation run id, or a model: its newest run per task
    and system), ``{"<task>/<system> <metric>": score, "corpus tokens": …}``; a masked-token
    study's best rows appear as ``accuracy.<system>`` and ``perplexity.<system>``."""
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"no MLflow experiment {experiment!r} at {uri}: run npmcore eval first")
    columns: dict[str, dict[str, str]] = {}
    for item in items:
        try:
            runs = (
                [client.get_run(item)]
                if _looks_like_run_id(item)
                else client.search_runs(
                    [found.experiment_id],
                    filter_string=f"params.model = '{item}'",
                    order_by=["attributes.start_time DESC"],
                )
            )
        except mlflow.exceptions.MlflowException as e:
            raise ValueError(f"{item}: {e.message}") from None
        if not runs:
            raise ValueError(
                f"{item}: no evaluation run in experiment {experiment!r} (run npmcore eval --model {item})"
            )
        cells: dict[str, str] = {}
        for run in runs:  # newest first: keep the newest score of each task and system
            params = run.data.params
            for name, value in run.data.metrics.items():
                if name in SCORES or name.split(".")[0] in ("accuracy", "perplexity"):  # masked-token studies
                    cells.setdefault(f"{params.get('task')}/{params.get('system')} {name}", f"{value:.4f}")
            cells.setdefault("corpus tokens", params.get("corpus_tokens", ""))
        columns[item] = cells
    return columns


def _looks_like_run_id(item: str) -> bool:
    return len(item) == 32 and all(c in "0123456789abcdef" for c in item)
