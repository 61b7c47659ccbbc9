"""Evaluation runs on the shared news index: metrics, calibration, the evaluate flow's systems
and sweeps, MLflow runs, compare and the learning curve."""

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from reference import QUERIES
from typer.testing import CliRunner

from flows.cli import app
from npmcore.answer.answering import sure_from
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.tokens import classify, label_token_ids
from npmcore.evaluation.metrics import repeats_query
from npmcore.evaluation.run import run_task
from npmcore.evaluation.selective import calibration_report
from npmcore.evaluation.tasks import Example, Task, load_task
from npmcore.storage import open_snapshot

runner = CliRunner()


@pytest.fixture(scope="module")
def flat(news_store) -> NPM:
    return NPM(news_store.index)


def test_a_cloze_files_questions_are_asked_as_the_query_service_asks_them(flat, tmp_path, prefect_server):
    """A line without [MASK] is evaluated as the service answers it (a question as its statements and the paper's
    question, keywords as theirs: npmcore.answer.answering.replies), or in the paper's form with --ask paper; a
    sentence without a mask, or a why (the service answers it with a note), is skipped, and the JSON says so; a file
    mostly skipped is an error, not a score."""
    from npmcore.answer.answering import replies
    from npmcore.ask.asking import ask, question_query

    question = "Where did Australian firefighters battle bushfires?"
    (reply,) = replies(flat, [ask(question)], InferenceConfig())
    path = tmp_path / "typed.jsonl"
    lines = [{"query": question, "answers": [reply.answers[0].text]}, {"query": QUERIES[0], "answers": ["x"]}]
    lines.append({"query": "australia bushfires firefighters", "answers": ["x"]})  # keywords: asked
    lines.append({"query": "Why did the bushfires start?", "answers": ["x"]})  # a why: skipped as the service does
    lines.append({"query": "Firefighters battled bushfires.", "answers": ["x"]})  # a sentence: skipped
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = tmp_path / "store"
    for form, asked in (("statements", ask(question).queries[0]), ("paper", question_query(question))):
        args = ["eval", "--task", "cloze", "--data", str(path), "--index", flat.url, "--store", str(store)]
        out = runner.invoke(app, [*args, "--ask", form, "--json"])
        assert out.exit_code == 0, out.output
        line = json.loads(out.stdout.strip().splitlines()[-1])
        skipped = {"mask_count": 1, "explanation": 1} if form == "statements" else {"mask_count": 1}
        assert (line["n"], line["skipped"]) == (5 - sum(skipped.values()), skipped)
        client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
        run = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])[0]
        assert run.data.params["ask"] == form and run.data.metrics["skipped_mask_count"] == 1
        records = [
            json.loads(line)
            for line in Path(client.download_artifacts(run.info.run_id, "predictions.jsonl", str(tmp_path))).open()
        ]
        assert records[0]["query"] == asked
        if form == "statements":
            assert records[0]["correct"] and records[0]["prediction"] == reply.answers[0].text  # the service's answer
            assert records[2]["query"] == ask(lines[2]["query"]).queries[0]  # keywords as their first statement
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[2:]))  # two of three lines skipped
    out = runner.invoke(
        app, ["eval", "--task", "cloze", "--data", str(path), "--index", flat.url, "--store", str(store)]
    )
    assert out.exit_code == 2 and "2 of 3 lines cannot be asked" in " ".join(out.output.split())


