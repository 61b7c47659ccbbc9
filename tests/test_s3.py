"""The pipeline with its store on S3: a local S3 server (moto), the real CLI, a local store to compare with."""

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import NEWS_PARTITION_MB, free_port
from distributed import LocalCluster
from s3fs import S3FileSystem
from typer.testing import CliRunner

from flows.cli import app
from npmcore.snapshots import open_index
from npmcore.storage import list_snapshots

MOTO_SERVER = Path(sys.executable).with_name("moto_server")
QUERY = (
    "A new blaze near [MASK], south-west of Sydney, has forced the closure of the Hume Highway."  # article 1, masked
)
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


@pytest.fixture
def dask_address(s3_bucket, prefect_server) -> Iterator[str]:
    """One local Dask cluster for all the commands of a test (each would start its own); its
    worker, started after the AWS_* variables are set, inherits them."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
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


def test_ingest_index_and_query_on_s3_match_a_local_store(s3_bucket, dask_address, news_store, tmp_path, monkeypatch):
    """The shared news store, built again through the CLI with its store on S3."""
    local = Snapshots(news_store.corpus, news_store.datastore, news_store.index)
    store = f"s3://{s3_bucket}/store"
    corpus = cli(
        "ingest",
        news_store.raw,
        "--store",
        store,
        "--partition-mb",
        str(NEWS_PARTITION_MB),
        "--dask-address",
        dask_address,
    )
    index = cli(
        "index", "--store", store, "--factory", "Flat", "--precision", "f32", "--dask-address", dask_address
    )  # the newest corpus of the store, in the local store's precision
    remote = Snapshots(corpus, open_index(index).datastore, index)

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
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the S3 index is copied into $XDG_CACHE_HOME/npmcore
    answers = json.loads(cli("query", "--index", remote.index, "--json", QUERY))
    assert (tmp_path / "cache" / "npmcore" / "index" / remote.index.rsplit("/", 1)[1] / "manifest.json").exists()
    assert len(answers) == 5 and all(a["answer"] and a["evidence"] for a in answers)
    assert answers == local_answers


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
