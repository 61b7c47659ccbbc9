"""Real Dask clusters: the CLI on a scheduler and two worker processes, one of them killed mid-embedding; a
LocalCluster's worker SIGKILLed halfway through writing a corpus shard, and a datastore shard; what a worker imports."""

import contextlib
import functools
import importlib
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import cloudpickle
import pytest
from conftest import NEWS_PARTITION_MB, free_port
from distributed import Client
from typer.testing import CliRunner

from flows.cli import app
from npmcore.cluster import check_readable, dask_client
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.encoder import fast_forward, load_encoder
from npmcore.index.bm25 import BM25Searcher
from npmcore.index.datastore import build_datastore
from npmcore.index.indexer import IndexConfig, build_index
from npmcore.snapshots import open_index
from npmcore.storage import open_snapshot

DASK = Path(sys.executable).with_name("dask")
FILES, ARTICLES_PER_FILE = 5, 6  # one corpus shard per input file: the CLI has no partition-size option
MARKERS = "datastore/.partial-*/shards/part-*.json"  # a finished datastore shard (see npmcore.index.datastore)
NEWS_CONFIG = IngestConfig(partition_bytes=int(NEWS_PARTITION_MB * (1 << 20)))  # the news store's ingest
runner = CliRunner()
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # client.run functions: workers cannot import this module


@dataclass(frozen=True)
class DaskCluster:
    address: str
    workers: list[subprocess.Popen]  # one `dask worker` process group each