def test_evaluation_of_a_cloze_task_end_to_end(flat, tmp_path, prefect_server):
    config = InferenceConfig(restrict=True)
    predicted = [a[0].text for a in flat.predict(QUERIES, config)]
    path = tmp_path / "cloze.jsonl"
    # gold = the model's own answer for the first two queries, an absent phrase for the others
    golds = [[predicted[0]], [predicted[1].upper() + "!"], ["no such answer"], ["nothing like it"]]
    path.write_text("".join(json.dumps({"query": q, "answers": g}) + "\n" for q, g in zip(QUERIES, golds, strict=True)))
    result = run_task(load_task("cloze", path=str(path)), flat, "npm", config)
    assert (result.n, result.metric) == (4, "exact_match")
    assert [r.correct for r in result.records] == [True, True, False, False] and result.score == 0.5
    assert [r.prediction for r in result.records] == predicted
    store = tmp_path / "store"
    out = runner.invoke(
        app, ["eval", "--task", "cloze", "--data", str(path), "--index", flat.url, "--store", str(store), "--json"]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "task": "cloze",
        "system": "npm",
        "tau": 1.0,
        "factory": "Flat",
        "n": 4,
        "metric": "exact_match",
        "score": 0.5,
        "query_copy_rate": result.query_copy_rate,
        "skipped": {},  # every line asked
        "breakdown": {"ceiling": result.breakdown["ceiling"]},  # the gold written in the passages searched
        "calibration": result.calibration,  # how well each prediction's confidence says when it is right
        "shown": result.shown,  # what a person sees: the share shown as sure, right when sure, right but greyed
    }
    confidences = [r.confidence for r in result.records]
    assert all(0 <= c <= 1 for c in confidences)
    assert result.calibration == calibration_report(confidences, [r.correct for r in result.records])
    threshold = sure_from(flat)
    sure = [c >= threshold for c in confidences]
    right = [r.correct for r in result.records]
    assert result.shown == {
        "min_confidence": round(threshold, 4),
        "sure": round(sum(sure) / 4, 4),
        "precision": round(sum(r and s for r, s in zip(right, sure, strict=True)) / sum(sure), 4)
        if any(sure)
        else None,
        "right_greyed": round(sum(r and not s for r, s in zip(right, sure, strict=True)) / max(sum(right), 1), 4),
    }
    assert result.query_copy_rate == sum(repeats_query(p, q) for p, q in zip(predicted, QUERIES)) / 4
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    assert run.data.metrics["exact_match"] == 0.5 and run.data.params["index"] == flat.url
    assert run.data.metrics["query_copy_rate"] == result.query_copy_rate
    assert run.data.params["encoder_fingerprint"] == flat.manifest.config["encoder_fingerprint"]
    logged = [a.path for a in client.list_artifacts(run.info.run_id)]
    assert logged == ["predictions.jsonl", "ranker.json", "reliability.png", "risk_coverage.png"]
    assert run.data.metrics["calibration.ece"] == result.calibration["ece"]
    assert run.data.metrics["shown.sure"] == result.shown["sure"]
    assert run.data.params["scoring"] == "evidence"  # and the weights it ranked with, as params and a file
    assert float(run.data.params["ranker.left_share"]) == flat.ranker.position[0]
    single = runner.invoke(
        app,
        [
            "eval",
            "--task",
            "cloze",
            "--data",
            str(path),
            "--index",
            flat.url,
            "--store",
            str(store),
            "--system",
            "npm-single",
            "--precision",
            "f32",
        ],
    )
    assert single.exit_code == 0, single.output
    runs = client.search_runs([run.info.experiment_id], order_by=["attributes.start_time ASC"])
    assert run.data.params["precision"] == flat.precision  # auto: this machine's
    assert runs[1].data.params["precision"] == "f32"  # the queries encoded in the precision asked
    table = runner.invoke(app, ["compare", *(r.info.run_id for r in runs), "--store", str(store)])
    assert table.exit_code == 0, table.output
    # the metric's row, or its block when the table is printed vertically (one line per run)
    row = table.output.split("cloze/npm exact_match")[1].split("cloze/npm-single exact_match")[0]
    assert "0.5000" in row and "–" in row  # the NPM run has it, the NPM single run does not
    bad = runner.invoke(app, ["compare", "models:/npm-encoder/9", "default", "--store", str(store)])
    assert bad.exit_code == 2 and "no evaluation run" in bad.output


