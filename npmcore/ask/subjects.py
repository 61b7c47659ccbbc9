"""A statement's own subject, and the statement asked the other way round: its answer put in, its subject masked.

"The capital of Ireland is [MASK]." is about Ireland; answered "Belfast", it is checked as "The capital of [MASK] is
Belfast.": where the corpus's answer to that is Ireland, the answer holds both ways. The subject is read from the
statement's part-of-speech tags (:func:`npmcore.ask.questions.tag`), grammar only:

* its noun phrases (nouns with their adjectives and numbers; a possessive ends one), none touching the mask ("Mars
  has [MASK] moons": moons is what is counted, not what it is about);
* a capitalised phrase holds "of" and what follows ("Lord of the rings", "The Birth of Venus", "Bank of England");
* a relation's noun is no subject: a lower-case phrase after "the" or a possessive and before a preposition ("the
  [capital] of", "the [highest peak] in", "Potassium's [chemical symbol]");
* of what is left, the first phrase with a noun: the statement's grammatical subject where it has one ("Napoleon was
  born in", "IKEA was founded by"), else its object ("[MASK] killed Achilles").

:func:`subject_of` returns None where no phrase is left (nothing to check), and :func:`reversed_statement` the
statement turned round.
"""

import re
from dataclasses import dataclass

from npmcore.ask.questions import Token, tag
from npmcore.mask import MASK

PLACEHOLDER = "MASKTOKEN"  # the mask as one word, so that the tagger reads it as a noun
PHRASE_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS", "JJ", "JJR", "JJS", "CD", "FW", "VBG"})
NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS", "FW"})
DETERMINERS = frozenset({"the", "a", "an"})
RELATION_AFTER = frozenset({"of", "in", "on", "at", "for", "from", "to"})


@dataclass(frozen=True)
class Subject:
    """The phrase a statement is about: its text as written, and its characters in the statement (a determiner
    before it included in ``start``)."""

    text: str
    start: int
    end: int


def subject_of(statement: str) -> Subject | None:
    """The phrase ``statement`` (with one [MASK]) is about (module docstring); None where it has none."""
    if statement.count(MASK) != 1:
        return None
    text = statement.replace(MASK, PLACEHOLDER)
    tokens = tag(text)
    for first, last in _phrases(tokens):
        if _is_relation(tokens, first, last) or not any(t.tag in NOUN_TAGS for t in tokens[first : last + 1]):
            continue
        start = tokens[first - 1].start if first and tokens[first - 1].lower in DETERMINERS else tokens[first].start
        at, shift = text.find(PLACEHOLDER), len(PLACEHOLDER) - len(MASK)

        def back(offset: int) -> int:  # an offset of ``text`` in ``statement``: the placeholder is the longer
            return offset - shift if offset > at else offset

        end = back(tokens[last].end)
        return Subject(statement[back(tokens[first].start) : end], back(start), end)
    return None


def reversed_statement(statement: str, subject: Subject, answer: str) -> str:
    """``statement`` with ``answer`` in its mask's place and its ``subject`` masked: "The capital of [MASK] is
    Belfast." of "The capital of Ireland is [MASK]." answered Belfast."""
    at = statement.find(MASK)
    after = at + len(MASK)
    if subject.start < at:
        return f"{statement[: subject.start]}{MASK}{statement[subject.end : at]}{answer}{statement[after:]}"
    return f"{statement[:at]}{answer}{statement[after : subject.start]}{MASK}{statement[subject.end :]}"


def names_subject(said: str, subject: str) -> bool:
    """Whether an answer names a subject: the same words (case, punctuation and a leading article aside), all of its
    words among the subject's ("Napoleon" of "Napoleon Bonaparte"), or the subject's words first and more after them
    ("Napoleon Bonaparte" of "Napoleon"; not "Northern Ireland" of "Ireland")."""
    a, b = _words(said), _words(subject)
    return bool(a) and bool(b) and (set(a) <= set(b) or a[: len(b)] == b)


def _words(text: str) -> list[str]:
    words = re.findall(r"\w+", text.lower())
    return words[1:] if words and words[0] in DETERMINERS else words


def _phrases(tokens: list[Token]) -> list[tuple[int, int]]:
    """(first, last) tokens of each noun phrase, none touching the mask; a capitalised one holds "of" and what
    follows ("Lord of the rings")."""
    runs, k = [], 0
    while k < len(tokens):
        if tokens[k].tag in PHRASE_TAGS and tokens[k].text != PLACEHOLDER:
            first = k
            while k + 1 < len(tokens) and tokens[k + 1].tag in PHRASE_TAGS and tokens[k + 1].text != PLACEHOLDER:
                k += 1
            runs.append([first, k])
        k += 1
    joined: list[list[int]] = []
    for run in runs:
        if joined and _joins(tokens, joined[-1], run):
            joined[-1][1] = run[1]
        else:
            joined.append(run)
    near = {k for k, t in enumerate(tokens) if t.text == PLACEHOLDER}
    return [(a, b) for a, b in joined if not ({a - 1, b + 1} & near)]


def _joins(tokens: list[Token], before: list[int], after: list[int]) -> bool:
    """Whether ``before`` "of" (the) ``after`` is one name: ``before`` is a noun that starts with a capital."""
    between = [t.lower for t in tokens[before[1] + 1 : after[0]]]
    noun = any(t.tag in NOUN_TAGS for t in tokens[before[0] : before[1] + 1])
    return between in (["of"], ["of", "the"]) and noun and tokens[before[0]].text[:1].isupper()


def _is_relation(tokens: list[Token], first: int, last: int) -> bool:
    """A relation's noun: lower case, after a determiner or a possessive and before a preposition or a verb
    ("the capital of", "Potassium's chemical symbol is")."""
    lowered = all(t.text[:1].islower() for t in tokens[first : last + 1])
    before = tokens[first - 1] if first else None
    after = tokens[last + 1] if last + 1 < len(tokens) else None
    if not lowered or before is None or after is None:
        return False
    if before.tag == "POS":
        return True
    return before.lower in DETERMINERS and after.lower in RELATION_AFTER
