"""Kill campaigns: a backfill, and an index build with vectors, SIGKILLed at seeded random moments, lose nothing.

Usage: python bench/faults.py [--articles 3000] [--vector-articles 40] [--kills 20] [--vector-kills 6] [--seed 0]
                              [--workdir DIR]

Through the users' path, on a slice of the dated dumps (``shared/data/enwiki_dated``: the first ``--articles``
articles of the May 2015 dump that the September 2020 dump holds too, matched by their WikiExtractor ids):

1. the store: the 2015 slice ingested and indexed as BM25 alone (``npmcore ingest``, ``npmcore index
   --bm25-only``), which it serves;
2. the reference: ``npmcore backfill`` of the 2020 slice over it, uninterrupted;
3. trials, each on the store as it was before the reference (a copy put back): the same command, its whole
   process tree SIGKILLed (one or two times) at a seeded moment of a seeded phase (``random``: any time of the
   reference's duration; ``ingest``: once a corpus shard is written; ``bm25``: once the index is being written;
   ``commit``: between the manifest and the rename, held there a moment for the kill to land), then run again
   until it completes.

After every kill: every snapshot the store lists opens with its checksums, nothing it does not list is accepted by
``npmcore serving set`` (its function, in process), the serving pointer names an intact index, and no process of
the killed command's session is left. A completed run must hold the reference's snapshots: the same ids and the
same file checksums (Lucene's: the same names and sizes, as its files hold a random segment id), every one,
nothing more, served as the reference serves. The same for ``npmcore index`` with
vectors over a smaller slice (phases ``random``, ``embed``: once a datastore shard is finished, ``commit``).

The last line is one JSON object: the totals and each campaign's figures::

    {"kills", "resumed", "identical", "partial_visible", "leftover_processes", "seconds",
     "campaigns": {"backfill": {…, "trials", "stale_staging"}, "index_vectors": {…}}}

``python bench/faults.py --cli ARGS`` runs ``npmcore ARGS`` whose commits pause ``FAULTS_COMMIT_PAUSE_S`` seconds
between writing the manifest and the rename, saying so on stderr (the ``commit`` phase's target).
"""

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("corpus", "datastore", "index")
DOC = re.compile(r'<doc id="(\d+)".*?</doc>\n', re.S)
DOCS_PER_FILE = 100  # WikiExtractor's files of the slices
COMMITTING = "faults: committing"
PAUSE_ENV = "FAULTS_COMMIT_PAUSE_S"
LUCENE = "bm25/"  # the Lucene index of an index snapshot


def cli() -> None:
    """``npmcore`` with a pause, when ``FAULTS_COMMIT_PAUSE_S`` is set, inside every commit of a local store."""
    from npmcore import storage

    pause = float(os.environ.get(PAUSE_ENV) or 0)
    flush = storage.fsync_tree

    def paused(folder: Path) -> None:
        print(f"{COMMITTING} {folder}", file=sys.stderr, flush=True)
        time.sleep(pause)
        flush(folder)

    if pause:
        storage.fsync_tree = paused
    from flows.cli import main

    sys.argv = ["npmcore", *sys.argv[2:]]
    main()


# --- data -------------------------------------------------------------------------------------


def write_slices(articles: int, out: Path) -> tuple[Path, Path]:
    """The first ``articles`` articles of the 2015 dump that the 2020 dump holds too, as WikiExtractor folders
    ``out/2015-05`` and ``out/2020-09`` (the same ids, each dump's text). Returns the two folders."""
    from npmcore.evaluation.dumps import dated_dump, dump_files

    old: dict[str, str] = {}
    for path in dump_files(dated_dump("2015-05")):
        old |= {m.group(1): m.group(0) for m in DOC.finditer(path.read_text(encoding="utf-8"))}
        if len(old) >= 2 * articles:  # enough that the 2020 dump holds ``articles`` of them
            break
    new: dict[str, str] = {}
    for path in dump_files(dated_dump("2020-09")):
        new |= {m.group(1): m.group(0) for m in DOC.finditer(path.read_text(encoding="utf-8")) if m.group(1) in old}
    ids = [i for i in old if i in new][:articles]
    folders = []
    for name, docs in (("2015-05", old), ("2020-09", new)):
        folder = out / name / "AA"
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(0, len(ids), DOCS_PER_FILE):
            text = "".join(docs[i] for i in ids[n : n + DOCS_PER_FILE])
            (folder / f"wiki_{n // DOCS_PER_FILE:02d}").write_text(text, encoding="utf-8")
        folders.append(folder.parent)
    return folders[0], folders[1]


# --- commands ---------------------------------------------------------------------------------


