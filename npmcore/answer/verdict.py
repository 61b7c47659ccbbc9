"""A yes/no question's verdict from what the corpus says, read from the side of what it asserts that has one answer.

"Did Shakespeare write Hamlet?" is asked from both sides (:mod:`npmcore.ask.yes_no`): "Shakespeare wrote [MASK]."
(one of his many works comes back) and "[MASK] wrote Hamlet." (Hamlet's one author). The verdict is

* **yes** where a side's answers name what that side asserts ("Shakespeare"; the same spelling, or one holding the
  other's words: :func:`agrees`) with a confidence of at least :data:`YES_FROM` (a side of many answers:
  :data:`YES_FROM_MANY`);
* **no** where none does and a side of one answer names another thing first, confidently (at least
  :data:`NO_FROM`): "Is Toronto the capital of Canada?" is no only where the corpus says Ottawa, confidently;
* **unknown** otherwise: the corpus does not say (a side of many answers, "Shakespeare wrote [MASK].", that names
  one of them gives no reason to say no).

Imports the shared modules' spelling of names (``npmcore.vocab``), the sides a question is read from and the answers
it reads.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from npmcore.answer.inference import Answer
from npmcore.ask.yes_no import Side, bare
from npmcore.vocab import spelled

# chosen on the yes/no dev set (bench/yes_no.py): right minus twice the verdicts that contradict the truth, the most
YES_FROM = 0.4  # a side of one answer whose answer names what it asserts says yes from this confidence
YES_FROM_MANY = 0.5  # a side of many answers, from this one
NO_FROM = 0.6  # a side of one answer that names another thing first says no from this confidence
Verdict = Literal["yes", "no", "unknown"]


@dataclass(frozen=True)
class YesNo:
    """The reply to a yes/no question: ``verdict`` (module docstring), the part asserted of the side it reads, what
    the corpus says there (its answer; None where it has none) and its confidence (the probability that it is
    right); ``side``: which side of the question it reads."""

    verdict: Verdict
    asserted: str
    corpus_says: str | None
    confidence: float | None
    side: int = 0


def agrees(asserted: str, said: str) -> bool:
    """Whether what the corpus says names what a question asserts: the same spelling, or one holding the other's
    words ("Paris" and "Paris, France"; "the Nobel Prize" and "Nobel Prize in Physics")."""
    a, b = _words(asserted), _words(said)
    return spelled(asserted) == spelled(said) or (a.strip() != "" and b.strip() != "" and (a in b or b in a))


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", bare(text).lower())) + " "


def names_asserted(asserted: str, answer: Answer) -> bool:
    """Whether an answer (its text or one of its forms) agrees with what its side asserts."""
    return any(agrees(asserted, text) for text in (answer.text, *answer.forms))


def verdict(sides: Sequence[tuple[Side, Sequence[Answer]]]) -> YesNo:
    """The verdict (module docstring) of a yes/no question's sides, each with its answers best first."""
    agreeing = [
        (answer.confidence or 0.0, n, answer)
        for n, (side, answers) in enumerate(sides)
        for answer in answers
        if names_asserted(side.asserted, answer)
        and (answer.confidence or 0.0) >= (YES_FROM if side.single else YES_FROM_MANY)
    ]
    if agreeing:
        _, n, answer = max(agreeing, key=lambda found: found[0])
        return YesNo("yes", sides[n][0].asserted, answer.text, answer.confidence, n)
    others = [
        (answers[0].confidence or 0.0, n)
        for n, (side, answers) in enumerate(sides)
        if side.single and answers and not agreeing_any(side.asserted, answers)
    ]
    if others and (best := max(others))[0] >= NO_FROM:
        side, answers = sides[best[1]]
        return YesNo("no", side.asserted, answers[0].text, answers[0].confidence, best[1])
    n = next((n for n, (_, answers) in enumerate(sides) if answers), 0)
    side, answers = sides[n]
    if not answers:
        return YesNo("unknown", side.asserted, None, None, n)
    return YesNo("unknown", side.asserted, answers[0].text, answers[0].confidence, n)


def agreeing_any(asserted: str, answers: Sequence[Answer]) -> bool:
    """Whether any of a side's answers names what it asserts."""
    return any(names_asserted(asserted, answer) for answer in answers)
