"""One answer per thing named: a query's candidate phrases that spell one name at different lengths pooled into one.

NPM scores every n-gram of its passages, so a name the passages write as "Vincent van Gogh" comes back as "Gogh"
(0.60), "van Gogh" (0.26) and "Vincent van Gogh" (0.08): one answer split in three. Among a query's best
:data:`POOLED_FROM` phrases (ranked), a phrase joins a longer one that names the same thing (its *holder*) when

* the holder's tokens end with the phrase's ("Alexander Fleming" holds "Fleming", "9 November 1989" holds "1989"):
  words before a name qualify it, words after it name another thing ("United States Army");
* the two are found at the same place: a position of the phrase is the end of a position of the holder;
* and there the words the holder adds are name words (:func:`names_more`): capitalised ("Sir Alexander", "Vincent
  van"), or, before a number, numbers and months ("9 November"); not "composer", "Padua and" or "1947".

A phrase held by several joins the best-ranked one (so "Korea" joins one of "North Korea" and "South Korea", never
both together); phrases that spell the same text whatever their case and punctuation join the best-ranked of them.
Each pool is one answer: its score is the sum of its members' (their share of the ranking's softmax), its score's
parts those of its best member. It is shown in the form its positions say it is written in: a member's own score
with the scores of the shorter members it absorbs, those found inside it at :data:`ABSORBED` of their positions or
more ("Gogh" is nearly always "van Gogh", "Reykjavík" seldom "Greater Reykjavík"), the highest shown
(chosen on the dev sets, docs/evaluate.md); the other members are listed as its forms.

A phrase that is a name and a clause after it ("Nairobi, which is the 14th largest city in Africa") is that name
(:func:`head`): it spells the name's key, and is shown as the name.

Pure functions on :class:`~npmcore.answer.phrases.Phrases`; imports the answer stage's phrases and the function words
of :mod:`npmcore.vocab`.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npmcore.answer.phrases import Phrases
from npmcore.vocab import FUNCTION_WORDS

POOLED_FROM = 50  # the best phrases of a query looked at for forms of one name (as many as answers are kept from)
ABSORBED = 0.5  # a shorter form found inside a longer one at this share of its positions is shown as the longer
MONTHS = frozenset("january february march april may june july august september october november december".split())

# what starts a clause after a name: "Nairobi, which is the 14th largest city in Africa", "Nairobi (Swahili: …)"
CLAUSE = re.compile(
    r",\s+(?:which|who|whom|whose|where|when|while|that|and|or|but|the|a|an|its|his|her|their|located|born)\b|\s+\("
)

# (holder rank, held rank, the rows of their positions where the holder ends with the held phrase) -> whether the
# holder's added words name more of the held phrase, at one of them
NamesMore = Callable[[int, int, list[tuple[int, int]]], bool]


@dataclass(frozen=True)
class Pooled:
    """A query's phrases, pooled: ``phrases`` one row per pool, best first (scores summed, positions those of the form
    shown), and of each row the ranks of its members in the phrases it was pooled from, ``source`` (the form shown
    first, then the others best first), and its kind as the datastore says it where one was asked (``kinds``: +1 of
    the kind, -1 of another, 0 unknown or not looked up: :mod:`npmcore.answer.kinds`)."""

    phrases: Phrases
    members: tuple[tuple[int, ...], ...]
    source: Phrases
    kinds: np.ndarray


def names_more(before: str, added: str, held: str) -> bool:
    """Whether the words ``added`` before a name ``held``, as the passage writes them after ``before``, are more of
    the same name: the name capitalised or a number; the words added capitalised (a short lowercase particle inside
    them aside, "Vincent van", no function word: "Padua and", "Wali of Egypt and"), without punctuation but an
    initial's full stop ("J. R. R.") and not opening a sentence ("Composer Bedřich Smetana"); before a number, numbers
    and months only ("9 November" 1989)."""
    words = added.split()
    if not words or not (held[:1].isupper() or held[:1].isdigit()):
        return False
    if held[:1].isdigit():
        return all(w.strip(",").isdigit() or w.lower() in MONTHS for w in words)
    if not before.strip() or before.rstrip()[-1] in '.!?:;"“(':
        return False
    for k, word in enumerate(words):
        initial = len(word) == 2 and word[0].isupper() and word[1] == "."
        if not initial and not re.fullmatch(r"[^\W\d_]+(?:[-'’][^\W\d_]+)*", word):
            return False
        if word.lower() in FUNCTION_WORDS or (not word[0].isupper() and (k == 0 or len(word) > 3)):
            return False
    return True


def head(text: str) -> str:
    """A phrase without a clause that follows its name ("Nairobi, which is the 14th largest city in Africa" ->
    "Nairobi"): the answer it is a form of."""
    found = CLAUSE.search(text)
    return text[: found.start()] if found is not None and found.start() > 0 else text


def holders(token_ids: np.ndarray, spans_of: list[np.ndarray], keys: list[str], more: NamesMore) -> np.ndarray:
    """(m,) the phrase that holds each of ``m`` ranked phrases (module docstring), -1 where none does.

    Args:
        token_ids: (m, l) the phrases' token ids, -1 padded.
        spans_of: each phrase's positions, (n_i, 2) first and last global token ids.
        keys: each phrase's :func:`~npmcore.vocab.spelled` text: equal keys spell one thing.
        more: whether, at one of the positions they share, a holder's added words name more of the held phrase.
    """
    m = len(token_ids)
    tokens = [tuple(int(t) for t in row[row >= 0]) for row in token_ids]
    holder = np.full(m, -1)
    for short in range(m):
        n = len(tokens[short])
        for long in range(m):  # best-ranked first: the first that holds it is its holder
            if long == short:
                continue
            if keys[long] == keys[short] and long < short:
                holder[short] = long
                break
            extra = len(tokens[long]) - n
            if extra <= 0 or tokens[long][extra:] != tokens[short]:
                continue
            shared = shared_positions(spans_of[short], spans_of[long], extra)
            if shared and more(long, short, shared):
                holder[short] = long
                break
    return holder


def shared_positions(short: np.ndarray, long: np.ndarray, extra: int) -> list[tuple[int, int]]:
    """(row of the long phrase's position, row of the short one's) where the long one ends with the short one (their
    last tokens the same, the long one starting ``extra`` tokens before)."""
    ends = {(int(a), int(b)): row for row, (a, b) in enumerate(long)}
    return [
        (ends[(int(a) - extra, int(b))], row) for row, (a, b) in enumerate(short) if (int(a) - extra, int(b)) in ends
    ]


def inside_share(short: np.ndarray, long: np.ndarray, extra: int) -> float:
    """The share of the short phrase's positions that are the end of a position of the long one."""
    return len(shared_positions(short, long, extra)) / max(len(short), 1)