def test_closed_set_evaluation_counts_correct_labels(flat):
    examples = tuple(
        Example(q, (), label, f"q{i}", q) for i, (q, label) in enumerate(zip(QUERIES, [0, 1, 0, 1], strict=True))
    )
    task = Task(
        "toy",
        "closed",
        examples,
        ("australia", "police"),
        (("australia", "australian"), ("police", "unputdownable")),
        {},
        None,
    )
    config = InferenceConfig(k=300, tau=5.0)
    result = run_task(task, flat, "npm", config)
    scores = classify(
        flat, list(QUERIES), [label_token_ids(flat.tokenizer, list(w))[0] for w in task.label_words], config=config
    )
    # no label word retrieved (every score -inf): an abstention, counted as wrong
    expected = [
        bool(np.isfinite(row).any()) and int(np.argmax(row)) == ex.label
        for row, ex in zip(scores, examples, strict=True)
    ]
    assert [r.correct for r in result.records] == expected and result.score == np.mean(expected)
    assert result.notes["label_words_dropped"] == 1


def test_closed_set_calibration_subtracts_the_domain_premise_scores(flat):
    words = (("government", "minister"), ("police", "officers"))
    examples = tuple(Example(q, (), i % 2, f"q{i}", q) for i, q in enumerate(QUERIES))
    domain = "The news was about [MASK]."
    task = Task("toy", "closed", examples, ("politics", "crime"), words, {}, None, domain=domain)
    config = InferenceConfig(k=flat.retrieval.index.ntotal, tau=5.0)  # every token: each label word is retrieved
    ids = [label_token_ids(flat.tokenizer, list(w))[0] for w in words]
    prior = classify(flat, [domain], ids, config=config)[0]
    assert np.isfinite(prior).all()  # the premise retrieves a word of each label
    raw = classify(flat, list(QUERIES), ids, config=config)
    calibrated = run_task(task, flat, "npm", config)
    uncalibrated = run_task(task, flat, "npm", config, calibrate=False)
    for scores, result in ((raw - prior, calibrated), (raw, uncalibrated)):
        assert [r.prediction for r in result.records] == [task.labels[int(np.argmax(row))] for row in scores]
        assert [r.score for r in result.records] == pytest.approx([float(row.max()) for row in scores])


def test_evaluate_flow_runs_systems_temperatures_and_exact_search(flat, tmp_path, prefect_server):
    store = tmp_path / "store"
    args = [
        "eval",
        "--task",
        "trex",
        "--limit",
        "6",
        "--index",
        flat.url,
        "--store",
        str(store),
        "--exact",
        "--system",
        "npm",
        "--system",
        "npm-no-bm25",
        "--tau",
        "1",
        "--tau",
        "2",
    ]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    seen = sorted((r.data.params["system"], r.data.params["tau"], r.data.params["factory"]) for r in runs)
    assert seen == [
        ("npm", "1.0", "Flat"),
        ("npm", "2.0", "Flat"),
        ("npm-no-bm25", "1.0", "Flat"),
        ("npm-no-bm25", "1.0", "Flat"),
        ("npm-no-bm25", "2.0", "Flat"),
        ("npm-no-bm25", "2.0", "Flat"),
    ]
    assert (
        len({r.data.params["index"] for r in runs}) == 2
    )  # the given index and the exact one built from its datastore
    for run in runs:
        assert "macro_exact_match" in run.data.metrics and any(
            m.startswith("exact_match_len_") for m in run.data.metrics
        )
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
            "predictions.jsonl",
            "accuracy_by_answer_length.png",
            "ranker.json",
            "reliability.png",
            "risk_coverage.png",
        }
    bad = runner.invoke(app, ["eval", "--suite", "slow", "--index", flat.url])
    assert bad.exit_code == 2 and "unknown suite 'slow'" in bad.output


def test_eval_data_is_the_cloze_file_and_other_tasks_load_their_own(tmp_path):
    from tasks.evaluate import load_task_examples

    path = tmp_path / "cloze.jsonl"
    path.write_text(json.dumps({"query": "Paris is the capital of [MASK].", "answers": ["France"]}) + "\n")
    assert load_task_examples.fn("mr", 5, 0, str(path), "test") == load_task("mr", limit=5, seed=0)
    assert load_task_examples.fn("cloze", 5, 0, str(path), "test") == load_task(
        "cloze", limit=5, seed=0, path=str(path)
    )


