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
    """Retry only failures that a second try can fix: network and I/O errors, not bad input."""
    error = state.data
    return isinstance(error, (ConnectionError, TimeoutError, OSError)) and not isinstance(
        error, (FileNotFoundError, PermissionError, IsADirectoryError)
    )


def inputs_and_version(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Cache key of a task: its name, its inputs (snapshot URLs name content-addressed
    snapshots) and the package version; ``progress`` (display only) is left out."""
    return hash_objects(context.task.name, {k: v for k, v in parameters.items() if k != "progress"}, __version__)
