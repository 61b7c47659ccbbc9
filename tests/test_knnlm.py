"""The kNN-LM systems (mlm, knn, knn-lm) against hand computations and brute-force references:
the distributions on a toy vocabulary, datastore fractions, the WikiText-2 task, and the study
on the shared news index through the library, the flow and the CLI."""

import json
import math

import numpy as np
import pytest
import torch
from mlflow import MlflowClient
from typer.testing import CliRunner

from flows.cli import app
from npmcore.answer.inference import NPM
from npmcore.answer.knnlm import (
    KNN_BACKOFF,
    MaskedLMHead,
    block_sample,
    gold_nll,
    knn_log_probs,
    knn_probs,
    label_log_scores,
    log_mix,
    searchers,
)
from npmcore.answer.tokens import label_token_ids
from npmcore.encoder import EncoderError, base_encoder_path, default_encoder_path, load_masked_lm, mlm_head, save_fp16
from npmcore.evaluation.masked import run_masked
from npmcore.evaluation.tasks import DEFAULT_DATA_DIR, WIKITEXT_MASKED, load_task
from npmcore.snapshots import iter_shards
from npmcore.vocab import vocab_tables

runner = CliRunner()


def test_knn_distribution_equals_a_loop_over_the_retrieved_tokens():
    rng = np.random.default_rng(0)
    V, tau = 7, 0.7
    tokens = rng.integers(0, V, size=(4, 9))
    tokens[1, 5:] = -1  # fewer than k found
    tokens[3] = -1  # nothing found
    sims = rng.normal(size=(4, 9)).astype(np.float32)
    got = knn_probs(tokens, sims, tau, V)
    for row in range(4):
        expected = np.zeros(V)
        found = [(t, float(s)) for t, s in zip(tokens[row], sims[row], strict=True) if t >= 0]
        total = sum(math.exp(s / tau) for _, s in found)
        for t, s in found:
            expected[t] += math.exp(s / tau) / total
        np.testing.assert_allclose(got[row], expected, rtol=1e-9, atol=1e-12)
    assert got[3].sum() == 0 and np.isclose(got[0].sum(), 1)
    with pytest.raises(ValueError, match="tau"):
        knn_probs(tokens, sims, 0.0, V)


def test_interpolation_equals_the_mixture_computed_by_hand():
    p_lm = np.array([[0.5, 0.2, 0.2, 0.1]])
    p_knn = np.array([[0.0, 0.75, 0.25, 0.0]])
    lam = 0.3
    mixed = np.exp(log_mix(np.log(p_lm), p_knn, lam))
    np.testing.assert_allclose(mixed, [[0.35, 0.365, 0.215, 0.07]])  # 0.7 * p_lm + 0.3 * p_knn
    np.testing.assert_allclose(np.exp(log_mix(np.log(p_lm), p_knn, 0.0)), p_lm)
    assert np.isneginf(log_mix(np.log(p_lm), p_knn, 1.0)[0, 0])  # p_kNN alone: zero mass stays zero
    backed = np.exp(knn_log_probs(p_knn))
    np.testing.assert_allclose(backed, (1 - KNN_BACKOFF) * p_knn + KNN_BACKOFF / 4)
    assert np.isclose(backed.sum(), 1) and backed.min() > 0
    with pytest.raises(ValueError, match="lambda"):
        log_mix(np.log(p_lm), p_knn, 1.5)


def test_gold_likelihood_and_label_scores_by_hand():
    log_p = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]))
    gold = [np.array([3]), np.array([0, 2])]  # the second query has two single-token aliases
    np.testing.assert_allclose(gold_nll(log_p, gold), [-math.log(0.4), -math.log(0.5)])
    labels = [np.array([0, 1]), np.array([2])]
    np.testing.assert_allclose(np.exp(label_log_scores(log_p, labels)), [[0.3, 0.3], [0.5, 0.25]])


