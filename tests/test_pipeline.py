"""The main job as a flow: stages under one MLflow parent run with lineage; a re-run does no work again."""

import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient
from test_output import assert_legible, cells, rendered
from typer.testing import CliRunner

from flows.cli import app, demo
from flows.evaluate import EvalParams, evaluate
from flows.index import IndexParams
from flows.output import demo_story, rows_table
from flows.params import IngestParams
from flows.pipeline import PipelineParams, pipeline
from flows.prefect_api import prefect_api
from flows.results import EvalRow, PipelineResult
from npmcore.serve.serving import read_serving, serving_index
from npmcore.snapshots import INDEX
from npmcore.storage import list_snapshots, open_snapshot


@dataclass(frozen=True)
class Piped:
    store: str
    cloze: Path
    first: PipelineResult
    second: PipelineResult  # the same parameters again
    evaluated: list[EvalRow]  # an evaluation in the same store


@pytest.fixture(scope="module")
def piped(tmp_path_factory, news_lines) -> Piped:
    """The pipeline twice on 30 news articles, then an evaluation in its store."""
    tmp_path = tmp_path_factory.mktemp("pipeline")
    raw = tmp_path / "news.txt"
    raw.write_text("\n".join(news_lines[:30]) + "\n")
    cloze = tmp_path / "cloze.jsonl"
    cloze.write_text(
        json.dumps(
            {"query": "The Prime Minister, John [MASK], has revealed he will go to Indonesia.", "answers": ["Howard"]}
        )
        + "\n"
    )
    store = str(tmp_path / "store")
    params = PipelineParams(
        ingest=IngestParams(inputs=[str(raw)], store=store),
        index=IndexParams(factory="Flat"),
        evaluate=EvalParams(tasks=["cloze"], data=str(cloze)),
        queries=["The Prime Minister, John [MASK], has revealed he will go to Indonesia."],
    )
    with prefect_api():
        first = pipeline(params)
        second = pipeline(params)
        # an evaluation in the same store builds its reference index there (BM25 alone) and never serves it
        evaluated = evaluate(EvalParams(tasks=["cloze"], data=str(cloze), store=store, corpus=first.corpus))
    return Piped(store, cloze, first, second, evaluated)


def test_pipeline_stages_are_nested_runs_with_lineage_and_a_rerun_is_cached(piped):
    store, cloze, first, second, evaluated = piped.store, piped.cloze, piped.first, piped.second, piped.evaluated
    assert (second.corpus, second.index, second.rows) == (first.corpus, first.index, first.rows)
    assert first.serving == first.index and read_serving(store).reason.startswith("pipeline passed its gate")
    indexes = {url: manifest.config["factory"] for url, manifest in list_snapshots(store, INDEX)}
    assert evaluated[0].factory == "BM25" and sorted(indexes.values()) == ["BM25", "Flat"]  # the newest: BM25
    assert serving_index(store) == first.index

    client = MlflowClient(tracking_uri=uri(store))
    parent = client.get_run(first.run_id)
    assert parent.data.params["index"] == first.index and parent.data.params["corpus"] == first.corpus
    assert parent.data.metrics["cloze.npm.exact_match"] == first.rows[0].score
    children = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.mlflow.parentRunId = '{first.run_id}'",
    )
    by_name = {c.info.run_name: c for c in children}
    assert set(by_name) == {"ingest", "index", "cloze/npm/tau=1"}
    index = open_snapshot(first.index)
    assert by_name["ingest"].data.params["corpus_id"] == open_snapshot(first.corpus).id
    assert by_name["index"].data.params["index_id"] == index.id
    stages = by_name["index"].data.metrics  # each stage's seconds beside the plan's estimate
    assert {
        f"{kind}.{stage}" for kind in ("seconds", "plan_seconds") for stage in ("embedding", "faiss", "bm25")
    } <= set(stages)
    assert all(stages[f"plan_seconds.{stage}"] > 0 for stage in ("embedding", "faiss", "bm25"))
    evaluation = by_name["cloze/npm/tau=1"].data.params  # the metric traces back to corpus, encoder and index
    assert (evaluation["index_id"], evaluation["corpus_id"], evaluation["encoder_fingerprint"]) == (
        index.id,
        open_snapshot(first.corpus).id,
        index.config["encoder_fingerprint"],
    )
    # the precision the corpus was embedded in (auto resolved), and the queries' own
    assert index.config["precision"] in ("f32", "bf16")
    assert parent.data.params["precision"] == by_name["index"].data.params["precision"] == index.config["precision"]
    assert evaluation["index_precision"] == index.config["precision"] and evaluation["precision"] in ("f32", "bf16")
    # what the demo prints of it, at 80 columns: the answer within its evidence sentence, the table uncut
    (answered,) = first.answered
    best = answered.answers[0]
    assert best.passage[best.start : best.end] == best.answer
    story = rendered(demo_story(first, open_snapshot(first.corpus), "the shipped encoder", str(cloze), uri(store)))
    assert f"«{best.answer}»" in " ".join(story.split())
    assert f"    npmcore query --index {first.index} " in story  # a whole line, however long the path
    table = story[story.index("zero-shot evaluation") : story.index("MLflow: parent run")]
    assert_legible(table, cells(rows_table(first.rows)))
    # the cached re-run embedded nothing and evaluated nothing: no evaluation run under the second parent
    assert not client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.mlflow.parentRunId = '{second.run_id}' and attributes.run_name LIKE 'cloze%'",
    )


