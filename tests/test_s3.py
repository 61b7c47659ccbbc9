"""The pipeline with its store on S3: a local S3 server (moto), the real CLI, a local store to compare with; the
same store failing a seeded fraction of its requests (``flaky_s3.py``)."""

import json
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import fsspec
import pytest
from conftest import NEWS_PARTITION_MB, free_port
from flaky_s3 import FlakyProxy, ManifestWatch
from s3fs import S3FileSystem
from typer.testing import CliRunner

from flows.cli import app
from flows.cli.common import is_user_error, store_failure
from npmcore.cluster import local_cluster
from npmcore.corpus.ingest import ingest
from npmcore.corpus.partitions import IngestConfig
from npmcore.index.datastore import build_datastore
from npmcore.snapshots import open_index
from npmcore.storage import S3_CLIENT, cache_dir, list_snapshots, local_folder, open_snapshot

MOTO_SERVER = Path(sys.executable).with_name("moto_server")
QUERY = (
    "A new blaze near [MASK], south-west of Sydney, has forced the closure of the Hume Highway."  # article 1, masked
)
NEWS_CONFIG = IngestConfig(partition_bytes=int(NEWS_PARTITION_MB * (1 << 20)))  # the news store's ingest
runner = CliRunner()


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """``moto_server`` on a free loopback port for the session; yields its URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"moto_server exited with status {proc.returncode}: {log.read_text()}"
            assert time.monotonic() < deadline, f"moto_server did not answer on {url} within 60 s: {log.read_text()}"
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:  # not listening yet
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3_bucket(s3_endpoint, monkeypatch, tmp_path) -> Iterator[str]:
    """A new, empty bucket on the local S3 server, and AWS_* variables (dummy credentials)
    that point every S3 client of the test, Dask workers included, at it; yields its name."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    # nothing but these variables: no profile, no credentials file, no instance metadata service
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    S3FileSystem.clear_instance_cache()  # fsspec reuses instances, with the credentials they were made with
    bucket = f"npm-{uuid.uuid4().hex[:12]}"
    S3FileSystem().mkdir(bucket)
    yield bucket
    S3FileSystem.clear_instance_cache()


@contextmanager
def flaky_store(endpoint: str, bucket: str, monkeypatch, **faults) -> Iterator[tuple[FlakyProxy, ManifestWatch]]:
    """Every S3 client made in the block (Dask workers started in it too) goes through a :class:`FlakyProxy` of
    ``endpoint`` (``faults``: its arguments) whose changes ``bucket``'s :class:`ManifestWatch` checks."""
    watch = ManifestWatch(endpoint, bucket)
    with FlakyProxy(endpoint, watch=watch, **faults) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        S3FileSystem.clear_instance_cache()
        try:
            yield proxy, watch
        finally:
            monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
            S3FileSystem.clear_instance_cache()


@pytest.fixture
def dask_address(s3_bucket, prefect_server) -> Iterator[str]:
    """One local Dask cluster for all the commands of a test (each would start its own); its
    worker, started after the AWS_* variables are set, inherits them."""
    with local_cluster(1) as cluster:
        yield cluster.scheduler_address


