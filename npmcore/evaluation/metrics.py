"""Evaluation metrics: SQuAD-normalised exact match, accuracy, LAMA macro average by length,
and whether an answer copies its query."""

import re
import string
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from npmcore.mask import MASK
from npmcore.vocab import content_words_of

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans(string.punctuation, " " * len(string.punctuation))


def normalize_answer(s: str) -> str:
    """SQuAD-style normalisation, applied to predictions and gold alike: lower case, punctuation
    to spaces (so "left-wing" and "left wing" agree), articles a/an/the dropped, whitespace collapsed."""
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """Whether ``prediction`` equals any gold alias after :func:`normalize_answer`.

    Raises:
        ValueError: ``answers`` is empty (an example without gold cannot be scored).
    """
    if not answers:
        raise ValueError(f"no gold answers to compare the prediction {prediction!r} with")
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(a) for a in answers)


def in_passages(answers: Sequence[str], passages: Sequence[str]) -> bool:
    """Whether a gold alias is written in one of the passages, as whole words after
    :func:`normalize_answer` (the ceiling of an answer read from them)."""
    texts = [f" {normalize_answer(p)} " for p in passages]
    golds = [f" {g} " for g in (normalize_answer(a) for a in answers) if g]
    return any(g in t for g in golds for t in texts)


def repeats_query(prediction: str, query: str) -> bool:
    """Whether ``prediction`` holds a content word of ``query`` (its mask aside): "Shriki" for
    "Shlomo Shriki was born in [MASK]." (:func:`npmcore.vocab.content_words_of` says what a
    content word is, for this metric and for the inference option that avoids such answers alike)."""
    return not content_words_of(prediction).isdisjoint(content_words_of(query.replace(MASK, " ")))


def _check_pairs(a: Sequence[Any], b: Sequence[Any], names: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{names} differ in length: {len(a)} vs {len(b)}")
    if not a:
        raise ValueError(f"{names} are empty: nothing to average")


def accuracy(predictions: Sequence[Any], golds: Sequence[Any]) -> float:
    """Fraction of positions where the prediction equals the gold."""
    _check_pairs(predictions, golds, "predictions and golds")
    return sum(p == g for p, g in zip(predictions, golds)) / len(golds)


def length_bucket(n: int) -> str:
    """Answer-length bucket of LAMA's macro average: ``"1"``, ``"2"``, ``"3"`` or ``"4+"``."""
    if n < 1:
        raise ValueError(f"an answer length is at least 1 token, got {n}")
    return str(n) if n < 4 else "4+"


def macro_by_length(correct: Sequence[bool], lengths: Sequence[int]) -> float:
    """Mean over answer-length buckets 1, 2, 3, 4+ of each bucket's accuracy, as the paper
    reports LAMA; a bucket with no example is left out.

    Args:
        correct: per example, whether the prediction was right.
        lengths: per example, the answer length in tokens (the shortest gold answer's).
    """
    _check_pairs(correct, lengths, "correct and lengths")
    buckets: dict[str, list[bool]] = defaultdict(list)
    for ok, n in zip(correct, lengths):
        buckets[length_bucket(n)].append(bool(ok))
    return sum(sum(v) / len(v) for v in buckets.values()) / len(buckets)