def test_cloze_without_a_file_reads_the_default_corpus_facts_of_its_split(tmp_path):
    """`npmcore eval --task cloze --split dev` and `npmcore learning-curve` (mr and cloze by default) given no
    --data: the cloze facts of the embedded default corpus in that split, bench/data/cloze-{split}.jsonl."""
    from flows.evaluate import EvalParams
    from tasks.evaluate import load_task_examples

    facts = Path(__file__).resolve().parents[1] / "bench" / "data"
    loaded = {}
    for split in ("dev", "test"):
        params = EvalParams(tasks=["mr", "cloze"], split=split, store=str(tmp_path))
        loaded[split] = load_task_examples.fn("cloze", None, 0, params.data, split)
        assert loaded[split] == load_task("cloze", path=str(facts / f"cloze-{split}.jsonl"), split=split)
    assert loaded["dev"].examples and loaded["dev"] != loaded["test"]
    assert EvalParams(tasks=["mr"], store=str(tmp_path)).data is None  # other tasks load their own


@pytest.mark.slow
def test_learning_curve_logs_checkpoint_scores_into_the_training_run(news_store, tmp_path, prefect_server):
    from flows.train import TrainParams, train_encoder
    from npmcore.tracking import logged_curve

    store = tmp_path / "store"
    train_encoder(TrainParams(store=str(store), corpus=news_store.corpus, steps=2, batch_size=4, checkpoint_every=1))
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("npm-train").experiment_id])
    path = tmp_path / "cloze.jsonl"
    path.write_text("".join(json.dumps({"query": q, "answers": ["Howard"]}) + "\n" for q in QUERIES))
    args = [
        "learning-curve",
        run.info.run_id,
        "--store",
        str(store),
        "--task",
        "cloze",
        "--data",
        str(path),
        "--corpus",
        news_store.corpus,
    ]
    out = runner.invoke(app, [*args, "--step", "0", "--step", "2"])
    assert out.exit_code == 0, out.output
    history = client.get_metric_history(run.info.run_id, "eval.cloze")
    assert sorted(m.step for m in history) == [0, 2]
    evals = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    assert sorted(r.data.params["model"].rsplit("/", 1)[-1] for r in evals) == ["step-0000000", "step-0000002"]
    by_step = {r.data.params["model"].rsplit("-", 1)[-1]: r.data.metrics["exact_match"] for r in evals}
    assert {m.step: m.value for m in history} == {int(s): v for s, v in by_step.items()}
    assert all(r.data.params["corpus_id"] == open_snapshot(news_store.corpus).id for r in evals)
    assert "learning_curve.png" in {a.path for a in client.list_artifacts(run.info.run_id)}
    out = runner.invoke(app, [*args, "--step", "1"])
    assert out.exit_code == 0, out.output
    assert sorted(logged_curve(client, run.info.run_id)) == [0, 1, 2]  # the plot shows both invocations' steps


