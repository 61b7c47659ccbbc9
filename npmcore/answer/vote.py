"""A question's readings vote: the answers of all its queries as one set, one entry per thing named.

A question, a keyword query or a yes/no question is asked as several queries (its readings,
:mod:`npmcore.ask.asking`), and each comes back with its own answers. "inventor of the light bulb" is read five ways;
four name Edison first and one David Misell, with a higher confidence. Reading one query's answers (the most
confident one's) hides that the others disagree: where every reading's first answer is the same, the answer is right
far more often than where they differ (docs/evaluate.md). Here the readings' answers are pooled by the name they
spell (an answer's text or one of its forms, case and punctuation aside: :func:`npmcore.vocab.spelled`), as the
forms of one name are pooled within one query (:mod:`npmcore.answer.pooling`), and each name carries what the vote
says of it (:data:`VOTE_FEATURES`): its best confidence, its mean confidence over the readings (none where a reading
does not name it), the share of readings that name it first and the share that name it at all, and how many
readings there were. Which name is shown first and how sure it is are the reply's confidence
(:mod:`npmcore.answer.sure`) of these.

Pure functions of the readings' answers; imports the answer stage's :class:`~npmcore.answer.inference.Answer`.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npmcore.answer.inference import Answer
from npmcore.vocab import spelled

VOTE_FEATURES = ("confidence", "mean_confidence", "first", "named", "readings")


@dataclass(frozen=True)
class Name:
    """One thing named by a question's readings: each reading's answer that names it (reading, answer), the most
    confident first; the readings that name it first; how many readings the question was asked as."""

    answers: tuple[tuple[int, Answer], ...]
    first: frozenset[int]
    readings: int

    @property
    def best(self) -> Answer:
        """Its most confident answer (the first, where none has a confidence): the one shown."""
        return self.answers[0][1]

    @property
    def reading(self) -> int:
        """The reading its best answer comes from."""
        return self.answers[0][0]

    def votes(self) -> np.ndarray:
        """(len(VOTE_FEATURES),) what the readings say of it (module docstring)."""
        by_reading: dict[int, float] = {}
        for reading, answer in self.answers:
            by_reading[reading] = max(by_reading.get(reading, 0.0), answer.confidence or 0.0)
        return np.array(
            [
                self.best.confidence or 0.0,
                sum(by_reading.values()) / self.readings,
                len(self.first) / self.readings,
                len(by_reading) / self.readings,
                math.log(self.readings),
            ]
        )


def names(readings: Sequence[Sequence[Answer]]) -> list[Name]:
    """The things the readings' answers name (each reading's answers best first), the most confident first: answers
    whose texts or forms spell one name are one (module docstring)."""
    keys: list[set[str]] = []
    members: list[list[tuple[int, int, Answer]]] = []  # (reading, place in it, answer) of each name
    for reading, answers in enumerate(readings):
        for place, answer in enumerate(answers):
            mine = {spelled(answer.text), *(spelled(form) for form in answer.forms)} - {""}
            joined = [n for n, theirs in enumerate(keys) if theirs & mine]
            if not joined:
                keys.append(mine)
                members.append([(reading, place, answer)])
                continue
            into = joined[0]
            for other in reversed(joined[1:]):  # one answer may join two names: they are one
                keys[into] |= keys.pop(other)
                members[into] += members.pop(other)
            keys[into] |= mine
            members[into].append((reading, place, answer))
    out = []
    for mine in members:
        ordered = sorted(mine, key=lambda m: (-(m[2].confidence or 0.0), m[0], m[1]))
        first = frozenset(r for r, place, _ in mine if place == 0)
        out.append(Name(tuple((r, a) for r, _, a in ordered), first, len(readings)))
    return sorted(out, key=lambda n: (-(n.best.confidence or 0.0), n.reading, n.best.rank))