def test_a_datastore_fraction_searches_exactly_its_sample_of_blocks(news_store):
    npm = NPM(news_store.index)
    offsets = npm.corpus.offsets
    sample = block_sample(offsets, 0.3)
    blocks = set(npm.corpus.block_of(sample).tolist())
    assert len(blocks) == round(0.3 * (len(offsets) - 1))
    assert sum(offsets[b + 1] - offsets[b] for b in blocks) == len(sample)  # whole blocks
    np.testing.assert_array_equal(sample, block_sample(offsets, 0.3))  # seeded
    vectors = np.concatenate([a["vectors"] for _, a in iter_shards(news_store.datastore)]).astype(np.float32)
    queries = vectors[[3, 500, 1000]] * npm.scale
    found = {
        (s.name, s.fraction): s for s in searchers(npm.retrieval.index, news_store.datastore, offsets, [0.3, 1.0], True)
    }
    assert set(found) == {("approximate", 1.0), ("approximate", 0.3), ("exact", 1.0), ("exact", 0.3)}
    for name in ("approximate", "exact"):  # the news index is Flat: both are exact here
        sims, ids = found[(name, 0.3)].search(queries, 10)
        brute = vectors[sample] @ queries.T  # (rows, 3)
        for q in range(3):
            top = sample[np.argsort(-brute[:, q], kind="stable")[:10]]
            assert set(ids[q]) == set(top)
            np.testing.assert_allclose(np.sort(sims[q]), np.sort(brute[:, q])[-10:], rtol=1e-4)
    with pytest.raises(ValueError, match="fraction"):
        block_sample(offsets, 0.0)


def test_wikitext_task_masks_a_fixed_share_of_words_split_by_article():
    dev, test = (load_task("wikitext2", limit=None, split=s) for s in ("dev", "test"))
    assert dev.kind == test.kind == "open" and dev.split == "dev"
    articles = {s: {ex.id.split("-")[1] for ex in t.examples} for s, t in (("dev", dev), ("test", test))}
    assert not articles["dev"] & articles["test"]  # no line in both
    for ex in test.examples[:500]:
        assert ex.query.count("[MASK]") == 1 and ex.answers[0].isalnum()
        assert ex.text == ex.query.replace("[MASK]", ex.answers[0])
    lines = (DEFAULT_DATA_DIR / "wikitext2" / "wiki.test.raw").read_text(encoding="utf-8").splitlines()
    words = sum(w.isalnum() for line in lines if not line.strip().startswith("=") for w in line.split())
    assert abs((len(dev.examples) + len(test.examples)) / words - WIKITEXT_MASKED) < 0.01
    again = load_task("wikitext2", limit=50, seed=1, split="dev")
    assert again.examples == load_task("wikitext2", limit=50, seed=1, split="dev").examples


@pytest.fixture(scope="module")
def with_head(news_store, tmp_path_factory) -> str:
    """The default encoder saved with a masked-LM head (seeded, untrained: the arithmetic is what is tested)."""
    torch.manual_seed(0)
    _, model = load_masked_lm(default_encoder_path())
    return str(save_fp16(model, default_encoder_path(), tmp_path_factory.mktemp("encoder") / "with-head"))


def test_an_encoder_without_a_trained_head_is_refused(news_store, with_head):
    npm = NPM(news_store.index)
    with pytest.raises(EncoderError, match="no trained masked-LM head"):  # MiniLM-L6 as packaged
        MaskedLMHead(str(base_encoder_path()), npm.fingerprint)
    MaskedLMHead(with_head, npm.fingerprint)  # the same encoder weights, with a saved head


def brute_force_rows(npm: NPM, model, queries: list[str], k: int, tau: float, lam: float, vectors: np.ndarray):
    """Per query alone: p_LM from the head, exact top-k over every datastore vector, p_kNN by a loop."""
    head = mlm_head(model)
    out = []
    for query in queries:
        ids = npm.tokenizer(query.replace("[MASK]", npm.tokenizer.mask_token))["input_ids"]
        with torch.no_grad():
            hidden = model.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            h = hidden[ids.index(npm.tokenizer.mask_token_id)]
            p_lm = torch.softmax(head(h[None]).double(), -1)[0].numpy()
        sims = vectors @ (h.numpy() * npm.scale)
        top = np.argsort(-sims, kind="stable")[:k]
        p_knn = np.zeros_like(p_lm)
        total = sum(math.exp(sims[i] / tau) for i in top)
        for i in top:
            p_knn[npm.corpus.tokens[i]] += math.exp(sims[i] / tau) / total
        out.append((p_lm, p_knn, lam * p_knn + (1 - lam) * p_lm))
    return out


