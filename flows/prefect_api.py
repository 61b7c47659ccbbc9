"""One Prefect API for a whole command, shared with its Dask workers."""

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def prefect_api() -> Iterator[str]:
    """Yields the Prefect API URL the command reports to, exported as ``PREFECT_API_URL``.

    The configured API (a running ``prefect server start``) when there is one. Without,
    one temporary local server is started for the command. Either way Dask worker
    processes started inside the block inherit the URL and report to it, instead of each
    starting a temporary server of its own (about 20 s apiece).
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    previous = os.environ.get("PREFECT_API_URL")
    if url := PREFECT_API_URL.value():
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            _restore(previous)
        return
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start(timeout=int(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            try:
                yield server.api_url
            finally:
                APILogWorker.drain_all()  # deliver the last log lines before the server goes
    finally:
        _restore(previous)
        server.stop()


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = previous
