"""Faults: a write SIGKILLed at any moment (its commit included) publishes nothing and is redone whole; a store that
fills up (its snapshots or its MLflow database) stops the command with one line naming it; the kill campaign of
``bench/faults.py`` (slow)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import BIN, ROOT, kill_once

from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.serve.serving import set_serving
from npmcore.storage import (
    SnapshotError,
    SnapshotWriter,
    StoreFullError,
    list_snapshots,
    open_snapshot,
    remove_stale_staging,
)

CONFIG = IngestConfig(pages_per_partition=200)


@pytest.fixture(scope="module")
def wiki_slice(enwiki_shard) -> str:
    """A file of the shared WikiExtractor sample: 1,530 articles, 1 MB (an 800 kB corpus snapshot)."""
    return enwiki_shard


@pytest.fixture(scope="module")
def reference(tmp_path_factory, wiki_slice) -> str:
    """The slice ingested without a fault."""
    return ingest([wiki_slice], str(tmp_path_factory.mktemp("reference")), CONFIG)


def test_a_write_killed_in_its_commit_publishes_nothing_and_the_rerun_is_identical(tmp_path, wiki_slice, reference):
    store = tmp_path / "store"
    # the commit held between its manifest and its rename, where the kill lands
    script = (
        "import time\nfrom npmcore import storage\nflush = storage.fsync_tree\n"
        "storage.fsync_tree = lambda folder: (time.sleep(60), flush(folder))\n"
        "from npmcore.corpus.ingest import ingest\nfrom npmcore.corpus.partitions import IngestConfig\n"
        f"ingest([{wiki_slice!r}], {str(store)!r}, {CONFIG!r})\n"
    )
    kill_once(script, store, "corpus/.tmp-*/manifest.json", timeout_s=120)
    staging = next(store.glob("corpus/.tmp-*"))
    assert list_snapshots(str(store), "corpus") == []  # its manifest is there, yet it is no snapshot
    with pytest.raises(SnapshotError, match="staging folder of an unfinished write"):
        open_snapshot(str(staging))
    with pytest.raises(SnapshotError, match="staging folder"):
        set_serving(str(store), str(staging))
    url = ingest([wiki_slice], str(store), CONFIG)
    assert open_snapshot(url).files == open_snapshot(reference).files
    assert url.rsplit("/", 1)[-1] == reference.rsplit("/", 1)[-1]  # the same id
    assert not staging.exists() and not list(store.glob("corpus/.*"))  # the killed writer's folder is gone


def test_only_the_staging_folders_of_writers_gone_are_removed(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = os.uname().nodename
    dead = tmp_path / f".tmp-abc-12345678-{gone.stdout.strip()}@{host}"
    alive = tmp_path / f".tmp-abc-12345678-{os.getpid()}@{host}"
    elsewhere = tmp_path / f".tmp-abc-12345678-{gone.stdout.strip()}@another-host"
    old = tmp_path / ".tmp-abc-12345678"  # an older version's: no owner
    for folder in (dead, alive, elsewhere, old):
        folder.mkdir()
    assert remove_stale_staging(tmp_path) == [dead]
    assert alive.exists() and elsewhere.exists() and old.exists()


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 256 kB tmpfs (unmounted at the end); skips where mounting is not permitted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_store_raises_naming_it_and_removes_the_unfinished_snapshot(small_disk):
    store = str(small_disk / "store")
    with pytest.raises(StoreFullError, match=rf"store {store} is full: writing corpus/abc needed more than") as e:
        with SnapshotWriter(store, "corpus", "abc") as writer:
            writer.write_bytes("blob", os.urandom(1 << 20))
    assert "bytes free" in str(e.value) and "make room" in str(e.value)
    assert not list((small_disk / "store" / "corpus").iterdir())


@pytest.mark.slow
def test_npmcore_ingest_into_a_full_store_says_so_in_one_line_then_completes_once_there_is_room(
    small_disk, wiki_slice, reference, prefect_server
):
    """Fast tests of the same: the full store's error naming it, nothing left behind
    (test_a_full_store_raises_naming_it_and_removes_the_unfinished_snapshot), and a command's one line for it
    (test_npmcore_register_into_a_full_store_names_its_mlflow_database_in_one_line_then_registers_once_there_is_room)."""
    store = small_disk / "store"
    args = [str(BIN / "npmcore"), "ingest", wiki_slice, "--store", str(store), "--workers", "1"]
    args += ["--pages-per-partition", str(CONFIG.pages_per_partition)]
    failed = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=prefect_server, timeout=300)
    assert failed.returncode == 2, failed.stdout + failed.stderr
    error = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"store {store} is full: writing corpus/" in error[0], failed.stderr
    assert list_snapshots(str(store), "corpus") == [] and not list(store.glob("corpus/*"))
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # room is made
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=prefect_server, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    url = done.stdout.strip().splitlines()[-1]
    assert open_snapshot(url).files == open_snapshot(reference).files


def test_npmcore_register_into_a_full_store_names_its_mlflow_database_in_one_line_then_registers_once_there_is_room(
    small_disk,
):
    from typer.testing import CliRunner

    from flows.cli import app

    store = small_disk / "store"
    store.mkdir()
    with (small_disk / "filler").open("wb") as filler:  # the disk fills before MLflow's database is written
        with pytest.raises(OSError):
            while True:
                filler.write(os.urandom(1 << 16))
                filler.flush()
    args = ["register", str(ROOT / "npmcore" / "checkpoints" / "npm-minilm-l6"), "--store", str(store)]
    failed = CliRunner().invoke(app, args)
    assert failed.exit_code == 2, failed.output
    error = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"store {store} is full: its MLflow database mlflow.db could not grow" in error[0]
    assert "Traceback" not in failed.stderr
    (small_disk / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], check=True)  # room is made
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert done.stdout.strip().splitlines()[-1].startswith("models:/npm-encoder/1")


@pytest.mark.slow
def test_the_kill_campaign_loses_nothing(tmp_path):
    """``bench/faults.py`` at a small size: every kill resumed to the reference's snapshots, nothing partial seen."""
    work = tmp_path / f"faults-{uuid.uuid4().hex[:6]}"
    args = [sys.executable, "bench/faults.py", "--articles", "200", "--kills", "6", "--vector-articles", "10"]
    args += ["--vector-kills", "2", "--workers", "1", "--workdir", str(work)]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    result = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["kills"] >= 8 and figures["resumed"] == figures["identical"] > 0, (figures, result.stderr[-3000:])
    assert figures["partial_visible"] == 0 and figures["leftover_processes"] == 0, figures
