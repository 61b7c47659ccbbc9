"""Verbatim cloze facts: sentences of a corpus copied word for word, one phrase masked.

The test of whether NPM reads its evidence: the sentence a query comes from is in the corpus
itself, so the right answer is the phrase whose passage says exactly what the query says
around the mask. Each fact masks one phrase of one of four kinds (the kinds of
:func:`npmcore.evaluation.diagnostics.answer_kind`):

* ``name``: a run of one to three capitalised words, not the sentence's first word;
* ``date``: a year (1000 to 2099);
* ``number``: any other number (digits, with inner "," or ".");
* ``other``: a lower-case content word of at least four letters.

A phrase is maskable only where an open-set answer could be right: it occurs once in its
sentence and shares no content word with the rest of it (NPM answers never repeat the query's
words, :func:`npmcore.vocab.content_words_of`). Sentences are those of
:func:`npmcore.corpus.blocks.sentence_starts` inside one block, 8 to 60 words, starting with a capital
letter and ending with ".", "!" or "?". A seeded draw takes ``per_kind`` facts of each kind,
one per sentence, never a sentence of ``exclude`` (another split's).
"""

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from npmcore.corpus.blocks import sentence_starts
from npmcore.evaluation.diagnostics import KINDS, Kind, answer_kind
from npmcore.mask import MASK
from npmcore.vocab import FUNCTION_WORDS, content_words_of

MIN_WORDS, MAX_WORDS = 8, 60
NAME_WORDS = 3  # the longest masked name, in words
_WORD = re.compile(r"[^\W_]+(?:['’.,-][^\W_]+)*")  # letters and digits, inner apostrophes, hyphens, "." and ","
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_YEAR = re.compile(r"1\d{3}|20\d{2}")
_LOWER = re.compile(r"[^\W\d_A-Z]{4,}")  # a lower-case word of letters only


@dataclass(frozen=True)
class Fact:
    id: str
    query: str  # the sentence with its phrase replaced by [MASK]
    answers: list[str]  # the phrase as the sentence writes it
    title: str
    evidence: str  # the sentence
    kind: Kind
    block_id: str


def sentences(text: str) -> list[str]:
    """The sentences of a block's text that make good queries (see the module's rules)."""
    starts = sentence_starts(text)
    out = []
    for lo, hi in zip(starts, [*starts[1:], len(text)]):
        s = text[lo:hi].strip()
        if "\n" in s or any(c in s for c in "[]{}|=<>"):
            continue
        if s[:1].isupper() and s.endswith((".", "!", "?")) and MIN_WORDS <= len(s.split()) <= MAX_WORDS:
            out.append(s)
    return out


def maskable(sentence: str) -> list[tuple[Kind, int, int]]:
    """(kind, start, end) of every phrase of ``sentence`` a fact may mask (character offsets)."""
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(sentence)]
    found: list[tuple[Kind, int, int]] = []
    for n, (lo, hi, word) in enumerate(words):
        if _YEAR.fullmatch(word):
            found.append(("date", lo, hi))
        elif _NUMBER.fullmatch(word):
            found.append(("number", lo, hi))
        elif _LOWER.fullmatch(word) and word.islower() and word not in FUNCTION_WORDS and answer_kind(word) == "other":
            found.append(("other", lo, hi))
        elif n > 0 and _capitalised(word) and not _joined(sentence, words[n - 1], words[n]):
            end = n  # a run of capitalised words joined by single spaces opens here
            while (
                end + 1 < len(words)
                and _capitalised(words[end + 1][2])
                and _joined(sentence, words[end], words[end + 1])
            ):
                end += 1
            if end - n < NAME_WORDS:
                found.append(("name", lo, words[end][1]))
    return [(kind, lo, hi) for kind, lo, hi in found if _answerable(sentence, lo, hi, kind)]


def _capitalised(word: str) -> bool:
    return word[:1].isupper() and word.isalpha()


def _joined(sentence: str, left: tuple[int, int, str], right: tuple[int, int, str]) -> bool:
    return sentence[left[1] : right[0]] == " " and _capitalised(left[2])


def _answerable(sentence: str, lo: int, hi: int, kind: Kind) -> bool:
    """Once in the sentence, of its kind, and no content word of it anywhere else in the sentence."""
    phrase = sentence[lo:hi]
    rest = sentence[:lo] + " " + sentence[hi:]
    return (
        sentence.count(phrase) == 1
        and answer_kind(phrase) == kind
        and content_words_of(phrase).isdisjoint(content_words_of(rest))
    )


def draw_facts(
    blocks: Iterable[tuple[str, str, str]], per_kind: int, seed: int, prefix: str, exclude: frozenset[str] = frozenset()
) -> list[Fact]:
    """A seeded draw of ``per_kind`` facts of each kind from ``blocks`` ((block_id, title, text)),
    one per sentence, none of the sentences in ``exclude``; ids ``{prefix}-{n}`` in draw order
    (kinds interleaved).

    Raises:
        ValueError: the blocks hold too few maskable sentences of some kind.
    """
    pool: dict[Kind, list[tuple[str, str, str, int, int]]] = {kind: [] for kind in KINDS}
    for block_id, title, text in blocks:
        for sentence in sentences(text):
            if sentence in exclude:
                continue
            for kind, lo, hi in maskable(sentence):
                pool[kind].append((block_id, title, sentence, lo, hi))
    rng = random.Random(seed)
    used: set[str] = set()
    drawn: dict[Kind, list[Fact]] = {kind: [] for kind in KINDS}
    for kind in KINDS:
        # ordered by page id within its wiki first (a block id is "{wiki}:{page id}#{n}" for wiki pages): the
        # draw of sets made before pages were keyed by their wiki stays the same
        candidates = sorted(pool[kind], key=lambda c: (c[0].rsplit(":", 1)[-1], c))
        rng.shuffle(candidates)
        for block_id, title, sentence, lo, hi in candidates:
            if len(drawn[kind]) == per_kind:
                break
            if sentence in used:
                continue
            used.add(sentence)
            query = sentence[:lo] + MASK + sentence[hi:]
            drawn[kind].append(Fact("", query, [sentence[lo:hi]], title, sentence, kind, block_id))
        if len(drawn[kind]) < per_kind:
            raise ValueError(f"only {len(drawn[kind])} maskable sentences of kind {kind!r}, {per_kind} asked for")
    interleaved = [fact for row in zip(*drawn.values(), strict=True) for fact in row]
    return [replace(f, id=f"{prefix}-{n}") for n, f in enumerate(interleaved, start=1)]