def test_a_demo_with_nothing_to_do_prints_its_stored_result_once_its_snapshots_check(piped, monkeypatch):
    """`npmcore demo` run again: the stored result, printed without running the flow, while its key, snapshots,
    serving pointer and MLflow database are as they were; each change sends it back to the pipeline."""
    store, first = piped.store, piped.first
    ran: list[str] = []

    def run_demo(*args):
        ran.append(store)
        return first, uri(store)

    monkeypatch.setattr(demo, "run_demo", run_demo)

    def rerun() -> str:
        result = CliRunner().invoke(app, ["demo", "--store", store], env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        return result.output

    key = demo.demo_key(store, 0, "auto")
    assert "What was built" in rerun() and ran == [store]  # no record yet: the pipeline ran, and was recorded
    record = json.loads((Path(store) / demo.RECORD).read_text())
    assert record["key"] == key and PipelineResult.model_validate(record["result"]) == first
    output = rerun()
    assert ran == [store] and output.startswith("Up to date (nothing rerun): the demo of ")
    assert f"MLflow: parent run {first.run_id}" in output and f"npmcore query --index {first.index} " in output
    assert demo.demo_key(store, 1, "auto") != key != demo.demo_key(store, 0, "bf16")

    def changed(undo) -> None:  # the change sends the demo to the pipeline; undone, it is up to date again
        assert demo.unchanged_result(store, key) is None
        undo()
        assert demo.unchanged_result(store, key) is not None

    pointer = Path(store) / "serving.json"
    served = pointer.read_text()
    pointer.unlink()
    changed(lambda: pointer.write_text(served))
    files = sorted(p for p in Path(first.index).rglob("*") if p.is_file() and p.name != "manifest.json")
    index_file = files[0]
    data = index_file.read_bytes()
    index_file.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    changed(lambda: index_file.write_bytes(data))
    database = Path(store) / "mlflow.db"
    database.rename(database.with_suffix(".moved"))
    changed(lambda: database.with_suffix(".moved").rename(database))
    recorded = (Path(store) / demo.RECORD).read_text()
    (Path(store) / demo.RECORD).write_text(recorded[: len(recorded) // 2])  # cut short: not a record
    changed(lambda: (Path(store) / demo.RECORD).write_text(recorded))
    (Path(store) / demo.RECORD).write_text(recorded.replace(key, "0" * 64))
    changed(lambda: (Path(store) / demo.RECORD).write_text(recorded))


@pytest.mark.parametrize("command", [["demo"], ["eval", "--task", "mr", "--limit", "5"]])
def test_an_unreachable_mlflow_server_fails_fast_and_leaves_no_snapshot(tmp_path, monkeypatch, command):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    start_s = time.perf_counter()
    result = CliRunner().invoke(app, [*command, "--store", str(tmp_path / "store")])
    elapsed = time.perf_counter() - start_s
    assert result.exit_code == 2
    assert f"cannot reach the MLflow server at {uri} within 10 s" in " ".join(result.output.split())
    assert elapsed < 30  # MLflow's own client would retry for minutes; this includes starting Prefect's local server
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("manifest.json"))


def uri(store: str) -> str:
    return f"sqlite:///{store}/mlflow.db"
