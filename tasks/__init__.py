"""Thin Prefect tasks: each calls one npmcore function and declares retries and timeouts."""

from prefect import Task
from prefect.client.schemas.objects import TaskRun
from prefect.states import State


def is_transient(task: Task, task_run: TaskRun, state: State) -> bool:
    """Retry only failures that a second try can fix: network and I/O errors, not bad input."""
    error = state.data
    return isinstance(error, (ConnectionError, TimeoutError, OSError)) and not isinstance(
        error, (FileNotFoundError, PermissionError, IsADirectoryError)
    )
