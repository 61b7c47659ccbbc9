"""SIGINT and SIGTERM stop a command and everything it started (a temporary Prefect server, a local Dask
cluster) within 10 s, with exit status 128 + the signal's number: 130 and 143, as a shell reports them.

The signal raises KeyboardInterrupt in the main thread, as Ctrl-C does, so that every with-block on the way
out stops what it started: Prefect's flow engine marks its run crashed, a LocalCluster closes its workers,
``prefect_api`` stops its server, a SnapshotWriter removes its unfinished files (no manifest: no snapshot).
Some take the signal first: Prefect's SIGTERM handler while a flow runs (it raises, then sends the signal
again once the run has ended), uvicorn's in ``npmcore api`` (it shuts down, then sends it again), a Prefect
runner's in ``npmcore serve`` (it stops its runs). Whatever the clean-up has not ended :data:`GRACE_S`
after the signal (a thread that will not stop, a child that will not exit, a main thread in a long C call)
is killed."""

import atexit
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import psutil

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 8.0  # the clean-up's time (a LocalCluster whose worker is busy in a forward: 4 s) before the kill


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """The block ends at SIGINT or SIGTERM with ``SystemExit(128 + signal)`` once it has cleaned up, or the
    process is killed, its children first, :data:`GRACE_S` after the signal. Later signals, for the rest of
    the process, raise nothing: they would cut the clean-up short."""
    raised: list[int] = []  # the signal KeyboardInterrupt was raised for (once)
    seen: list[int] = []  # the first signal, whichever handler took it

    def interrupt(signum: int, frame: object) -> None:
        if not raised:
            raised.append(signum)
            raise KeyboardInterrupt

    for signum in SIGNALS:
        signal.signal(signum, interrupt)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)  # every signal's number, whichever handler takes it
    threading.Thread(target=_kill_after_signal, args=(read, seen), daemon=True).start()
    try:
        yield
    finally:
        if received := raised or seen:
            # what the clean-up left, at exit: after Prefect's threads have sent their last lines to its
            # temporary server (threading's exit hooks run before atexit's), which they would wait for
            atexit.register(kill_children)
            raise SystemExit(128 + received[0])


def kill_children() -> None:
    """Kill every descendant process of this one: what the clean-up left (the multiprocessing resource
    tracker, say: it ignores SIGTERM and SIGINT)."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def _kill_after_signal(wakeup: int, seen: list[int]) -> None:
    """Kill the process tree :data:`GRACE_S` after the first SIGINT or SIGTERM read from the ``wakeup`` pipe
    (noted in ``seen``): counted from the signal's arrival, whichever handler takes it, even while the main
    thread is in C code."""
    while (signum := os.read(wakeup, 1)[0]) not in SIGNALS:
        pass
    seen.append(signum)
    time.sleep(GRACE_S)
    kill_children()
    os._exit(128 + signum)
