"""A command stopped by SIGTERM or SIGINT: within 10 s, with status 143 or 130, nothing left of its process tree
(its temporary Prefect server, its Dask cluster) and no snapshot committed."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import BIN, ROOT

from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig

STOP_S = 10  # what a supervisor (systemd, Kubernetes, a CI runner) waits after SIGTERM before it kills


class Running:
    """A process whose output (stdout and stderr) is read as it comes, so that it never blocks on a full pipe."""

    def __init__(self, args: list[str], env: dict | None = None):
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True).start()

    def wait_for(self, pattern: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(re.search(pattern, line) for line in self.lines):
            assert self.process.poll() is None, f"ended before {pattern!r}:\n{''.join(self.lines)}"
            assert time.monotonic() < deadline, f"no {pattern!r} within {timeout_s} s:\n{''.join(self.lines)}"
            time.sleep(0.1)

    def stop(self, signum: int) -> tuple[int, float, list[psutil.Process]]:
        """Send ``signum``; returns the exit status, the seconds to it, and the descendants still running."""
        tree = psutil.Process(self.process.pid).children(recursive=True)
        assert tree, "the process started no children"
        start = time.monotonic()
        self.process.send_signal(signum)
        try:
            status = self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"still running {STOP_S} s after the signal:\n{''.join(self.lines)}") from None
        seconds = time.monotonic() - start
        time.sleep(0.5)  # a child's death is seen by its new parent (init) a moment later
        left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in left:
            p.kill()
        return status, seconds, left


# A command's shape: what it starts, stopped by a with-block on the way out, and a child no one stops (like
# the multiprocessing resource tracker, it ignores SIGTERM and SIGINT).
COMMAND = """
import subprocess, sys, time
from flows.cli import interrupts

interrupts.GRACE_S = {grace_s}
SLEEP = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"]
with interrupts.stopped_by_signals():
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stray = subprocess.Popen(SLEEP)
    try:
        print("started", flush=True)
        time.sleep(60)
    finally:
        {clean_up}
        print("cleaned up", flush=True)
"""


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_cleans_up_exits_with_its_status_and_leaves_no_child(signum, status):
    script = COMMAND.format(grace_s=8, clean_up="server.terminate(); server.wait()")
    command = Running([sys.executable, "-c", script])
    command.wait_for("started", 60)
    code, seconds, left = command.stop(signum)
    assert code == status and "cleaned up\n" in command.lines and not left, (code, left, command.lines)
    assert seconds < 2


def test_a_clean_up_that_hangs_is_cut_short_with_its_children():
    script = COMMAND.format(grace_s=1, clean_up="server.terminate(); server.wait(); time.sleep(60)")
    command = Running([sys.executable, "-c", script])
    command.wait_for("started", 60)
    code, seconds, left = command.stop(signal.SIGTERM)
    assert code == 143 and not left, (code, left, command.lines)
    assert 1 <= seconds < 3 and "cleaned up\n" not in command.lines


@pytest.fixture(scope="module")
def news_corpus(tmp_path_factory, news_path) -> str:
    """The news articles in 10 shards, ingested here: 73k tokens, a minute of embedding on one worker."""
    return ingest([news_path], str(tmp_path_factory.mktemp("corpus")), IngestConfig(partition_bytes=40_000))


@pytest.mark.slow
def test_npmcore_index_stopped_mid_embedding_stops_its_server_and_cluster_and_commits_nothing(tmp_path, news_corpus):
    """The issue's case: `npmcore index` sent SIGTERM while it embeds left its temporary Prefect server running."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a temporary server of its own
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    store = tmp_path / "store"
    args = [str(BIN / "npmcore"), "index", "--corpus", news_corpus, "--store", str(store), "--workers", "1"]
    command = Running(args, env)
    command.wait_for(r"embedding: [\d,]+ of [\d,]+ tokens", 300)
    code, seconds, left = command.stop(signal.SIGTERM)
    assert code == 143 and not left, (code, left, command.lines)
    assert any("Stopping temporary server" in line for line in command.lines), command.lines
    assert not list(Path(store).rglob("manifest.json"))  # no datastore, no index
