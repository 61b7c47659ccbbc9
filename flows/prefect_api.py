"""One Prefect API for a whole command, shared with its Dask workers."""

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def prefect_api(meanwhile: Callable[[], object] = lambda: None) -> Iterator[str]:
    """Yields the Prefect API URL the command reports to, exported as ``PREFECT_API_URL``.

    The configured API (a running ``prefect server start``) when there is one. Without,
    one temporary local server is started for the command, and ``meanwhile`` (the command's
    own preparations: importing its flows, …) runs while it starts, its seconds hidden behind
    the server's (3 s; 20 s on a first run, which makes the server's database). Either
    way Dask worker processes started inside the block inherit the URL and report to it,
    instead of each starting a temporary server of its own (about 20 s apiece).
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    previous = os.environ.get("PREFECT_API_URL")
    if url := PREFECT_API_URL.value():
        os.environ["PREFECT_API_URL"] = url
        meanwhile()
        try:
            yield url
        finally:
            _restore(previous)
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.server.api.server import SubprocessASGIServer

    server, failed = SubprocessASGIServer(), []

    def start() -> None:
        try:
            server.start(timeout=int(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
        except BaseException as e:  # raised below, in the command's thread
            failed.append(e)

    starting = threading.Thread(target=start, daemon=True)
    starting.start()
    try:
        meanwhile()
    finally:
        starting.join()
    if failed:
        server.stop()
        raise failed[0]
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            try:
                yield server.api_url
            finally:
                APILogWorker.drain_all()  # deliver the last log lines and events before the server goes:
                EventsWorker.drain_all()  # else the process spends 3 s at its exit trying to send them
    finally:
        _restore(previous)
        server.stop()


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = previous
