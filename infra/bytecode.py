"""Bytecode of the installed modules the demo imports, compiled on every core when the environment is made.

Python compiles a module the first time it is imported and keeps its bytecode beside it. In a fresh environment
the first ``npmcore demo`` compiled about 7,000 files before its flow could start: ``import flows.pipeline`` took
42 s, 12 s once compiled (an AMD EPYC with avx512_bf16, 2 cores), one file after another on one core. Compiling
every installed file took 57 s (most are never imported); this compiles the files ``demo-imports.txt`` names
(paths under site-packages), split over the cores. A file the list names that is not installed (another version of
a package) is passed over, and one it lacks is compiled on import as before: the list only saves time.

Usage (the Makefile runs the first after installing):
  python infra/bytecode.py compile
  python infra/bytecode.py record -- COMMAND ...   # rewrite the list: COMMAND run with no bytecode installed
"""

import argparse
import compileall
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

LIST = Path(__file__).with_name("demo-imports.txt")
SITE = Path(sysconfig.get_paths()["purelib"])


def compile_files(paths: list[str]) -> int:
    """Compiles each of ``paths`` (under site-packages); returns how many failed."""
    return sum(not compileall.compile_file(SITE / p, quiet=2) for p in paths)


def compile_listed() -> None:
    started = time.perf_counter()
    listed = [p for p in LIST.read_text().split() if (SITE / p).is_file()]
    cores = len(os.sched_getaffinity(0))
    chunks = [listed[i::cores] for i in range(cores)]
    with ProcessPoolExecutor(cores) as pool:
        failed = sum(pool.map(compile_files, chunks))
    seconds = time.perf_counter() - started
    print(f"bytecode: {len(listed) - failed} of the demo's {len(listed)} installed modules compiled in {seconds:.0f} s")


def record(command: list[str]) -> None:
    for cache in SITE.rglob("__pycache__"):
        shutil.rmtree(cache)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(command, env=env, check=True)
    tag = sys.implementation.cache_tag
    compiled = sorted(
        str(pyc.parent.parent.relative_to(SITE) / f"{pyc.name.split('.')[0]}.py")
        for pyc in SITE.rglob(f"__pycache__/*.{tag}.pyc")
    )
    LIST.write_text("".join(f"{p}\n" for p in compiled if (SITE / p).is_file()))
    print(f"{LIST}: {len(compiled)} modules")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["compile", "record"])
    parser.add_argument("command", nargs="*", help="record: the command whose imports to list")
    args = parser.parse_args()
    if args.action == "compile":
        compile_listed()
    elif not args.command:
        parser.error("record needs the command to run, after --")
    else:
        record(args.command)


if __name__ == "__main__":
    main()
