"""Prefect flows and the CLI, against a real temporary Prefect server."""

import pytest
from prefect.testing.utilities import prefect_test_harness
from typer.testing import CliRunner

from flows.cli import app
from flows.ingest import ingest_corpus
from flows.params import ClusterParams, IngestParams
from npmcore.ingest import read_blocks
from npmcore.storage import open_snapshot

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def prefect_server():
    with prefect_test_harness(server_startup_timeout=90):
        yield


def test_ingest_flow_on_a_local_dask_cluster(tmp_path, news_path):
    params = IngestParams(inputs=[news_path], store=str(tmp_path), cluster=ClusterParams(n_workers=2))
    url = ingest_corpus(params)
    assert open_snapshot(url).counts["docs"] == 300
    assert sum(t.num_rows for t in read_blocks(url)) == open_snapshot(url).counts["blocks"]


def test_cli_ingest_prints_the_snapshot(tmp_path, enwiki_shard):
    result = runner.invoke(app, ["ingest", enwiki_shard, "--store", str(tmp_path), "--workers", "1"])
    assert result.exit_code == 0, result.output
    url = result.output.strip().splitlines()[-1]
    manifest = open_snapshot(url)
    assert manifest.inputs[0]["format"] == "wikiextractor" and manifest.counts["empty_docs"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "/nonexistent/dump.xml.bz2"], "/nonexistent/dump.xml.bz2: no such file"),
        (["ingest", "--format", "parquet", "x"], "unknown format 'parquet'"),
        (["ingest", "--max-tokens", "8", "x"], "max_tokens"),
        (["verify", "/nonexistent/snapshot"], "manifest.json is missing"),
    ],
)
def test_cli_bad_input_exits_non_zero_with_a_clear_message(tmp_path, args, message):
    result = runner.invoke(app, [*args, "--store", str(tmp_path)] if args[0] == "ingest" else args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not list(tmp_path.glob("corpus/*/manifest.json"))
