"""Why an open-set answer is wrong: where the gold answer ranks among the candidates NPM scored,
and what kind of phrase (name, number, date, other) came first instead.

Pure functions on strings; ``bench/paraphrase.py`` feeds them the ranked candidates of
:meth:`npmcore.answer.inference.NPM.phrases`.
"""

import re
import statistics
import string
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Kind = Literal["name", "number", "date", "other"]
KINDS: tuple[Kind, ...] = ("name", "number", "date", "other")

_MONTHS = frozenset("january february march april may june july august september october november december".split())
_ERAS = frozenset({"bc", "bce", "ad", "ce", "b.c.", "a.d.", "b.c.e.", "c.e."})
_NUMBER_WORDS = frozenset(
    """
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion trillion
dozen first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth
""".split()
)
# lower-case words inside names: "Hugh Blair of Borgue", "Philip Johan von Strahlenberg", "The Gift"
_NAME_PARTICLES = frozenset("of the and de du da di del der van von la le al ibn bin et y".split())
_YEAR = re.compile(r"(c\. ?)?(1\d{3}|20\d{2})s?([–-](1\d{3}|20\d{2}|\d{2}))?")  # 1642, 1920s, 1975–2002
_CENTURY = re.compile(r"\d+(st|nd|rd|th)[ -]century", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def answer_kind(text: str) -> Kind:
    """The kind of a phrase by its surface form: ``"date"`` (a year such as "1642" or "1920s", a
    number with an era such as "333 BC", a month, a century), ``"number"`` (any other digits, or
    number words only: "seven", "fourth"), ``"name"`` (its first word, after particles such as
    "The" or "of", starts with a capital: "Hugh Blair of Borgue", "Athabasca oil sands") or
    ``"other"``. An era alone ("BC") is ``"other"``: a fragment, not a date."""
    words = [w.strip(string.punctuation + "“”‘’") for w in text.split()]
    words = [w for w in words if w]
    lower = [w.lower() for w in words]
    if not words:
        return "other"
    has_digit = any(c.isdigit() for c in text)
    if (
        _MONTHS.intersection(lower)
        or (has_digit and _ERAS.intersection(lower))
        or _CENTURY.search(text)
        or _YEAR.fullmatch(text.strip())
    ):
        return "date"
    if has_digit or all(w in _NUMBER_WORDS for part in lower for w in part.split("-")):
        return "number"
    first = next((w for w in words if w.lower() not in _NAME_PARTICLES), "")
    if first[:1].isupper() and not (len(words) == 1 and first.lower() in _ERAS):
        return "name"
    return "other"


def answer_key(text: str) -> str:
    """A phrase as compared with gold answers: accents stripped, lower case, every punctuation
    mark (Unicode too: "–") a space, articles dropped, whitespace collapsed. Like
    :func:`npmcore.evaluation.metrics.normalize_answer`, and equal for a candidate decoded by an
    uncased tokenizer ("emile cohl") and its gold ("Émile Cohl")."""
    stripped = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    spaced = "".join(" " if unicodedata.category(c).startswith("P") else c for c in stripped.lower())
    return " ".join(_ARTICLES.sub(" ", spaced).split())


def right_answers(candidates: Iterable[str], answers: Sequence[str]) -> np.ndarray:
    """(len(candidates),) bool: each candidate equals a gold answer under :func:`answer_key`."""
    golds = {answer_key(a) for a in answers}
    return np.array([answer_key(text) in golds for text in candidates], dtype=bool)


def gold_rank(candidates: Iterable[str], answers: Sequence[str]) -> int | None:
    """1-based rank of the first candidate (best first) equal to a gold answer under
    :func:`answer_key`; None when none is. Stops reading ``candidates`` at the match."""
    golds = {answer_key(a) for a in answers}
    return next((rank for rank, text in enumerate(candidates, start=1) if answer_key(text) in golds), None)


@dataclass(frozen=True)
class Diagnosis:
    """One fact's outcome."""

    id: str
    gold_kind: Kind
    rank: int | None  # the gold answer's rank among the candidates; None: not a candidate
    candidates: int  # distinct candidate phrases scored
    top: str  # the top-1 answer ("" when there is no candidate)
    exact: bool  # the top-1 answer is right (exact match)

    @property
    def top_kind(self) -> Kind:
        return answer_kind(self.top)


def summarize(diagnoses: Sequence[Diagnosis]) -> dict:
    """Aggregate figures: ``n``, ``exact_match``, ``answer_in_candidates`` (share of facts whose
    gold is a candidate), ``rank_median`` (over those facts; None without any), ``rank_at_1``,
    ``rank_le_3``, ``rank_le_10`` (shares of all facts), ``exact_match_by_kind`` (``{gold kind:
    exact match}``, the kinds the facts have) and ``top1_kind_vs_gold`` (``{gold kind: {top-1 kind:
    count}}``, every kind listed)."""
    if not diagnoses:
        raise ValueError("no diagnoses to summarize")
    n = len(diagnoses)
    ranks = [d.rank for d in diagnoses if d.rank is not None]
    confusion = {gold: dict.fromkeys(KINDS, 0) for gold in KINDS}
    for d in diagnoses:
        confusion[d.gold_kind][d.top_kind] += 1
    return {
        "n": n,
        "exact_match": round(sum(d.exact for d in diagnoses) / n, 4),
        "answer_in_candidates": round(len(ranks) / n, 4),
        "rank_median": statistics.median(ranks) if ranks else None,
        "rank_at_1": round(sum(r == 1 for r in ranks) / n, 4),
        "rank_le_3": round(sum(r <= 3 for r in ranks) / n, 4),
        "rank_le_10": round(sum(r <= 10 for r in ranks) / n, 4),
        "exact_match_by_kind": {
            kind: round(statistics.mean(d.exact for d in diagnoses if d.gold_kind == kind), 4)
            for kind in KINDS
            if any(d.gold_kind == kind for d in diagnoses)
        },
        "top1_kind_vs_gold": confusion,
    }
