"""The main job end to end: `npmcore demo` in a fresh store, then again with nothing changed.

Usage: python bench/pipeline.py [--store DIR]
The second run must find every stage's output (content-addressed snapshots, Prefect task
caching) and do no work again. Last line: {"total_s": …, "cached_rerun_s": …}.
Targets (2-core machine, nothing else running): the install (make's, about 3 minutes at most) and
total_s together <= 600, cached_rerun_s <= 60.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def run_demo(store: str) -> float:
    start = time.perf_counter()
    subprocess.run([str(BIN / "npmcore"), "demo", "--store", store], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default=None, help="a fresh store folder (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or str(Path(tmp) / "store")
        total = run_demo(store)
        cached = run_demo(store)
    print(json.dumps({"total_s": round(total, 1), "cached_rerun_s": round(cached, 1)}))


if __name__ == "__main__":
    main()
