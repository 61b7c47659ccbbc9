"""Confidence and abstention: selective-prediction metrics against brute force, the calibrator's fit and file,
and answers that carry a confidence only with the calibrator of their encoder and ranker."""

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from npmcore.answer.answering import answers_by_query, named, replies
from npmcore.answer.confidence import (
    BOOSTING,
    CONFIDENCE_FEATURES,
    CONFIDENCE_FILE,
    Calibrator,
    abstention,
    abstention_threshold,
    confidence_features,
    fit_calibrator,
    query_features,
    ranker_checksum,
    shown,
)
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.ranking import ranker_of
from npmcore.answer.trees import TreeEnsemble
from npmcore.encoder import default_encoder_path
from npmcore.evaluation.selective import (
    accuracy_at_coverage,
    aurc,
    calibration_report,
    expected_calibration_error,
    reliability,
)

QUERIES = [
    "Australian firefighters battled bushfires near [MASK].",
    "The Reserve Bank of Australia kept interest rates at [MASK].",
    "Palestinian leader Yasser [MASK] met the envoy.",
]


def brute_ece(conf: list[float], right: list[bool], bins: int = 10) -> float:
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        members = [i for i, c in enumerate(conf) if lo <= c < hi or (b == bins - 1 and c == 1.0)]
        if members:
            accuracy = sum(right[i] for i in members) / len(members)
            mean = sum(conf[i] for i in members) / len(members)
            total += len(members) / len(conf) * abs(accuracy - mean)
    return total


def brute_ranked(conf: list[float], right: list[bool]) -> list[bool]:
    """Answers most confident first, ties in their given order."""
    return [right[i] for i in sorted(range(len(conf)), key=lambda i: (-conf[i], i))]


@pytest.mark.parametrize("seed", range(6))
def test_selective_metrics_equal_their_definitions(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    conf = np.round(rng.random(n), 1 if seed % 2 else 6).tolist()  # rounded: ties and bin edges
    right = (rng.random(n) < 0.4).tolist()
    assert expected_calibration_error(conf, right) == pytest.approx(brute_ece(conf, right))
    ranked = brute_ranked(conf, right)
    risks = [1 - sum(ranked[:k]) / k for k in range(1, n + 1)]
    assert aurc(conf, right) == pytest.approx(sum(risks) / n)
    for coverage in (0.1, 0.25, 0.5, 1.0):
        k = max(1, math.ceil(coverage * n))
        assert accuracy_at_coverage(conf, right, coverage) == pytest.approx(sum(ranked[:k]) / k)
    points = reliability(conf, right)
    assert sum(p[2] for p in points) == n
    report = calibration_report(conf, right)
    assert report["n"] == n and set(report["accuracy_at_coverage"]) == {"0.1", "0.25", "0.5", "1.0"}


def test_selective_metrics_refuse_what_is_not_a_confidence():
    with pytest.raises(ValueError, match=r"confidence must lie in \[0, 1\]"):
        expected_calibration_error([0.5, 1.5], [True, False])
    with pytest.raises(ValueError, match="differ in shape"):
        aurc([0.5], [True, False])
    with pytest.raises(ValueError, match="no answers"):
        aurc([], [])
    with pytest.raises(ValueError, match="coverage must be in"):
        accuracy_at_coverage([0.5], [True], 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_the_abstention_threshold_maximises_right_minus_wrong_answers_given(seed):
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(40), 2)
    right = rng.random(40) < conf
    weight = rng.random(40) + 0.5
    best_gain, best = 0.0, 1.0
    for t in sorted(set(conf.tolist()), reverse=True):  # brute force: every threshold, answering conf >= t
        given = conf >= t
        gain = weight[given & right].sum() - weight[given & ~right].sum()
        if gain > best_gain + 1e-12:
            best_gain, best = gain, t
    assert abstention_threshold(conf, right, weight) == pytest.approx(best)
    assert abstention_threshold(conf, np.zeros(40, bool)) == 1.0  # every answer wrong: none is given


def test_a_fitted_calibrator_is_calibrated_on_fresh_data_of_its_kind_and_survives_its_file(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(12_000, len(CONFIDENCE_FEATURES)))
    truth = 1 / (1 + np.exp(-(1.5 * features[:, 0] - features[:, 7] - 1.0)))  # a logistic law of two features
    right = rng.random(len(truth)) < truth
    fit, held = slice(0, 8_000), slice(8_000, None)
    ranker = ranker_of(str(default_encoder_path()))
    facts = np.arange(8_000) // 2  # two answers a fact, of one query
    calibrator = fit_calibrator(features[fit], right[fit], facts, facts, ranker, "enc", provenance={"x": 1})
    predicted = calibrator.confidence(features[held])
    assert expected_calibration_error(predicted, right[held]) < 0.04
    assert np.corrcoef(predicted, truth[held])[0, 1] > 0.95
    # the threshold: answers right more often than wrong are given
    assert 0.35 < calibrator.min_confidence < 0.65
    path = tmp_path / CONFIDENCE_FILE
    calibrator.save(path)
    again = Calibrator.load(path)
    assert np.array_equal(again.confidence(features[held]), predicted)
    assert (again.ranker, again.encoder, again.provenance["x"]) == (ranker_checksum(ranker), "enc", 1)
    assert [p.name for p in tmp_path.iterdir()] == [CONFIDENCE_FILE]  # nothing temporary left
    (tmp_path / "bad.npz").write_text("{")
    with pytest.raises(ValueError, match="bad.npz: not a calibrator"):
        Calibrator.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "other.npz", about=np.array('{"features": ["score"]}'), **calibrator.trees.arrays())
    with pytest.raises(ValueError, match="not a calibrator of features"):
        Calibrator.load(tmp_path / "other.npz")
    with pytest.raises(ValueError, match="nothing to calibrate"):
        fit_calibrator(features[:10], np.ones(10, bool), np.arange(10), np.arange(10), ranker, "enc")