def cli(*args: str) -> str:
    """Run ``npmcore ARGS``; returns the last line of its standard output (a URL, the JSON answers)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


class Snapshots(NamedTuple):
    corpus: str
    datastore: str
    index: str


def build_on_s3(raw: str, store: str, dask_address: str) -> Snapshots:
    """``npmcore ingest`` of ``raw`` and ``npmcore index`` (Flat, f32, with BM25) into ``store``, on the cluster."""
    args = ["--partition-mb", str(NEWS_PARTITION_MB), "--dask-address", dask_address]
    corpus = cli("ingest", raw, "--store", store, *args)
    index = cli(
        "index", "--store", store, "--factory", "Flat", "--precision", "f32", "--dask-address", dask_address
    )  # the newest corpus of the store, in the local store's precision
    return Snapshots(corpus, open_index(index).datastore, index)


def assert_same_as_local(remote: Snapshots, local: Snapshots, store: str, cache: Path, monkeypatch) -> None:
    """The snapshots on S3 are the local store's: the same ids, verified, listed, and the same answers (the S3
    index copied into ``cache``; the queries in the same precision: this machine's probed rates copied there too,
    as a probe taken again beside the other tests' load can choose the other one)."""
    fs = S3FileSystem()
    for url, local_url in zip(remote, local, strict=True):
        assert url.startswith(f"{store}/"), url
        assert fs.exists(f"{url}/manifest.json"), f"no manifest at {url}"
        assert cli("verify", url).startswith("ok: ")
        assert (
            url.rsplit("/", 1)[1] == local_url.rsplit("/", 1)[1]
        )  # same corpus, config and code: the same content address
    assert [u for u, _ in list_snapshots(store, "corpus")] == [remote.corpus]

    local_answers = json.loads(cli("query", "--index", local.index, "--json", QUERY))
    if (rates := cache_dir() / "precision").is_dir():
        shutil.copytree(rates, cache / "npmcore" / "precision", dirs_exist_ok=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))  # the S3 index is copied into $XDG_CACHE_HOME/npmcore
    answers = json.loads(cli("query", "--index", remote.index, "--json", QUERY))
    assert (cache / "npmcore" / "index" / remote.index.rsplit("/", 1)[1] / "manifest.json").exists()
    (found,) = answers
    assert len(found["answers"]) == 5 and all(a["text"] and a["evidence"] for a in found["answers"])
    assert answers == local_answers


@pytest.mark.slow
def test_ingest_index_and_query_on_s3_match_a_local_store(s3_bucket, dask_address, news_store, tmp_path, monkeypatch):
    """The shared news store, built again through the CLI with its store on S3. Fast tests of the same: snapshots
    written to S3 equal the local store's and a remote one is read through its verified local copy
    (test_a_flaky_store_is_retried_into_the_snapshots_of_a_sound_one), the CLI on S3
    (test_an_s3_store_without_credentials_fails_fast_and_is_left_untouched)."""
    local = Snapshots(news_store.corpus, news_store.datastore, news_store.index)
    store = f"s3://{s3_bucket}/store"
    remote = build_on_s3(news_store.raw, store, dask_address)
    assert_same_as_local(remote, local, store, tmp_path / "cache", monkeypatch)


def test_a_flaky_store_is_retried_into_the_snapshots_of_a_sound_one(
    s3_endpoint, s3_bucket, news_store, tmp_path, monkeypatch
):
    """A tenth of the store's requests fail (500, 503, resets, answers cut; before or after the store acted): each
    is retried, the snapshots written are the local store's and read back whole, no manifest is ever there
    without all its files. (The same at a fifth, through the CLI: the slow test below.)"""
    store = f"s3://{s3_bucket}/store"
    with flaky_store(s3_endpoint, s3_bucket, monkeypatch, rate=0.1, seed=0) as (proxy, watch):
        corpus = ingest([news_store.raw], store, NEWS_CONFIG)
        datastore = build_datastore(corpus, store, precision="f32")
        for url, local in ((corpus, news_store.corpus), (datastore, news_store.datastore)):
            assert url.rsplit("/", 1)[1] == local.rsplit("/", 1)[1]
            assert open_snapshot(url).files == open_snapshot(local).files  # every file read back and checked
        copy = local_folder(datastore, tmp_path / "cache")  # copied, and the copy checked
        assert open_snapshot(str(copy)).files == open_snapshot(news_store.datastore).files
        assert [u for u, _ in list_snapshots(store, "corpus")] == [corpus]
    assert {method for method, _ in proxy.faults} >= {"PUT", "GET", "HEAD"}, proxy.faults  # writes and reads failed
    assert any(m == "PUT" and k.endswith(" after") for m, k in proxy.faults), proxy.faults  # done, its answer lost
    assert watch.checks >= len(open_snapshot(datastore).files) and not watch.violations, watch.violations


