"""The check before sure: an answer about to be shown as sure is asked the other way round.

"What is the capital of Ireland?" read as "The capital of Ireland is [MASK]." may come back "Belfast" with a high
confidence: the passages name Belfast as a capital, of Northern Ireland. Asked the other way round, with the answer
put in and the statement's own subject masked (:func:`npmcore.ask.subjects.reversed_statement`), "The capital of
[MASK] is Belfast." comes back "Northern Ireland", not Ireland; "The capital of [MASK] is Dublin." comes back
Ireland. Where the subject comes back, and how far down, is evidence for the answer (Weng et al. 2023, backward
verification), not a veto: one-to-many relations ("[MASK] is in China.") and the weaker reverse direction make it
noisy, so it is one of the features of the reply's confidence (:mod:`npmcore.answer.sure`).

A check reads the passages its answer was found in (its evidence), in one batch with the other checks of a request:
it costs one short forward and the scoring of a passage or two already read, no search.

An answer that is its question's own subject, or an abbreviation of it ("VW" for Volkswagen), is no answer
(:func:`is_subject`).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npmcore.answer.inference import NPM, Answer, InferenceConfig
from npmcore.ask.subjects import Subject, names_subject

CHECK_FEATURES = ("checked", "check_first", "check_named", "check_confidence")


@dataclass(frozen=True)
class Check:
    """An answer asked the other way round: the query, the subject it masks, and where the subject came back among
    that query's answers (``rank``: None where it did not)."""

    query: str
    subject: str
    rank: int | None
    confidence: float  # the confidence of the answer naming the subject (0 where none did)

    def features(self) -> np.ndarray:
        """(len(CHECK_FEATURES),) checked, the subject first, the subject among the answers, its confidence."""
        return np.array([1.0, float(self.rank == 0), float(self.rank is not None), self.confidence])


UNCHECKED = np.zeros(len(CHECK_FEATURES))  # the features of an answer not checked


def is_subject(answer: str, subject: str) -> bool:
    """Whether an answer is its question's own subject: it names it (:func:`npmcore.ask.subjects.names_subject`), or
    abbreviates it, capitals whose letters are the subject's initial and then some of its letters in order ("VW" of
    Volkswagen, "NASA" of National Aeronautics and Space Administration)."""
    if names_subject(answer, subject):
        return True
    letters = answer.replace(".", "")
    if not (2 <= len(letters) <= 6 and letters.isalpha() and letters.isupper()):
        return False
    spelled = re.sub(r"[^a-z]", "", subject.lower())
    if not spelled or spelled[0] != letters[0].lower():
        return False
    at = 0
    for letter in letters.lower():
        at = spelled.find(letter, at) + 1
        if at == 0:
            return False
    return True


def run_checks(
    npm: NPM, checks: Sequence[tuple[str, Subject]], blocks: Sequence[list[int]], config: InferenceConfig
) -> list[Check]:
    """Each (query, subject) asked in its ``blocks`` (one batch), and where the subject came back among its answers."""
    if not checks:
        return []
    queries = [query for query, _ in checks]
    out = []
    for (query, subject), phrases in zip(checks, npm.phrases(queries, config, list(blocks)), strict=True):
        ranked = npm.pooled(phrases) if phrases.parts is not None else phrases
        answers = npm.answers_from(query, ranked, config)
        out.append(Check(query, subject.text, *_found(answers, subject.text)))
    return out


def _found(answers: list[Answer], subject: str) -> tuple[int | None, float]:
    """Where an answer, as shown, names the subject (not by a shorter form it holds: "Northern Ireland" is no
    Ireland), and its confidence."""
    for rank, answer in enumerate(answers):
        if names_subject(answer.text, subject):
            return rank, answer.confidence or 0.0
    return None, 0.0