@pytest.mark.parametrize("seed", range(5))
def test_the_answers_shown_are_those_of_each_facts_most_confident_query(seed):
    """``shown`` against a loop over the facts: of each fact, the first answer of the query whose first answer is the
    most confident, the first such query on a tie (the choice of replies)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 4, size=(40, 3))  # answers of each of a fact's three queries (a query may have none)
    counts[rng.random(counts.shape) < 0.2] = 0
    facts = np.concatenate([[f] * n for f, row in enumerate(counts) for n in row])
    queries = np.concatenate([[3 * f + k] * n for f, row in enumerate(counts) for k, n in enumerate(row)])
    confidence = np.round(rng.random(len(facts)), 1)  # ties happen
    expected = np.zeros(len(facts), dtype=bool)
    for fact in np.unique(facts):
        firsts = [np.flatnonzero(queries == q)[0] for q in np.unique(queries[facts == fact])]
        expected[max(firsts, key=lambda row: (confidence[row], -row))] = True
    assert np.array_equal(shown(confidence, facts, queries), expected)


@pytest.fixture(scope="module")
def npm(news_store) -> NPM:
    return NPM(news_store.index)


def test_the_trees_score_as_scikit_learn_scores_them():
    """The trees walked with numpy against scikit-learn's own predictor (the reference), missing values included:
    the same raw scores to the bit, the same probabilities to the logistic function's rounding."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(1)
    x = rng.normal(size=(3_000, len(CONFIDENCE_FEATURES)))
    right = rng.random(len(x)) < 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 3] + np.sin(3 * x[:, 7]))))
    x[rng.random(x.shape) < 0.1] = np.nan  # the fit learns where each split sends a missing value
    model = HistGradientBoostingClassifier(**BOOSTING, early_stopping=False, random_state=0).fit(x, right)
    trees = TreeEnsemble.of(model)
    fresh = rng.normal(size=(2_000, len(CONFIDENCE_FEATURES))) * 2
    fresh[rng.random(fresh.shape) < 0.1] = np.nan
    assert len(trees.roots) == BOOSTING["max_iter"] and trees.missing_left.any() and not trees.missing_left.all()
    assert np.array_equal(trees.raw(fresh), model.decision_function(fresh))
    np.testing.assert_allclose(trees.probability(fresh), model.predict_proba(fresh)[:, 1], rtol=1e-14, atol=0)
    assert np.array_equal(TreeEnsemble.from_arrays(trees.arrays()).raw(fresh), trees.raw(fresh))
    with pytest.raises(ValueError, match=f"rows of {len(CONFIDENCE_FEATURES)} features"):
        trees.raw(fresh[:, :5])