@pytest.mark.slow
def test_corpus_size_sweep_logs_the_score_against_reference_corpus_tokens(tmp_path, prefect_server):
    store = tmp_path / "store"
    out = runner.invoke(
        app,
        [
            "eval",
            "--task",
            "trex",
            "--limit",
            "10",
            "--wiki-files",
            "0",
            "--wiki-files",
            "1",
            "--store",
            str(store),
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    by_name = {r.info.run_name: r for r in runs}
    tasks = [r for r in runs if r.info.run_name == "trex/npm/tau=1"]
    sizes = sorted(int(r.data.params["corpus_tokens"]) for r in tasks)
    assert len(sizes) == 2 and sizes[0] < sizes[1]  # evidence only, then evidence + one enwiki file
    curve = client.get_metric_history(by_name["trex/corpus-size"].info.run_id, "macro_exact_match.npm.tau1")
    expected = sorted((int(r.data.params["corpus_tokens"]), r.data.metrics["macro_exact_match"]) for r in tasks)
    assert sorted((m.step, m.value) for m in curve) == expected
    assert "score_by_corpus_size.png" in {
        a.path for a in client.list_artifacts(by_name["trex/corpus-size"].info.run_id)
    }


def test_groups_stale_answers_and_the_ceiling_of_the_passages_searched(flat, news_store):
    """Exact match per group, stale predictions and the gold-in-passages ceiling, against the records and
    the passages read from the corpus snapshot here (a plain substring walk over the normalised texts)."""
    from npmcore.corpus.blocks import encoder_input
    from npmcore.evaluation.metrics import normalize_answer
    from npmcore.snapshots import read_blocks

    config = InferenceConfig(restrict=True)
    predicted = [a[0].text for a in flat.predict(QUERIES, config)]
    examples = (
        Example(QUERIES[0], (predicted[0],), None, "a0", "x", group="new"),
        Example(QUERIES[1], ("no such answer",), None, "a1", "x", group="new", stale=(predicted[1],)),
        Example(QUERIES[2], ("nothing like it",), None, "b0", "x", group="old", stale=("not this either",)),
        Example(QUERIES[3], (predicted[3],), None, "b1", "x", group="old"),
    )
    task = Task("cloze", "open", examples, (), (), {}, None)
    result = run_task(task, flat, "npm", config)
    assert [r.stale for r in result.records] == [None, True, False, None]
    texts = [
        encoder_input(title, text)
        for table in read_blocks(news_store.corpus, ["title", "text"])
        for title, text in zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True)
    ]
    held = [
        any(
            f" {normalize_answer(a)} " in f" {normalize_answer(texts[b])} "
            for a in ex.answers
            for b in flat.retrieval.bm25_blocks(ex.query, config.passages)
        )
        for ex in examples
    ]
    assert [r.in_passages for r in result.records] == held and held[0] and held[3]
    assert result.breakdown == {
        "exact_match.new": 0.5,
        "count.new": 2.0,
        "exact_match.old": 0.5,
        "count.old": 2.0,
        "stale_rate": 0.5,
        "stale_rate.new": 1.0,
        "stale_rate.old": 0.0,
        "ceiling": float(np.mean(held)),
        "ceiling.new": float(np.mean(held[:2])),
        "ceiling.old": float(np.mean(held[2:])),
    }
    assert run_task(task, flat, "npm-no-bm25", config).breakdown.keys() == {
        "exact_match.new", "count.new", "exact_match.old", "count.old", "stale_rate", "stale_rate.new",
        "stale_rate.old",
    }  # fmt: skip  # kNN search reads no passages: no ceiling


def test_masked_lm_baselines_fill_the_mask_with_the_heads_best_whole_content_word(flat):
    """mlm-head and mlm-read against the torch masked LM run here on the same token ids: the best token
    that starts a word and is no function word, punctuation or special token."""
    import torch

    from npmcore.encoder import load_masked_lm
    from npmcore.evaluation.baselines import MaskFiller

    tokenizer, model = load_masked_lm(flat.encoder_source, require_head=True)
    filler = MaskFiller(flat)
    tables = flat.corpus.tables
    allowed = tables.word_start & ~tables.stop & ~tables.special
    for read in (False, True):
        sequences = filler.sequences(QUERIES, read)
        for query, ids in zip(QUERIES, sequences, strict=True):
            assert ids.count(tokenizer.mask_token_id) == 1 and len(ids) <= tokenizer.model_max_length
            if read:  # the top BM25 passage stands before the query, whole or cut from its end
                passage = tokenizer(flat.retrieval.passages(query, 1)[0], add_special_tokens=False)["input_ids"]
                assert (
                    ids[1:9] == passage[:8]
                    and ids[-len(flat.query_ids(query, 1)) + 1 :] == flat.query_ids(query, 1)[1:]
                )
        with torch.inference_mode():
            expected = []
            for ids in sequences:
                logits = model(torch.tensor([ids])).logits[0, ids.index(tokenizer.mask_token_id)].numpy()
                logits[~allowed[: len(logits)]] = -np.inf
                expected.append(tokenizer.decode([int(logits.argmax())]).strip())
        assert filler.fill(QUERIES, read) == expected
    task = Task(
        "cloze", "open", tuple(Example(q, ("x",), None, str(i), "x") for i, q in enumerate(QUERIES)), (), (), {}, None
    )
    for system in ("mlm-head", "mlm-read"):
        result = run_task(task, flat, system, InferenceConfig())
        assert [r.prediction for r in result.records] == filler.fill(QUERIES, system == "mlm-read")
    with pytest.raises(ValueError, match="open-set baseline"):
        run_task(load_task("mr", limit=2), flat, "mlm-head")
