"""What a reply shows as sure: its readings' vote (npmcore.answer.vote), its check the other way round
(npmcore.answer.checks, npmcore.ask.subjects) and the reply's confidence (npmcore.answer.sure), against references
written out by hand."""

import json
import math

import numpy as np
import pytest

from npmcore.answer.checks import UNCHECKED, Check, is_subject
from npmcore.answer.inference import Answer
from npmcore.answer.pooling import head
from npmcore.answer.sure import SURE_FEATURES, Sure, design, precision_threshold
from npmcore.answer.vote import VOTE_FEATURES, names
from npmcore.ask.subjects import names_subject, reversed_statement, subject_of


def answer(text: str, confidence: float, rank: int = 0, forms: tuple[str, ...] = ()) -> Answer:
    return Answer(text, (), confidence, (), confidence=confidence, rank=rank, forms=forms)


def test_readings_that_name_one_thing_vote_for_it_whatever_its_form():
    readings = [
        [answer("Thomas Edison", 0.5, 0, ("Edison",)), answer("Joseph Swan", 0.2, 1)],
        [answer("David Misell", 0.61, 0), answer("edison", 0.3, 1)],
        [answer("Edison", 0.4, 0)],
        [],
    ]
    found = names(readings)
    assert [n.best.text for n in found] == ["David Misell", "Thomas Edison", "Joseph Swan"]  # most confident first
    edison = found[1]
    assert sorted(r for r, _ in edison.answers) == [0, 1, 2] and edison.first == {0, 2}
    mean = (0.5 + 0.3 + 0.4 + 0.0) / 4  # each reading's best answer naming it; a reading without one counts 0
    expected = dict(zip(VOTE_FEATURES, [0.5, mean, 2 / 4, 3 / 4, math.log(4)], strict=True))
    assert dict(zip(VOTE_FEATURES, edison.votes().tolist(), strict=True)) == pytest.approx(expected)


def test_an_answer_that_names_two_names_makes_them_one():
    found = names(
        [[answer("Fleming", 0.3)], [answer("Alexander", 0.2)], [answer("Fleming", 0.4, forms=("Alexander",))]]
    )
    assert len(found) == 1 and found[0].best.confidence == 0.4 and len(found[0].answers) == 3


@pytest.mark.parametrize(
    ("statement", "subject", "answer", "turned"),
    [
        ("The capital of Ireland is [MASK].", "Ireland", "Belfast", "The capital of [MASK] is Belfast."),
        ("[MASK] is the capital of canada.", "canada", "Toronto", "Toronto is the capital of [MASK]."),
        ("[MASK] killed Achilles.", "Achilles", "Hector", "Hector killed [MASK]."),
        (
            "Napoleon was born on the island of [MASK].",
            "Napoleon",
            "Corsica",
            "[MASK] was born on the island of Corsica.",
        ),
        (
            "The Birth of Venus was painted by [MASK].",
            "Birth of Venus",
            "Botticelli",
            "[MASK] was painted by Botticelli.",
        ),
        ("Lord of the rings was written by [MASK].", "Lord of the rings", "Tolkien", "[MASK] was written by Tolkien."),
        ("Mars has [MASK] moons.", "Mars", "two", "[MASK] has two moons."),  # not the counted noun by the mask
        ("Potassium's chemical symbol is [MASK].", "Potassium", "K", "[MASK]'s chemical symbol is K."),
        ("One of the official languages of Afghanistan is [MASK].", "Afghanistan", "Pashto", None),
    ],
)
def test_a_statement_is_turned_round_on_its_own_subject(statement, subject, answer, turned):
    found = subject_of(statement)
    assert found is not None and found.text == subject
    if turned is not None:
        assert reversed_statement(statement, found, answer) == turned
    assert subject_of("It is [MASK].") is None  # nothing it is about


def test_what_names_a_subject_and_what_is_one():
    assert names_subject("Napoleon", "Napoleon Bonaparte") and names_subject("Napoleon Bonaparte", "Napoleon")
    assert names_subject("the Nile", "Nile") and not names_subject("Northern Ireland", "Ireland")
    assert is_subject("VW", "Volkswagen") and is_subject("NASA", "National Aeronautics and Space Administration")
    assert not is_subject("BMW", "Volkswagen") and not is_subject("Germany", "Volkswagen")


def test_a_clause_after_a_name_is_no_part_of_the_answer():
    assert head("Nairobi, which is the 14th largest city in Africa") == "Nairobi"
    assert head("Nairobi (Swahili: Nairobi)") == "Nairobi"
    assert head("Paris, France") == "Paris, France" and head("Washington, D.C.") == "Washington, D.C."


def test_a_check_says_where_the_subject_came_back():
    assert Check("q", "Ireland", 0, 0.8).features().tolist() == [1.0, 1.0, 1.0, 0.8]
    assert Check("q", "Ireland", 2, 0.1).features().tolist() == [1.0, 0.0, 1.0, 0.1]
    assert Check("q", "Ireland", None, 0.0).features().tolist() == [1.0, 0.0, 0.0, 0.0] and not UNCHECKED.any()


def test_the_replys_confidence_is_a_logistic_regression_of_its_features_and_is_saved_whole(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.uniform(0, 1, (50, len(SURE_FEATURES)))
    sure = Sure(tuple(rng.normal(size=len(SURE_FEATURES)).tolist()), -0.3, 0.8, 0.2, "abc", {"fitted_on": 3})
    logodds = {"confidence", "mean_confidence", "check_confidence"}
    for row, p in zip(features, sure.confidence(features), strict=True):
        x = [math.log(v / (1 - v)) if name in logodds else v for name, v in zip(SURE_FEATURES, row, strict=True)]
        z = sum(c * v for c, v in zip(sure.coef, x, strict=True)) + sure.intercept
        assert p == pytest.approx(1 / (1 + math.exp(-z)))
    assert design(np.array([[1.0] * len(SURE_FEATURES)]))[0, 0] == pytest.approx(math.log((1 - 1e-4) / 1e-4))
    sure.save(tmp_path / "sure.json")
    again = Sure.load(tmp_path / "sure.json")
    assert (again.coef, again.intercept, again.min_confidence, again.check_from) == (sure.coef, -0.3, 0.8, 0.2)
    (tmp_path / "bad.json").write_text(json.dumps({"features": ["x"]}))
    with pytest.raises(ValueError, match="not a reply's confidence"):
        Sure.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="coefficients"):
        Sure((1.0,), 0.0, 0.5, 0.2, "abc", {})


def test_the_threshold_for_precision_is_the_lowest_whose_answers_are_right_often_enough():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        confidence = np.round(rng.uniform(0, 1, n), 1)  # ties
        right = rng.uniform(0, 1, n) < confidence
        found = precision_threshold(confidence, right, 0.8)
        ok = [t for t in np.unique(confidence) if right[confidence >= t].mean() >= 0.8]
        assert found == (min(ok) if ok else 1.0)