def test_a_calibrator_file_that_is_no_tree_is_refused(tmp_path):
    """A file is read as numbers and text only (no pickle, nothing it names is run), and its nodes must be trees:
    a child before its parent (a walk that would never end), or out of range, is refused before any answer."""
    shipped = Calibrator.load(Path(default_encoder_path()) / CONFIDENCE_FILE)
    about = np.array(f'{{"features": {json.dumps(list(CONFIDENCE_FEATURES))}}}')
    looped = shipped.trees.arrays()
    inner = np.flatnonzero(~shipped.trees.leaf)[0]
    looped["left"] = looped["left"].copy()
    looped["left"][inner] = inner
    far = {**shipped.trees.arrays(), "right": shipped.trees.right + len(shipped.trees.leaf)}
    for name, arrays, problem in [("looped", looped, "no tree"), ("far", far, "no node")]:
        np.savez(tmp_path / f"{name}.npz", about=about, **arrays)
        with pytest.raises(ValueError, match=f"{name}.npz: not a calibrator .*{problem}"):
            Calibrator.load(tmp_path / f"{name}.npz")
    np.savez(tmp_path / "pickled.npz", about=np.array([{"features": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickled.npz: not a calibrator"):
        Calibrator.load(tmp_path / "pickled.npz")


def test_the_features_are_those_of_the_ranked_answers(npm):
    config = InferenceConfig(answers=4)
    for phrases in npm.phrases(QUERIES, config):
        features = confidence_features(phrases, QUERIES[0], config.answers)
        top = min(4, len(phrases.scores))
        column = dict(zip(CONFIDENCE_FEATURES, features.T, strict=True))
        log_score = np.log(phrases.scores[: top + 1])
        assert features.shape == (top, len(CONFIDENCE_FEATURES))
        assert np.allclose(column["score"], phrases.scores[:top])
        assert np.allclose(column["gap_to_best"], log_score[0] - log_score[:top])
        assert np.allclose(column["margin_to_next"][: top - 1], -np.diff(log_score[:top]))
        assert np.allclose(features[:, 6:-4], phrases.parts[:top])
        assert column["mask_at_end"].all() and (column["query_words"] == 5).all() and (column["kind"] == 0).all()
        kinds = np.array([1, -1, 0, 1])[:top]  # of the kind asked, of another, unknown: npmcore.answer.kinds
        assert confidence_features(phrases, QUERIES[0], config.answers, kinds)[:, -1].tolist() == kinds.tolist()
    asked = query_features("Who wrote Hamlet? Answer: [MASK].")  # a question's shape is not a feature
    assert asked.tolist() == [4, 1, len("Who wrote Hamlet? Answer: ") / len("Who wrote Hamlet? Answer: [MASK].")]
    assert query_features("[MASK] wrote Hamlet.").tolist() == [2, 0, 0.0]
    with pytest.raises(ValueError, match="ranked by evidence scoring"):
        confidence_features(next(npm.phrases(QUERIES[:1], InferenceConfig(scoring="npm"))), QUERIES[0], 3)


def test_answers_carry_the_confidence_of_their_encoders_calibrator_only(npm, news_store, tmp_path):
    """A calibrator fitted on this encoder's answers under its ranker gives every answer its probability; one of
    another ranker is never used: a refitted ranker needs a refitted calibrator."""
    config = InferenceConfig(answers=3)
    phrases = [npm.pooled(p).phrases for p in npm.phrases(QUERIES, config)]  # what answers are rated on
    features = np.concatenate([confidence_features(p, q, 3) for p, q in zip(phrases, QUERIES, strict=True)])
    facts = np.concatenate([[n] * min(3, len(p.scores)) for n, p in enumerate(phrases)])
    right = np.r_[True, facts[1:] != facts[:-1]]  # the first answers right
    encoder = tmp_path / "encoder"
    shutil.copytree(default_encoder_path(), encoder, ignore=shutil.ignore_patterns(CONFIDENCE_FILE))
    mine = fit_calibrator(features, right, facts, facts, npm.ranker, npm.fingerprint)
    mine.save(encoder / CONFIDENCE_FILE)
    answered = NPM(news_store.index, encoder=str(encoder))
    for query, found, p in zip(QUERIES, answered.predict(QUERIES, config), phrases, strict=True):
        expected = mine.confidence(confidence_features(p, query, 3))
        assert [a.confidence for a in found] == pytest.approx(expected.tolist())
    other_ranker = replace(npm.ranker, phrase=npm.ranker.phrase + 1.0)
    reranked = NPM(news_store.index, encoder=str(encoder), ranker=other_ranker)
    assert reranked.calibrator is None  # nor the shipped one: fitted for the shipped ranker
    assert all(a.confidence is None for a in reranked.predict(QUERIES[:1], config)[0])
    assert all(a.confidence is None for a in answered.predict(QUERIES[:1], replace(config, scoring="npm"))[0])


def test_the_shipped_calibrator_was_fitted_on_the_shipped_encoder_and_ranker(npm):
    shipped = Calibrator.load(Path(default_encoder_path()) / CONFIDENCE_FILE)
    assert shipped.encoder == npm.fingerprint
    assert shipped.ranker == ranker_checksum(ranker_of(str(default_encoder_path())))
    assert (npm.calibrator.encoder, npm.calibrator.min_confidence) == (shipped.encoder, shipped.min_confidence)
    assert 0 < shipped.min_confidence < 1 and set(shipped.provenance["sets"]) >= {
        "trex_2020",
        "kamel",
        "triviaqa",
        "temporal",
    }


def test_a_query_abstains_below_the_threshold_and_keeps_its_best_guess(npm):
    (found,) = npm.predict(QUERIES[:1], InferenceConfig(answers=2))
    sure = found[0].confidence
    assert abstention(npm.calibrator, found, sure) == {"found": True, "abstained": False, "min_confidence": sure}
    assert abstention(npm.calibrator, found, min(1.0, sure + 1e-6))["abstained"]
    assert abstention(npm.calibrator, found, None)["min_confidence"] == npm.calibrator.min_confidence
    assert abstention(npm.calibrator, [], None) == {"found": False, "abstained": True, "min_confidence": None}
    unsure = [replace(a, confidence=None) for a in found]
    assert abstention(None, unsure, 0.9) == {"found": True, "abstained": False, "min_confidence": None}


def test_a_question_is_answered_by_its_readings_names_of_the_kind_it_asks_for_rated_by_the_replys_confidence(npm):
    """replies: each of a question's queries answered with only answers of the kind it asks for (the same as its
    unfiltered phrases kept by ``fits``, in rank order); its readings' answers pooled by name; the first name checked
    the other way round where it may be shown as sure; every name rated by the reply's confidence (of its features:
    the vote, the check) and shown best first, as its most confident answer."""
    from npmcore.answer.inference import KEPT_FROM
    from npmcore.answer.sure import sure_of
    from npmcore.ask.asking import ask
    from npmcore.ask.questions import fits

    asked = ask("Where did Australian firefighters battle bushfires?")
    assert asked.expects == "place" and len(asked.queries) == 2
    config = InferenceConfig(answers=3)
    (mine,) = list(answers_by_query(npm, [asked], config))
    assert [query for query, _, _ in mine] == list(asked.queries)
    for query, phrases, answers in mine:
        every = npm.answers_from(query, phrases, replace(config, answers=KEPT_FROM))
        kept = [a for a in every if fits(a.text, "place")][: config.answers]
        assert [(a.text, a.rank, a.confidence) for a in answers] == [(a.text, a.rank, a.confidence) for a in kept]
    sure = sure_of(npm.encoder_source, npm.calibrator)
    assert sure is not None  # the shipped encoder's
    ((group,),) = named(npm, [asked], [mine], config, sure.check_from)
    assert {n.name.best.text for n in group} == {a.text for _, _, answers in mine for a in answers}
    checked = [n for n in group if n.check is not None]
    assert len(checked) <= 1 and all(n is group[0] and n.name.best.confidence >= sure.check_from for n in checked)
    rated = sorted(((sure.confidence(n.features()[None])[0], n.name.best.text) for n in group), reverse=True)
    (reply,) = replies(npm, [asked], config)
    assert [a.text for a in reply.answers] == [text for _, text in rated[: config.answers]]
    assert [a.confidence for a in reply.answers] == pytest.approx([c for c, _ in rated[: config.answers]])
    shown = next(n for n in group if n.name.best.text == reply.answers[0].text)
    assert reply.query == asked.queries[shown.query]


def test_the_shipped_replys_confidence_reads_the_shipped_calibrator_and_shows_sure_answers_right_nine_times_in_ten(
    npm,
):
    from npmcore.answer.sure import SURE_FILE, Sure, sure_of

    shipped = Sure.load(Path(default_encoder_path()) / SURE_FILE)
    assert sure_of(npm.encoder_source, npm.calibrator).coef == shipped.coef
    assert shipped.provenance["tried"] and 0 < shipped.check_from < shipped.min_confidence < 1
    assert sure_of(npm.encoder_source, None) is None  # without a calibrator: nothing to read


def test_a_phrase_across_a_line_break_is_no_answer_and_the_next_takes_its_place(npm, monkeypatch):
    """A phrase that ends one paragraph and starts the next ("… the mid-19th century.\\n\\nEarly") is passed over; the
    answers are the next phrases, with the confidence each has at its own rank."""
    config = InferenceConfig(answers=3)
    (phrases,) = list(npm.phrases(QUERIES[:1], config))
    ranked = npm.pooled(phrases)
    plain = npm.answers_from(QUERIES[0], ranked, replace(config, answers=4))
    surface = type(npm.evidence).surface
    broken = plain[0].evidence[0]
    monkeypatch.setattr(
        npm.evidence, "surface", lambda e: "century.\nEarly" if e == broken else surface(npm.evidence, e)
    )
    answers = npm.answers_from(QUERIES[0], ranked, config)
    assert [(a.text, a.rank, a.confidence) for a in answers] == [(a.text, a.rank, a.confidence) for a in plain[1:]]
