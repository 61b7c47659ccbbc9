"""One Prefect API for a whole command, shared with its Dask workers."""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

STOP_S = 5.0  # how long a temporary server may take to stop before it is killed (Prefect's own wait)


@contextmanager
def prefect_api(meanwhile: Callable[[], object] = lambda: None) -> Iterator[str]:
    """Yields the Prefect API URL the command reports to, exported as ``PREFECT_API_URL``.

    The configured API (a running ``prefect server start``) when there is one. Without, one temporary local
    server is started for the command (:func:`temporary_server`), its URL exported at once, and ``meanwhile``
    (the command's own preparations: importing its flows, …) runs while it starts,
    its seconds hidden behind the server's (3 s; 20 s on a first run, which makes the server's database).
    Either way Dask worker processes started inside the block (``meanwhile`` included) inherit the URL and
    report to it, instead of each starting a temporary server of its own (about 20 s apiece).
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

    with temporary_server() as (url, wait_until_up):
        os.environ["PREFECT_API_URL"] = url
        try:
            meanwhile()
            wait_until_up()
            with temporary_settings({PREFECT_API_URL: url}):
                try:
                    yield url
                finally:
                    APILogWorker.drain_all()  # deliver the last log lines and events before the server goes:
                    EventsWorker.drain_all()  # else the process spends 3 s at its exit trying to send them
        finally:
            _restore(previous)


@contextmanager
def temporary_server() -> Iterator[tuple[str, Callable[[], None]]]:
    """A temporary Prefect server for the block, as Prefect's own ephemeral one runs (uvicorn serving
    ``prefect.server``'s app, the UI and the server's services off), stopped at its end. Yields its API URL,
    known before it answers (the socket is bound here and handed to uvicorn: no other process can take the
    port meanwhile), and the function that waits until it answers (its health check; the timeout:
    ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``) or fails naming why. Started without importing
    ``prefect.server`` here: that is the server process's (4 s of this one's start, 9 s before its bytecode
    is compiled)."""
    from prefect.logging import get_logger
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, get_current_settings

    log = get_logger()  # "prefect", as Prefect's own temporary server logs
    with socket.create_server(("127.0.0.1", 0)) as listening:
        address = f"http://127.0.0.1:{listening.getsockname()[1]}"
        url = f"{address}/api"
        log.info("Starting temporary server on %s", address)
        fd = listening.fileno()
        env = os.environ | get_current_settings().to_environment_variables(exclude_unset=True)
        env |= {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        app = ["--factory", "prefect.server.api.server:create_app", "--fd", str(fd), "--log-level", "error"]
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", *app, "--lifespan", "on"], env=env, pass_fds=[fd])

    def wait_until_up() -> None:
        timeout_s = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
        deadline = time.monotonic() + timeout_s
        while server.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        if server.poll() is not None:
            raise RuntimeError(f"the temporary Prefect server exited with status {server.returncode} as it started")
        raise RuntimeError(
            f"the temporary Prefect server did not answer at {url} within {timeout_s} s "
            "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)"
        )

    try:
        yield url, wait_until_up
    finally:
        log.info("Stopping temporary server on %s", address)
        server.terminate()
        try:
            server.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = previous