def test_the_study_equals_brute_force_on_open_and_closed_tasks(news_store, with_head):
    npm = NPM(news_store.index, encoder=with_head, precision="f32")  # the brute force runs torch in float32
    head = MaskedLMHead(with_head, npm.fingerprint)
    _, model = load_masked_lm(with_head)
    vectors = np.concatenate([a["vectors"] for _, a in iter_shards(news_store.datastore)]).astype(np.float32)
    k, tau, lam = 50, 0.5, 0.4
    found = searchers(npm.retrieval.index, news_store.datastore, npm.corpus.offsets, [1.0], True)
    words = vocab_tables(npm.tokenizer).word_start & ~vocab_tables(npm.tokenizer).boundary

    task = load_task("wikitext2", limit=12, seed=3, split="dev")
    study = run_masked(task, npm, head, found, [lam], [tau], k)
    kept = [ex for ex in task.examples if len(label_token_ids(npm.tokenizer, list(ex.answers))[0])]
    assert study.notes["skipped_multi_token"] == len(task.examples) - len(kept) and kept
    gold = [label_token_ids(npm.tokenizer, list(ex.answers))[0] for ex in kept]
    reference = brute_force_rows(npm, model, [ex.query for ex in kept], k, tau, lam, vectors)
    for system, column in (("mlm", 0), ("knn", 1), ("knn-lm", 2)):
        probs = np.stack([r[column] for r in reference])
        if system == "knn":
            probs = (1 - KNN_BACKOFF) * probs + KNN_BACKOFF / probs.shape[1]
        nll = [-math.log(p[g].sum()) for p, g in zip(probs, gold, strict=True)]
        top = [int(np.argmax(np.where(words, p[: len(words)], -1))) for p in probs]
        accuracy = np.mean([t in g for t, g in zip(top, gold, strict=True)])
        rows = [r for r in study.rows if r.system == system]
        assert len(rows) == (1 if system == "mlm" else 2)  # mlm searches nothing; the others twice
        for row in rows:
            assert row.n == len(kept) and row.accuracy == accuracy
            assert row.perplexity == pytest.approx(math.exp(np.mean(nll)), rel=1e-3)
    coverage = np.mean([any(np.stack([r[1] for r in reference])[i][g] > 0) for i, g in enumerate(gold)])
    assert [r.coverage for r in study.rows if r.system != "mlm"] == [pytest.approx(coverage)] * 4

    sentiment = load_task("mr", limit=6, seed=0)
    closed = run_masked(sentiment, npm, head, found[:1], [lam], [tau], k)
    labels = [label_token_ids(npm.tokenizer, list(w))[0] for w in sentiment.label_words]
    reference = brute_force_rows(npm, model, [ex.query for ex in sentiment.examples] + [sentiment.domain], k, tau, lam,
                                 vectors)  # fmt: skip
    scores = np.log([[r[2][ids].sum() for ids in labels] for r in reference])
    predicted = np.argmax(scores[:-1] - scores[-1], axis=1)
    (row,) = [r for r in closed.rows if r.system == "knn-lm"]
    assert row.perplexity is None and row.accuracy == np.mean(predicted == [ex.label for ex in sentiment.examples])


def test_eval_runs_the_study_as_one_mlflow_run_with_table_and_plots(news_store, with_head, tmp_path, prefect_server):
    store = tmp_path / "store"
    args = ["eval", "--task", "wikitext2", "--split", "dev", "--limit", "10", "--index", news_store.index,
            "--model", with_head, "--store", str(store), "--system", "mlm", "--system", "knn", "--system", "knn-lm",
            "--lam", "0.25", "--lam", "0.75", "--tau", "1", "--tau", "3", "--fraction", "0.5", "--fraction", "1",
            "--exact", "--json"]  # fmt: skip
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    # mlm once; knn and knn-lm per search (2) x fraction (2) x tau (2), knn-lm per lambda (2)
    assert len(lines) == 1 + 2 * 2 * 2 * (1 + 2)
    assert {(line["system"], line["lambda"]) for line in lines} == {
        ("mlm", 0.0), ("knn", 1.0), ("knn-lm", 0.25), ("knn-lm", 0.75)
    }  # fmt: skip
    assert all(line["perplexity"] > 1 for line in lines)
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("npm-eval").experiment_id])
    best = min(line["perplexity"] for line in lines if line["system"] == "knn-lm")
    assert run.data.metrics["perplexity.knn-lm"] == pytest.approx(best)
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
        "sweep.json", "perplexity_by_lambda.png", "perplexity_by_tau.png", "perplexity_by_datastore.png"
    }  # fmt: skip
    table = runner.invoke(app, ["compare", run.info.run_id, run.info.run_id, "--store", str(store)])
    assert table.exit_code == 0 and "perplexity.knn-lm" in table.output, table.output
    packaged = str(base_encoder_path())  # MiniLM-L6 as published: no MLM head
    refused = runner.invoke(app, ["eval", "--task", "wikitext2", "--index", news_store.index, "--store", str(store),
                                  "--model", packaged, "--system", "knn-lm", "--limit", "5"])  # fmt: skip
    assert refused.exit_code == 2 and "no trained masked-LM head" in " ".join(refused.output.split())
    bad = runner.invoke(app, ["eval", "--task", "mr", "--index", news_store.index, "--system", "knn-lm", "--lam", "1"])
    assert bad.exit_code == 2 and "strictly between 0 and 1" in " ".join(bad.output.split())
