"""The ``npmcore`` command line, as a user runs it: output, exit status, messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from reference import QUERIES
from typer.testing import CliRunner

from flows.cli import app
from flows.cli.common import is_user_error
from npmcore.snapshots import open_index
from npmcore.storage import SnapshotError, open_snapshot

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_loads_no_framework_before_a_command_needs_it():
    """`npmcore --help` answers in about a second: torch, transformers, MLflow, Dask and Prefect load in commands."""
    heavy = ["torch", "transformers", "mlflow", "distributed", "prefect", "faiss"]
    code = f"import sys, flows.cli; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"


def test_the_query_prints_json_alone_in_a_process_that_imported_transformers_first(news_store):
    """A process that imported transformers before the project (a notebook; a test process whose earlier fixture
    did): the project's quiet, offline environment holds all the same, so ``npmcore query --json`` run in it prints
    its JSON alone, no "Loading weights" bar before it."""
    from npmcore.runtime import DEFAULTS

    script = (
        "import transformers\n"  # before npmcore: the environment below is not set yet
        "import huggingface_hub.constants, sys\n"
        "from typer.testing import CliRunner\n"
        "from flows.cli import app\n"
        f"result = CliRunner().invoke(app, ['query', '--index', {news_store.index!r}, '--json', {QUERIES[0]!r}])\n"
        "print(result.output, end='')\n"
        "print(huggingface_hub.constants.HF_HUB_OFFLINE, file=sys.stderr)\n"
    )
    env = {key: value for key, value in os.environ.items() if key not in DEFAULTS}  # a user's plain shell
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    (found,) = json.loads(done.stdout)  # nothing else in the output
    assert found["answers"] and all(set(a) >= {"text", "confidence", "evidence"} for a in found["answers"])
    assert done.stderr.strip().splitlines()[-1] == "True"  # offline, as the project promises


def test_a_service_error_is_a_user_error_once_its_module_is_loaded():
    from npmcore.cluster import ClusterError
    from npmcore.tracking_store import TrackingError

    assert all(is_user_error(e) for e in (ClusterError("x"), TrackingError("x"), ValueError("x"), SnapshotError("x")))
    assert not is_user_error(RuntimeError("a bug"))
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError  # an S3 store gone, retries spent

    url = "http://s3:9000/npm/store/corpus/0123456789abcdef/manifest.json"
    assert is_user_error(ConnectTimeoutError(endpoint_url=url)) and is_user_error(ReadTimeoutError(endpoint_url=url))


def test_an_error_is_one_physical_line_at_any_width(tmp_path):
    """A path longer than the console is wide (80 columns when not a terminal) is never folded in an error."""
    missing = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6, "dump.xml.bz2")
    result = runner.invoke(app, ["ingest", str(missing), "--store", str(tmp_path / "store")])
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("error: ") and str(missing) in line and len(line) > 80


def test_cli_ingest_prints_the_snapshot(tmp_path, enwiki_shard, prefect_server):
    result = runner.invoke(app, ["ingest", enwiki_shard, "--store", str(tmp_path), "--workers", "1"])
    assert result.exit_code == 0, result.output
    url = result.output.strip().splitlines()[-1]
    manifest = open_snapshot(url)
    assert manifest.inputs[0]["format"] == "wikiextractor" and manifest.counts["empty_docs"] > 0


def test_cli_index_reuses_the_datastore_and_query_prints_answers_with_evidence(news_store, prefect_server):
    args = [
        "index",
        "--store",
        news_store.store,
        "--corpus",
        news_store.corpus,
        "--factory",
        "IVF16,Flat",
        "--precision",
        "f32",  # the shared datastore's: reused, not embedded again
        "--workers",
        "2",
    ]
    built = runner.invoke(app, args)
    assert built.exit_code == 0, built.output
    url = built.output.strip().splitlines()[-1]
    assert (
        open_index(url).datastore == news_store.datastore and url != news_store.index
    )  # a new index, no new embedding
    result = runner.invoke(app, ["query", "--index", url, "--json", QUERIES[0]])
    assert result.exit_code == 0, result.output
    (found,) = json.loads(result.output.strip().splitlines()[-1])  # one result a query, as the API gives it
    assert set(found) == {"query", "asked", "found", "abstained", "min_confidence", "answers", "yes_no", "note"}
    answers = found["answers"]
    assert len(answers) == 5 and set(answers[0]) == {"text", "forms", "score", "confidence", "evidence"}
    assert all(0 <= a["confidence"] <= 1 for a in answers)  # each answer's own probability, not a ranking
    assert found["asked"] == {"how": "mask", "queries": [QUERIES[0]], "answered": QUERIES[0]}
    assert found["query"] == QUERIES[0] and found["found"] and found["note"] is None
    evidence = answers[0]["evidence"][0]
    assert set(evidence) == {"block_id", "title", "text", "start", "end", "score", "source"}
    assert evidence["source"] == {  # the news file's own article: no wiki, no address
        "source": "news",
        "wiki": None,
        "dump_date": None,
        "title": evidence["title"],
        "url": None,
    }
    assert evidence["text"][evidence["start"] : evidence["end"]] == answers[0]["text"]
    shown = runner.invoke(app, ["query", "--index", url, QUERIES[0]])
    assert shown.exit_code == 0 and answers[0]["text"] in shown.output
    withheld = runner.invoke(app, ["query", "--index", url, "--min-confidence", "1", QUERIES[0]])
    assert withheld.exit_code == 0 and "unsure (the best answer's confidence" in withheld.output
    assert answers[0]["text"] in withheld.output and "not in this corpus" not in withheld.output  # found, unsure
    out_of_range = runner.invoke(app, ["query", "--index", url, "--min-confidence", "2", QUERIES[0]])
    assert out_of_range.exit_code == 2 and "--min-confidence" in out_of_range.output
    bad = runner.invoke(app, ["query", "--index", url, "Firefighters battled bushfires."])
    assert bad.exit_code == 2 and "a sentence needs one [MASK] where its answer goes" in " ".join(bad.output.split())
    keywords = runner.invoke(app, ["query", "--index", url, "australia bushfires"])
    assert keywords.exit_code == 0 and "asked as: The australia bushfires is [MASK]." in " ".join(
        keywords.output.split()
    )
    yes_no = runner.invoke(app, ["query", "--index", url, "--json", "Did firefighters battle bushfires in Australia?"])
    verdict = json.loads(yes_no.output.strip().splitlines()[-1])[0]["yes_no"]
    assert verdict["asserted"] in ("Australia", "firefighters") and verdict["verdict"] in ("yes", "no", "unknown")
    said = " ".join(
        runner.invoke(app, ["query", "--index", url, "Did firefighters battle bushfires in Australia?"]).output.split()
    )
    if verdict["verdict"] == "unknown":  # as the page says it
        assert f"The corpus does not say: its best guess is {verdict['corpus_says']}" in said
    else:
        assert f": the corpus says {verdict['corpus_says']} (confidence" in said
    why = runner.invoke(app, ["query", "--index", url, "Why did the bushfires start?"])
    assert why.exit_code == 0 and "cannot explain" in " ".join(why.output.split())
    (why,) = json.loads(runner.invoke(app, ["query", "--index", url, "--json", "Why did the bushfires start?"]).output)
    assert why["answers"] == [] and not why["found"] and "cannot explain" in why["note"]
    question = runner.invoke(app, ["query", "--index", url, "Where did firefighters battle bushfires?"])
    assert question.exit_code == 0, question.output
    shown = " ".join(question.output.split())
    assert "asked as: Firefighters battled bushfires in [MASK]." in shown
    assert "asked as: Where did firefighters battle bushfires? The answer is [MASK]." in shown
    paper = runner.invoke(app, ["query", "--index", url, "--ask", "paper", "Where did firefighters battle bushfires?"])
    assert paper.exit_code == 0 and "battled bushfires in" not in paper.output
    bad_form = runner.invoke(app, ["query", "--index", url, "--ask", "nq", "Where did firefighters battle bushfires?"])
    assert bad_form.exit_code == 2 and "--ask must be one of statements, paper, got 'nq'" in bad_form.output


def test_cli_index_refuses_a_memory_budget_too_small_before_embedding(news_store, prefect_server, tmp_path):
    args = ["index", "--store", str(tmp_path / "store"), "--corpus", news_store.corpus, "--max-memory", "0.00001"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2
    (line,) = [line for line in refused.output.splitlines() if line.startswith("error: ")]
    assert "max_memory 0.00 GiB is too little for 13," in line and "with memory-mapped lists holds" in line
    assert not (tmp_path / "store" / "datastore").exists()  # refused before anything was embedded


def test_cli_snapshots_lists_each_kind_legibly_at_80_columns(news_store, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # CliRunner's output is not a terminal: a CI log
    for kind, url in (("corpus", news_store.corpus), ("datastore", news_store.datastore), ("index", news_store.index)):
        result = runner.invoke(app, ["snapshots", "--store", news_store.store, "--kind", kind])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert max(len(line.rstrip()) for line in lines) <= 80, result.output
        manifest = open_snapshot(url, verify=False)
        row = next(line.split() for line in lines if line.startswith(manifest.id))
        assert row[:3] == [manifest.id, *manifest.created.replace("T", " ")[:16].split()]
        assert row[3:] == [f"{v:,}" for v in manifest.counts.values()]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ingest", "/nonexistent/dump.xml.bz2"], "/nonexistent/dump.xml.bz2: no such file"),
        (["ingest", "--format", "parquet", "x"], "unknown format 'parquet'"),
        (["ingest", "--max-tokens", "8", "x"], "max_tokens"),
        (["verify", "/nonexistent/snapshot"], "manifest.json is missing"),
        (
            ["train", "--preset", "cpu-quality", "--steps", "50", "--warmup-steps", "50"],
            "learning rate would never reach its peak",
        ),
        (["compare", "a"], "two or more"),
    ],
)
def test_cli_bad_input_exits_non_zero_with_a_clear_message(tmp_path, prefect_server, args, message):
    result = runner.invoke(
        app, [*args, "--store", str(tmp_path)] if args[0] in ("ingest", "train", "compare") else args
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not list(tmp_path.glob("corpus/*/manifest.json"))
