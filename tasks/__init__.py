"""Thin Prefect tasks: each calls one npmcore function and declares its retries (transient
errors only), its timeout and, where a rerun can be skipped, its cache key."""

from typing import Any

from prefect import Task
from prefect.client.schemas.objects import TaskRun
from prefect.context import TaskRunContext
from prefect.states import State
from prefect.utilities.hashing import hash_objects

from npmcore import __version__

HOUR = 3600


def is_transient(task: Task, task_run: TaskRun, state: State) -> bool:
    """Retry only failures that a second try can fix: network and I/O errors (an S3 store's too, once
    botocore's own retries gave up), not bad input."""
    from botocore.exceptions import ConnectionError as S3ConnectionError
    from botocore.exceptions import HTTPClientError

    error = state.data
    network = (ConnectionError, TimeoutError, OSError, S3ConnectionError, HTTPClientError)
    return isinstance(error, network) and not isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError))


def inputs_and_version(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Cache key of a task: its name, its inputs (snapshot URLs name content-addressed
    snapshots) and the package version; ``progress`` (display only) is left out."""
    return hash_objects(context.task.name, {k: v for k, v in parameters.items() if k != "progress"}, __version__)


def link_runs(tracking_uri: str) -> None:
    """Tie the active MLflow run and the Prefect flow run that makes it to each other: the flow
    run's id, name and UI address become MLflow tags; the MLflow run's address goes to the flow
    run's log and, for a tracking server, to a link artifact of the flow run."""
    import mlflow
    from prefect import get_run_logger
    from prefect.artifacts import create_link_artifact
    from prefect.runtime import flow_run

    from npmcore.tracking import run_url

    run = mlflow.active_run()
    tags = {
        "prefect.flow_run_id": flow_run.id,
        "prefect.flow_run_name": flow_run.name,
        "prefect.flow_run_url": flow_run.ui_url,
    }
    mlflow.set_tags({k: v for k, v in tags.items() if v})
    address = run_url(tracking_uri, run)
    get_run_logger().info("MLflow run %s: %s", run.info.run_name, address)
    if address.startswith("http"):
        create_link_artifact(
            address, link_text=f"MLflow run {run.info.run_name}", description="The MLflow run of this flow run."
        )
