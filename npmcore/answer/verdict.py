"""A yes/no question's verdict from what the corpus says: yes where the corpus's answer to the statements that mask
what the question asserts (:mod:`npmcore.ask.yes_no`) is that part, no where it is another.

Imports the shared modules' spelling of names (``npmcore.vocab``).
"""

import re
from dataclasses import dataclass
from typing import Literal

from npmcore.ask.yes_no import bare
from npmcore.vocab import spelled


@dataclass(frozen=True)
class YesNo:
    """The reply to a yes/no question: ``verdict`` yes where the corpus's answer is the part asserted, no where it is
    another, with that answer and its confidence (the probability that it is right)."""

    verdict: Literal["yes", "no"]
    asserted: str
    corpus_says: str
    confidence: float | None


def agrees(asserted: str, said: str) -> bool:
    """Whether what the corpus says names what a question asserts: the same spelling, or one holding the other's
    words ("Paris" and "Paris, France"; "the Nobel Prize" and "Nobel Prize in Physics")."""
    a, b = _words(asserted), _words(said)
    return spelled(asserted) == spelled(said) or (a.strip() != "" and b.strip() != "" and (a in b or b in a))


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", bare(text).lower())) + " "


def verdict(asserted: str, said: str, forms: tuple[str, ...], confidence: float | None) -> YesNo:
    """Yes where the corpus's answer (``said``, or another form of it) agrees with the part asserted, else no."""
    yes = any(agrees(asserted, s) for s in (said, *forms))
    return YesNo("yes" if yes else "no", asserted, said, confidence)
