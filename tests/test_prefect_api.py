"""A command's Prefect API: a temporary server of its own when none is configured, as a user's shell runs it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = """
import os, urllib.request
import psutil
from npmcore.runtime import configure_environment
configure_environment()
from flows.prefect_api import prefect_api

seen = []
with prefect_api(meanwhile=lambda: seen.append(os.environ.get("PREFECT_API_URL"))) as url:
    print("meanwhile saw", seen[0] == url)
    print("health", urllib.request.urlopen(url + "/health").read().decode())
print("after", os.environ.get("PREFECT_API_URL"), len(psutil.Process().children()))
try:
    urllib.request.urlopen(url + "/health", timeout=5)
except OSError:
    print("stopped")
"""


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """COMMAND in a shell's environment with no Prefect API configured, a Prefect home of its own."""
    clean = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", COMMAND], env=clean | env, capture_output=True, text=True, cwd=ROOT)


def test_without_a_prefect_api_a_command_gets_a_temporary_server_whose_url_it_knows_at_once(tmp_path):
    """The URL is exported before the server answers (Dask workers started meanwhile inherit it), the server
    answers inside the block and is gone after it, with no process left."""
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["meanwhile saw True", "health true", "after None 0", "stopped"]


def test_a_temporary_server_that_cannot_start_fails_the_command_naming_why(tmp_path):
    done = run(tmp_path, PREFECT_SERVER_DATABASE_CONNECTION_URL="postgresql+asyncpg://npm@127.0.0.1:9/prefect")
    assert done.returncode == 1
    assert "RuntimeError: the temporary Prefect server exited with status" in done.stderr, done.stderr[-3000:]
