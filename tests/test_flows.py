"""Prefect flows and the CLI, against a real temporary Prefect server."""

import os

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


def test_train_flow_logs_metrics_and_registers_the_encoder(tmp_path, news_path):
    import mlflow
    from mlflow import MlflowClient

    from flows.train import TrainParams, train
    from npmcore.tracking import tracking
    from npmcore.ingest import IngestConfig, ingest

    ingest([news_path], str(tmp_path), IngestConfig(max_tokens=64))
    params = TrainParams(store=str(tmp_path), steps=3, batch_size=4, warmup_steps=1, alias="champion", experiment="test-train")
    uri = train(params)
    assert uri == "models:/npm-encoder/1"
    uri_of_store = f"sqlite:///{tmp_path}/mlflow.db"
    assert not {"MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"} & os.environ.keys()  # not left to the next run
    client = MlflowClient(tracking_uri=uri_of_store, registry_uri=uri_of_store)
    version = client.get_model_version_by_alias("npm-encoder", "champion")
    run = client.get_run(version.run_id)
    assert run.data.params["steps"] == "3" and run.data.params["masking.ratio"] == "0.15"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == [1, 2, 3]
    assert {"start_acc", "end_acc", "tokens_per_s", "lr", "spans_per_seq", "masked_fraction"} <= run.data.metrics.keys()
    with tracking(uri_of_store, "test-train"):
        encoder = mlflow.transformers.load_model("models:/npm-encoder@champion", return_type="components")
    assert encoder["tokenizer"].mask_token == "[MASK]"
    assert train(params) == uri  # unchanged inputs: the cached result, no second run
    assert len(client.search_runs([run.info.experiment_id])) == 1
    again = train(params.model_copy(update={"seed": 1}))  # a changed config trains again
    assert again == "models:/npm-encoder/2"


def test_train_params_keep_the_presets_masking_unless_overridden():
    from flows.train import TrainParams
    from npmcore.masking import MaskingConfig
    from npmcore.train import PRESETS

    quality = TrainParams(store="/tmp/unused", preset="cpu-quality").config("corpus")
    assert quality.masking == PRESETS["cpu-quality"]["masking"] and quality.masking.content_words
    assert quality.steps == PRESETS["cpu-quality"]["steps"]
    ratio = TrainParams(store="/tmp/unused", preset="cpu-quality", mask_ratio=0.3).config("corpus")
    assert ratio.masking == MaskingConfig(ratio=0.3, content_words=True)
    assert TrainParams(store="/tmp/unused").config("corpus").masking == MaskingConfig()


def test_eval_data_is_the_cloze_file_and_other_tasks_load_their_own(tmp_path):
    import json

    from flows.evaluate import EvalParams, load_task_task
    from npmcore.evaluation.tasks import load_task

    path = tmp_path / "cloze.jsonl"
    path.write_text(json.dumps({"query": "Paris is the capital of [MASK].", "answers": ["France"]}) + "\n")
    params = EvalParams(tasks=["mr", "cloze"], store=str(tmp_path), data=str(path), limit=5)
    assert load_task_task.fn("mr", params) == load_task("mr", limit=5, seed=params.seed)
    assert load_task_task.fn("cloze", params) == load_task("cloze", limit=5, seed=params.seed, path=str(path))