class Command:
    """``npmcore ARGS`` in a session of its own, its output collected as it comes."""

    def __init__(self, args: list[str], pause_s: float = 0.0):
        env = {**os.environ, PAUSE_ENV: str(pause_s)}
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True).start()

    def output(self) -> str:
        return "".join(self.lines)

    def kill_tree(self) -> int:
        """SIGKILL the command and every process of its session; returns how many of them are left after."""
        import psutil

        tree = [psutil.Process(self.process.pid)]
        with contextlib.suppress(psutil.Error):
            tree += tree[0].children(recursive=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        self.process.wait()
        time.sleep(0.5)  # the orphans' deaths reach init
        left = set()
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(p.pid) == self.process.pid and p.status() != psutil.STATUS_ZOMBIE:
                    left.add(p.pid)
        left |= {p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE}
        for pid in left:  # the next trial starts clean either way
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(left)


def run_ok(args: list[str]) -> str:
    """Run ``npmcore ARGS`` to its end; returns its last output line (a snapshot URL)."""
    command = Command(args)
    code = command.process.wait()
    time.sleep(0.1)
    if code != 0:
        raise RuntimeError(f"npmcore {' '.join(args)} failed ({code}):\n{command.output()[-3000:]}")
    return command.output().strip().splitlines()[-1]


# --- what a store shows -----------------------------------------------------------------------


def snapshot_state(store: Path) -> dict:
    """Every listed snapshot (kind, id) with its files' checksums and sizes, and the index served, relative to
    ``store``. Lucene's files (``bm25/``) by their sizes alone: Lucene writes a random segment id (and its
    checksum) into every one, so two uninterrupted builds differ there too."""
    from npmcore.serve.serving import read_serving
    from npmcore.storage import list_snapshots

    state: dict = {}
    for kind in KINDS:
        for _, manifest in list_snapshots(str(store), kind):
            state[f"{kind}/{manifest.id}"] = {
                k: [None if k.startswith(LUCENE) else v.sha256, v.bytes] for k, v in sorted(manifest.files.items())
            }
    pointer = read_serving(str(store))
    state["serving"] = None if pointer is None else os.path.relpath(pointer.index, store)
    return state


def visible_problems(store: Path) -> list[str]:
    """What a killed command left that looks complete: a listed snapshot failing its checksums, a folder the store
    does not list that ``serving set`` accepts, a serving pointer unreadable or naming a broken index."""
    from npmcore.serve.serving import read_serving, set_serving
    from npmcore.storage import SnapshotError, list_snapshots, open_snapshot

    problems = []
    for kind in KINDS:
        listed = set()
        for url, _ in list_snapshots(str(store), kind):
            listed.add(url)
            try:
                open_snapshot(url, kind=kind)
            except SnapshotError as e:
                problems.append(f"listed but broken: {e}")
        folder = store / kind
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if str(path) in listed or not path.is_dir():
                continue
            try:
                set_serving(str(store), str(path), "faults: must be refused")
                problems.append(f"serving set accepted the unlisted {path}")
            except (SnapshotError, ValueError):
                pass
    try:
        pointer = read_serving(str(store))
        if pointer is not None:
            open_snapshot(pointer.index, kind="index")
    except (SnapshotError, ValueError, OSError) as e:
        problems.append(f"the serving pointer: {e}")
    return problems


def differences(state: dict, expected: dict) -> str:
    """What differs between two :func:`snapshot_state`: snapshots, files, the pointer."""
    found = [f"{k} only in one" for k in sorted(set(state) ^ set(expected))]
    for key in sorted(set(state) & set(expected)):
        if key == "serving" and state[key] != expected[key]:
            found.append(f"serving {state[key]} instead of {expected[key]}")
        elif key != "serving" and state[key] != expected[key]:
            files = sorted(f for f in set(state[key]) | set(expected[key]) if state[key].get(f) != expected[key].get(f))
            found.append(f"{key}: {', '.join(files)}")
    return "; ".join(found)


def staging_left(store: Path) -> list[Path]:
    """Unfinished writers' folders (``.tmp-*``, ``.partial-*``) left in ``store``."""
    return [p for kind in KINDS for p in sorted((store / kind).glob(".*")) if p.is_dir()]


# --- campaigns --------------------------------------------------------------------------------


@dataclass
class Figures:
    kills: int = 0
    resumed: int = 0  # trials that completed after their kills
    identical: int = 0  # completed trials whose store holds the reference's snapshots, served the same
    partial_visible: int = 0
    leftover_processes: int = 0
    seconds: float = 0.0
    trials: int = 0
    stale_staging: int = 0  # staging folders left once a trial completed
    phases: dict[str, int] = field(default_factory=dict)  # kills by phase
    problems: list[str] = field(default_factory=list)


def reached(phase: str, store: Path, command: Command, rng: random.Random, duration: float) -> bool:
    """Wait until ``phase`` is reached by the running command (then a seeded moment more); False when it ended
    first."""
    patterns = {
        "ingest": "corpus/.tmp-*/*/*.parquet",
        "bm25": "index/.*/*",
        "embed": "datastore/.partial-*/shards/part-*.json",
    }
    deadline = command.started + rng.uniform(0.02, 1.0) * duration if phase == "random" else None
    while command.process.poll() is None:
        if deadline is not None:
            hit = time.monotonic() >= deadline
        elif phase == "commit":
            hit = any(COMMITTING in line for line in command.lines)
        else:
            hit = bool(list(store.glob(patterns[phase])))
        if hit:
            if deadline is None:
                time.sleep(rng.uniform(0.0, 0.4))
            return command.process.poll() is None
        time.sleep(0.02)
    return False


def fresh(store: Path, base: Path) -> None:
    """``store`` made a copy of ``base`` again (at the path it was built at: its manifests and pointer name it)."""
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(base, store)


def campaign(name: str, store: Path, args: list[str], phases: list[str], kills: int, rng: random.Random) -> Figures:
    """Reference run of ``npmcore ARGS`` over the store as it is, then trials, each over the store as it was,
    until ``kills`` kills were made."""
    started = time.monotonic()
    figures = Figures()
    base = store.with_name(f"{store.name}-base")
    shutil.copytree(store, base)
    began = time.monotonic()
    run_ok(args)
    duration = time.monotonic() - began
    expected = snapshot_state(store)
    print(f"{name}: reference run {duration:.0f} s, {len(expected) - 1} snapshots", file=sys.stderr, flush=True)
    while figures.kills < kills:
        fresh(store, base)
        figures.trials += 1
        planned = rng.choice((1, 1, 2))
        for attempt in range(20):
            phase = rng.choice(phases) if attempt < planned else None
            command = Command(args, pause_s=1.5 if phase == "commit" else 0.0)
            if phase is not None and reached(phase, store, command, rng, duration):
                figures.leftover_processes += command.kill_tree()
                figures.kills += 1
                figures.phases[phase] = figures.phases.get(phase, 0) + 1
                problems = visible_problems(store)
                figures.partial_visible += len(problems)
                figures.problems += problems
                print(f"{name}: trial {figures.trials} killed in {phase}, {len(problems)} problems", file=sys.stderr)
                continue
            if command.process.wait() != 0:
                time.sleep(0.1)
                figures.problems.append(f"trial {figures.trials} failed:\n{command.output()[-2000:]}")
                break
            figures.resumed += 1
            state = snapshot_state(store)
            figures.identical += state == expected
            if state != expected:
                figures.problems.append(f"trial {figures.trials}: {differences(state, expected)}")
            figures.partial_visible += len(problems := visible_problems(store))
            figures.problems += problems
            figures.stale_staging += len(staging_left(store))
            break
    figures.seconds = round(time.monotonic() - started, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--articles", type=int, default=3000, help="articles of the backfill's slice")
    parser.add_argument("--vector-articles", type=int, default=40, help="articles of the index build with vectors")
    parser.add_argument("--kills", type=int, default=20, help="kills of the backfill campaign")
    parser.add_argument("--vector-kills", type=int, default=6, help="kills of the index build with vectors")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="local Dask workers of each command")
    parser.add_argument("--workdir", type=Path, default=None, help="where the stores go (default: a temporary one)")
    args = parser.parse_args()
    from npmcore.runtime import configure_environment

    configure_environment()
    from flows.prefect_api import prefect_api

    started = time.monotonic()
    rng = random.Random(args.seed)
    workers = ["--workers", str(args.workers)]
    with contextlib.ExitStack() as stack, prefect_api():  # one Prefect API for every command: theirs start none
        work = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="npm-faults-")))
        work.mkdir(parents=True, exist_ok=True)
        campaigns = {}
        if args.kills:
            old, new = write_slices(args.articles, work / "dumps")
            store = work / "store"
            corpus = run_ok(["ingest", str(old), "--store", str(store), *workers])
            previous = run_ok(["index", "--store", str(store), "--corpus", corpus, "--bm25-only", *workers])
            backfill = ["backfill", str(new), "--date", "2020-09-01", "--store", str(store), "--previous", previous]
            phases = ["random", "random", "ingest", "bm25", "commit"]
            campaigns["backfill"] = campaign("backfill", store, backfill + workers, phases, args.kills, rng)
        if args.vector_kills:
            old, _ = write_slices(args.vector_articles, work / "vector-dumps")
            store = work / "vector-store"
            corpus = run_ok(["ingest", str(old), "--store", str(store), *workers])
            index = ["index", "--store", str(store), "--corpus", corpus, *workers]
            phases = ["random", "embed", "commit"]
            campaigns["index_vectors"] = campaign("index_vectors", store, index, phases, args.vector_kills, rng)
    figures = [asdict(f) for f in campaigns.values()]
    totals = {k: sum(f[k] for f in figures) for k in ("kills", "resumed", "identical", "partial_visible")}
    totals["leftover_processes"] = sum(f["leftover_processes"] for f in figures)
    for f in figures:
        for problem in f.pop("problems"):
            print(problem, file=sys.stderr)
    line = {**totals, "seconds": round(time.monotonic() - started, 1), "campaigns": dict(zip(campaigns, figures))}
    print(json.dumps(line))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cli"]:
        cli()
    else:
        main()