def pool(phrases: Phrases, keys: list[str], more: NamesMore, top: int = POOLED_FROM) -> Pooled:
    """The phrases (ranked, best first) pooled into one answer per thing named, among the first ``top``; the phrases
    after them are each their own pool.

    Args:
        keys: the :func:`~npmcore.vocab.spelled` text of each of the first ``min(top, m)`` phrases.
        more: whether a holder's added words name more of the held phrase (:func:`names_more` of their texts).
    """
    m = len(phrases.scores)
    head = min(top, m)
    by_phrase = np.argsort(phrases.phrase_of_span, kind="stable")  # positions grouped by phrase, in their order
    bounds = np.searchsorted(phrases.phrase_of_span[by_phrase], np.arange(head + 1))
    spans_of = [phrases.spans[by_phrase[bounds[rank] : bounds[rank + 1]]] for rank in range(head)]
    holder = holders(phrases.token_ids[:head], spans_of, keys[:head], more)
    root = np.arange(head)
    for rank in range(head):  # each phrase's outermost holder names its pool
        while holder[root[rank]] >= 0:
            root[rank] = holder[root[rank]]
    groups: dict[int, list[int]] = {}
    for rank in range(head):
        groups.setdefault(int(root[rank]), []).append(rank)
    lengths = (phrases.token_ids >= 0).sum(axis=1)
    numbers = [key[:1].isdigit() for key in keys[:head]]  # a date is shown as its best form: its year, its day
    pools = [_shown_first(members, phrases.scores, holder, spans_of, lengths, numbers) for members in groups.values()]
    tail = np.arange(head, m)  # the phrases after the first top: each its own pool
    score = np.concatenate([[phrases.scores[p].sum() for p in pools], phrases.scores[head:]])
    order = np.argsort(-score, kind="stable")
    members = [tuple(p) for p in pools] + [(rank,) for rank in tail.tolist()]
    shown = np.concatenate([[p[0] for p in pools], tail]).astype(np.int64)[order]
    best = np.concatenate([[min(p) for p in pools], tail]).astype(np.int64)[order]
    row_of_shown = np.full(m, -1)
    row_of_shown[shown] = np.arange(len(order))
    return Pooled(
        Phrases(
            phrases.token_ids[shown],
            score[order],
            phrases.spans,
            phrases.span_scores,
            row_of_shown[phrases.phrase_of_span],  # a form not shown: -1, its positions read by no answer
            None if phrases.parts is None else phrases.parts[best],
        ),
        tuple(members[i] for i in order),
        phrases,
        np.zeros(len(order), dtype=np.int64),
    )


def _shown_first(
    members: list[int],
    scores: np.ndarray,
    holder: np.ndarray,
    spans_of: list[np.ndarray],
    lengths: np.ndarray,
    numbers: list[bool],
) -> list[int]:
    """A pool's members (ranks), the form it is shown in first (the highest own score with what it absorbs: module
    docstring; a number absorbed by none), the others best first."""
    if len(members) == 1:
        return members
    shown_as = {rank: scores[rank] for rank in members}
    for rank in sorted(members, key=lambda r: lengths[r]):  # the shortest first: what it absorbed moves on with it
        up = int(holder[rank]) if rank < len(holder) else -1
        extra = lengths[up] - lengths[rank] if up >= 0 else 0
        if (
            up >= 0
            and extra > 0
            and not numbers[rank]
            and inside_share(spans_of[rank], spans_of[up], extra) >= ABSORBED
        ):
            shown_as[up] += shown_as[rank]
    shown = max(members, key=lambda rank: (shown_as[rank], -rank))
    return [shown, *sorted((rank for rank in members if rank != shown), key=lambda rank: -scores[rank])]