def start(args: list[str], log: Path) -> subprocess.Popen:
    """``dask ARGS`` in a process group of its own (the nanny and its worker die together)."""
    with log.open("wb") as out:
        return subprocess.Popen([str(DASK), *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (a nanny's worker process included)."""
    with contextlib.suppress(ProcessLookupError):  # a group that is already gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def dask_cluster(tmp_path_factory) -> Iterator[DaskCluster]:
    """``dask scheduler`` on 127.0.0.1 and two single-threaded ``dask worker`` processes."""
    folder = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{free_port()}"
    procs = [
        start(
            ["scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
            folder / "scheduler.log",
        )
    ]
    try:
        for i in range(2):
            args = ["worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard", "--host", "127.0.0.1"]
            procs.append(start([*args, "--local-directory", str(folder / f"worker-{i}")], folder / f"worker-{i}.log"))
        with Client(address, timeout="60s", set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
        yield DaskCluster(address, procs[1:])
    finally:
        for proc in reversed(procs):
            stop(proc)


@dataclass(frozen=True)
class Kill:
    worker: str  # address of the killed worker
    task: str  # the Dask key of the embed-shard task it was running
    shards_done: int  # finished datastore shards when it died
    lost: int  # embed-shard tasks the scheduler saw die with it


def embedding_task(dask_worker) -> str | None:
    """The embed-shard task a worker is running (client.run)."""
    return next((str(ts.key) for ts in dask_worker.state.executing if str(ts.key).startswith("embed_shard")), None)


def lost_tasks(name: str, dask_scheduler=None) -> int:
    """Tasks of the function ``name`` that a worker held when it died: Dask marks them suspicious
    (client.run_on_scheduler)."""
    prefix = dask_scheduler.task_prefixes.get(name)
    return 0 if prefix is None else prefix.suspicious


def kill_a_worker_mid_embedding(
    cluster: DaskCluster, store: Path, shards: int, finished: threading.Event, timeout_s: float = 300
) -> Kill:
    """Once the first datastore shard is finished, SIGKILL a worker that is embedding another one."""
    deadline = time.monotonic() + timeout_s
    with Client(cluster.address, set_as_default=False) as client:
        while True:
            assert not finished.is_set() and time.monotonic() < deadline, (
                "the index command ended before a worker was killed"
            )
            done = len(list(store.glob(MARKERS)))
            assert done < shards, "every datastore shard was finished before a worker could be killed"
            if done and (running := {w: key for w, key in client.run(embedding_task).items() if key}):
                break
            time.sleep(0.05)
        victim, task = next(iter(running.items()))
        group = os.getpgid(client.run(os.getpid, workers=[victim])[victim])
        assert group in [p.pid for p in cluster.workers], f"worker {victim} is not one of the fixture's processes"
        os.killpg(group, signal.SIGKILL)
        shards_done = len(list(store.glob(MARKERS)))
        while victim in client.scheduler_info(n_workers=-1)["workers"]:
            assert time.monotonic() < deadline, f"the scheduler never noticed that {victim} died"
            time.sleep(0.1)
        return Kill(victim, task, shards_done, client.run_on_scheduler(lost_tasks, "embed_shard"))


@pytest.mark.slow
def test_index_survives_a_worker_killed_mid_embedding(tmp_path, news_lines, dask_cluster, prefect_server):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(FILES):
        (raw / f"news-{i}.txt").write_text(
            "\n".join(news_lines[i * ARTICLES_PER_FILE : (i + 1) * ARTICLES_PER_FILE]) + "\n"
        )
    store = tmp_path / "store"
    ingested = runner.invoke(app, ["ingest", str(raw), "--store", str(store), "--dask-address", dask_cluster.address])
    assert ingested.exit_code == 0, ingested.output
    corpus = ingested.stdout.strip().splitlines()[-1]
    assert open_snapshot(corpus).counts["shards"] == FILES

    finished = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        killer = pool.submit(kill_a_worker_mid_embedding, dask_cluster, store, FILES, finished)
        indexed = runner.invoke(
            app,
            [
                "index",
                "--corpus",
                corpus,
                "--store",
                str(store),
                "--dask-address",
                dask_cluster.address,
                "--factory",
                "Flat",
            ],
        )
        finished.set()
        assert indexed.exit_code == 0, indexed.output
        kill = killer.result()
    assert kill.shards_done < FILES and kill.lost >= 1, kill  # killed while embedding, with a shard in hand
    assert sum(p.poll() is None for p in dask_cluster.workers) == 1
    assert not list(store.glob("datastore/.partial-*")), "the datastore's staging folder was left behind"

    index_url = indexed.stdout.strip().splitlines()[-1]
    index = open_snapshot(index_url)
    datastore = open_snapshot(open_index(index_url).datastore)
    clean = open_snapshot(clean_datastore := build_datastore(corpus, str(tmp_path / "clean")))
    clean_index = open_snapshot(clean_index_url := build_index(clean_datastore, IndexConfig(factory="Flat")))
    assert (datastore.id, index.id) == (clean.id, clean_index.id)
    assert datastore.files == clean.files
    # Lucene writes a random segment id into every file: the BM25 part is compared by its sizes and answers.
    assert {k: v.bytes for k, v in index.files.items()} == {k: v.bytes for k, v in clean_index.files.items()}
    assert {k: v for k, v in index.files.items() if not k.startswith("bm25/")} == {
        k: v for k, v in clean_index.files.items() if not k.startswith("bm25/")
    }
    searchers = [BM25Searcher(f"{url}/bm25") for url in (index_url, clean_index_url)]
    for query in ("Australian bushfires", "Palestinian security forces", "cricket Test match"):
        hits = [searcher.search(query, 5) for searcher in searchers]
        assert hits[0] and hits[0] == hits[1], query
    for searcher in searchers:
        searcher.close()


def test_cli_fails_fast_on_an_unreachable_scheduler(tmp_path, monkeypatch):
    monkeypatch.setattr("npmcore.cluster.CONNECT_TIMEOUT_S", 1.0)  # 10 s for a user: shortened, not bypassed
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    start_s = time.perf_counter()
    result = runner.invoke(app, ["index", "--store", str(tmp_path), "--dask-address", address])
    elapsed = time.perf_counter() - start_s
    assert result.exit_code == 2
    assert f"cannot reach the Dask scheduler at {address} within 1 s" in " ".join(result.output.split())
    assert elapsed < 5  # the 1 s connection timeout and the command's start, then out at once
    assert not list(tmp_path.iterdir())


def test_inputs_the_workers_cannot_see_are_refused_naming_them(tmp_path):
    """The fast sibling of test_hosts.py's refusal of a file on the driver's disk only."""
    seen = tmp_path / "seen.txt"
    seen.write_text("every worker of a local cluster sees this machine's files\n")
    with dask_client(n_workers=1) as client:
        check_readable([str(seen), f"file://{seen}", "s3://bucket/inputs.txt"], client)  # S3: not a path to check
        with pytest.raises(
            ValueError, match=f"{tmp_path}/unseen.txt is not on the machines of the Dask workers tcp://"
        ):
            check_readable([str(seen), str(tmp_path / "unseen.txt")], client)


@pytest.fixture(scope="module")
def two_workers() -> Iterator[Client]:
    """The commands' LocalCluster (:func:`npmcore.cluster.dask_client`) with two worker processes, each under a
    nanny that starts a new one when it dies."""
    with dask_client(n_workers=2) as client:
        yield client


def die_writing(module: str, name: str, marker: str) -> None:
    """On a worker (client.run): ``module.name``, a function that writes a file to its argument ``url`` and returns
    its FileEntry, SIGKILLs the worker's process once it has written one, the file cut to half its bytes (as
    killed halfway through the write). Once in the cluster: on the first worker to create ``marker`` (its pid)."""
    where = importlib.import_module(module)
    write = getattr(where, name)

    @functools.wraps(write)
    def dying(*args, **kwargs):
        entry = write(*args, **kwargs)
        with contextlib.suppress(FileExistsError):
            with open(marker, "x") as f:
                f.write(str(os.getpid()))
            os.truncate(inspect.signature(write).bind(*args, **kwargs).arguments["url"], entry.bytes // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        return entry

    setattr(where, name, dying)


def undo_dying(module: str, name: str) -> None:
    """On a worker: ``module.name`` as it was before :func:`die_writing`."""
    where = importlib.import_module(module)
    setattr(where, name, getattr(getattr(where, name), "__wrapped__", getattr(where, name)))


@contextlib.contextmanager
def a_worker_killed_in(client: Client, module: str, name: str, marker: Path) -> Iterator[None]:
    """A worker of ``client`` SIGKILLed in ``module.name`` (:func:`die_writing`) during the block; then the check
    that it was, and that its process is gone."""
    client.run(die_writing, module, name, str(marker))
    try:
        yield
    finally:
        client.run(undo_dying, module, name)
    assert marker.exists(), f"no worker was killed in {module}.{name}"
    assert int(marker.read_text()) not in client.run(os.getpid).values(), "the killed worker still runs"


def test_ingest_survives_a_worker_killed_halfway_through_a_shard(two_workers, news_store, tmp_path):
    """The scheduler gives the killed worker's tasks to the others (the nanny's new one included), the half-written
    shard is written again whole, and the snapshot is the news store's, ingested without a kill."""
    store = tmp_path / "store"
    lost = two_workers.run_on_scheduler(lost_tasks, "write_shard")
    with a_worker_killed_in(two_workers, "npmcore.corpus.ingest", "write_table", tmp_path / "killed"):
        corpus = ingest([news_store.raw], str(store), NEWS_CONFIG, two_workers)
    assert two_workers.run_on_scheduler(lost_tasks, "write_shard") > lost
    assert corpus.rsplit("/", 1)[1] == news_store.corpus.rsplit("/", 1)[1]
    assert open_snapshot(corpus).files == open_snapshot(news_store.corpus).files
    assert not list(store.glob("corpus/.*")), "a staging folder was left behind"


@pytest.mark.slow
def test_embedding_survives_a_worker_killed_halfway_through_a_shard(two_workers, news_store, tmp_path):
    """As the ingest: the shard the killed worker was writing (no marker yet) is embedded again by another.
    Fast tests of the same: a worker killed halfway through a shard
    (test_ingest_survives_a_worker_killed_halfway_through_a_shard), a datastore build resumed after a killed
    shard (tests/test_datastore.py test_resume_after_a_killed_shard_equals_a_clean_build)."""
    store = tmp_path / "store"
    lost = two_workers.run_on_scheduler(lost_tasks, "embed_shard")
    with a_worker_killed_in(two_workers, "npmcore.index.datastore", "save_array", tmp_path / "killed"):
        datastore = build_datastore(news_store.corpus, str(store), client=two_workers, precision="f32")
    assert two_workers.run_on_scheduler(lost_tasks, "embed_shard") > lost
    assert datastore.rsplit("/", 1)[1] == news_store.datastore.rsplit("/", 1)[1]
    assert open_snapshot(datastore).files == open_snapshot(news_store.datastore).files
    assert not list(store.glob("datastore/.*")), "the datastore's staging folder was left behind"


def heavy_modules() -> list[str]:
    """On a worker (client.run): which of torch and transformers' model classes it has imported."""
    return [m for m in ("torch", "transformers.modeling_utils") if m in sys.modules]


def test_workers_ingest_and_embed_without_torch(news_store, tmp_path):
    """A worker tokenizes with the tokenizer the ingest loaded (sent to it once) and embeds with the encoder this
    machine converted before: it imports neither torch nor transformers' models (seconds of its start, 400 MB), and
    the corpus and the datastore are the news store's."""
    fast_forward(load_encoder()[1], "f32")  # converted here: as the planner's precision probe converts it
    with dask_client(n_workers=2) as client:  # new workers: the module's have run other tests' code
        assert client.run(heavy_modules) == {w: [] for w in client.scheduler_info()["workers"]}
        corpus = ingest([news_store.raw], str(tmp_path), NEWS_CONFIG, client)
        datastore = build_datastore(corpus, str(tmp_path), client=client, precision="f32")
        assert client.run(heavy_modules) == {w: [] for w in client.scheduler_info()["workers"]}
    assert open_snapshot(corpus).files == open_snapshot(news_store.corpus).files
    assert open_snapshot(datastore).files == open_snapshot(news_store.datastore).files
