"""A newcomer's two commands, timed from a fresh clone of this checkout: ``make demo`` (the install and the
pipeline), ``make demo`` again with nothing changed, and ``make test`` (the lint and the suite).

Usage: python bench/newcomer.py [--log FILE]

The clone sits in a new folder under /tmp with the shared data beside it, as ``.ci/run`` places its own. It
starts with no ``.venv``, no ``npm-store``, an empty npmcore cache (converted encoders) and an empty Prefect
home; uv's package cache is the machine's (a first install on a new machine also downloads the packages). The
commands' output goes to ``--log``. Run it alone on the machine: its last line is one JSON object,
``{"demo_s", "demo_rerun_s", "test_s", "tests", "cpu"}`` (``tests``: the suite's count of passed tests;
``cpu``: the model name and the lscpu flags that set the speed of these machines).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEED_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")  # what makes one machine of this kind faster


def timed(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, str]:
    """``command``'s seconds on the wall clock and its output (appended to ``log``); fails on a non-zero exit."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    with log.open("a") as f:
        f.write(f"$ {' '.join(command)}  ({seconds:.1f} s, exit {done.returncode})\n{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}): see {log}")
    return seconds, done.stdout + done.stderr


def cpu() -> str:
    """The CPU's model name and which of :data:`SPEED_FLAGS` it has."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
    flags = set(fields.get("Flags", "").split())
    model = fields.get("Model name", "unknown").strip()
    return f"{model}; {' '.join(f for f in SPEED_FLAGS if f in flags) or 'none of ' + ', '.join(SPEED_FLAGS)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, default=Path("newcomer.log"), help="the commands' output")
    log = parser.parse_args().log.resolve()
    log.write_text("")
    folder = Path(tempfile.mkdtemp(prefix="npm-newcomer."))
    try:
        clone = folder / "npm"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        (folder / "shared").symlink_to(ROOT.parent / "shared")  # the shared data beside the clone
        env = {**os.environ, "XDG_CACHE_HOME": str(folder / "cache"), "PREFECT_HOME": str(folder / "prefect")}
        env["UV_CACHE_DIR"] = os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv")
        env.pop("VIRTUAL_ENV", None)
        demo_s, _ = timed(["make", "demo"], clone, env, log)
        rerun_s, _ = timed(["make", "demo"], clone, env, log)
        test_s, output = timed(["make", "test"], clone, env, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    passed = re.findall(r"(\d+) passed", output)
    print(
        json.dumps(
            {
                "demo_s": round(demo_s, 1),
                "demo_rerun_s": round(rerun_s, 1),
                "test_s": round(test_s, 1),
                "tests": int(passed[0]) if passed else 0,  # the suite's (then the CPU-reading tests again)
                "cpu": cpu(),
            }
        )
    )


if __name__ == "__main__":
    main()