def test_a_commit_the_store_does_not_acknowledge_publishes_nothing_and_the_rerun_completes(
    s3_endpoint, s3_bucket, news_store, monkeypatch
):
    """The store writes the manifest but answers 500, each try: the ingest fails, what it wrote is removed, the
    manifest first, and the same ingest completes once the store answers."""
    retries = {**S3_CLIENT, "retries": {"mode": "standard", "total_max_attempts": 2}}  # 2 tries, not 11: its time
    monkeypatch.setitem(fsspec.config.conf["s3"], "config_kwargs", retries)
    store = f"s3://{s3_bucket}/store"
    faults = {"rate": 1, "seed": 0, "only": r"^PUT .*/manifest\.json$", "kinds": ("500 after",)}
    with flaky_store(s3_endpoint, s3_bucket, monkeypatch, **faults) as (proxy, watch):
        with pytest.raises(OSError) as failed:
            ingest([news_store.raw], store, NEWS_CONFIG)
        assert is_user_error(failed.value), failed.value  # `npmcore ingest` says so in one line, exit status 2:
        assert store_failure(failed.value) == (
            "the S3 store failed, retries included: An error occurred (InternalError) when calling the PutObject "
            "operation (reached max retries: 1): injected"
        )
        assert proxy.faults == {("PUT", "500 after"): 2}
        assert list_snapshots(store, "corpus") == []
    assert not S3FileSystem().find(f"{s3_bucket}/store")  # nothing left, not even the shards
    assert watch.checks and not watch.violations, watch.violations
    corpus = ingest([news_store.raw], store, NEWS_CONFIG)
    assert open_snapshot(corpus).files == open_snapshot(news_store.corpus).files
    assert corpus.rsplit("/", 1)[1] == news_store.corpus.rsplit("/", 1)[1]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pipeline_on_a_flaky_store_matches_a_local_store(
    seed, s3_endpoint, s3_bucket, news_store, prefect_server, tmp_path, monkeypatch
):
    """The CLI's ingest, index (on two Dask workers) and query with a fifth of the store's requests failed."""
    local = Snapshots(news_store.corpus, news_store.datastore, news_store.index)
    store = f"s3://{s3_bucket}/store"
    start_s = time.perf_counter()
    with (
        flaky_store(s3_endpoint, s3_bucket, monkeypatch, rate=0.2, seed=seed) as (proxy, watch),
        local_cluster(2) as cluster,
    ):
        remote = build_on_s3(news_store.raw, store, cluster.scheduler_address)
        assert_same_as_local(remote, local, store, tmp_path / "cache", monkeypatch)
    changes = ("PUT", "POST", "DELETE")
    lost = sum(n for (method, kind), n in proxy.faults.items() if method in changes and kind.endswith(" after"))
    figures = {"seed": seed, "requests": sum(proxy.requests.values()), "faults": sum(proxy.faults.values())}
    figures |= {"changes_done_answer_lost": lost, "checks": watch.checks, "violations": len(watch.violations)}
    figures["seconds"] = round(time.perf_counter() - start_s, 1)
    print(json.dumps(figures))
    assert figures["faults"] and not watch.violations, watch.violations


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "{news}", "--store", "{store}"],
        ["index", "--store", "{store}"],
        ["query", "--index", "{store}/index/0123456789abcdef", QUERY],
        ["verify", "{store}/corpus/0123456789abcdef"],
    ],
    ids=lambda args: args[0],
)
def test_an_s3_store_without_credentials_fails_fast_and_is_left_untouched(args, s3_bucket, news_store, monkeypatch):
    store = f"s3://{s3_bucket}/store"
    with monkeypatch.context() as no_credentials:
        no_credentials.delenv("AWS_ACCESS_KEY_ID")
        no_credentials.delenv("AWS_SECRET_ACCESS_KEY")
        S3FileSystem.clear_instance_cache()
        start_s = time.perf_counter()
        result = runner.invoke(app, [a.format(store=store, news=news_store.raw) for a in args])
        elapsed = time.perf_counter() - start_s
    S3FileSystem.clear_instance_cache()
    message = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"cannot access the store at {store}" in message and "Unable to locate credentials" in message, message
    assert elapsed < 10, f"{args[0]} took {elapsed:.1f} s to fail"
    assert not S3FileSystem().find(s3_bucket)  # nothing written, not even a partial shard
