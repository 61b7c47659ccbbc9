"""A question read: its words tagged with their part of speech (TextBlob's tagger: Pattern's Brill lexicon and context
rules, inside its wheel; a few tags the rules know better), its wh-phrase ("which river", "how many moons", "in which
year") and the kind of answer it asks for (a place, a time, a number: :func:`fits`), its verbs inflected with
lemminflect's tables (inside its wheel too). What :mod:`npmcore.ask.statements` rewrites a question with;
nothing is downloaded.
"""

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from npmcore.mask import MASK

WH_WORDS = frozenset({"who", "whom", "whose", "what", "which", "when", "where", "how", "why"})
BE = frozenset({"is", "are", "was", "were", "am", "'s", "’s", "'re"})
DO = {"do": "VBP", "does": "VBZ", "did": "VBD"}  # and the tag of the verb it stands before, as the statement says it
HAVE = frozenset({"has", "have", "had"})
MODALS = frozenset({"can", "could", "will", "would", "shall", "should", "may", "might", "must"})
NOUNISH = frozenset({"JJ", "JJR", "JJS", "NN", "NNS", "NNP", "NNPS", "CD", "VBG", "POS", "FW"})
PHRASE_START = frozenset({"DT", "NNP", "NNPS", "PRP$", "PRP", "CD", "IN", "TO", "JJ", '"'})
TIME_NOUNS = frozenset({"year", "date", "day", "month", "century", "decade", "time", "era", "age", "period"})
PLACE_NOUNS = frozenset(
    {"city", "country", "town", "state", "place", "county", "province", "region", "continent", "island", "village"}
)
Expect = Literal["place", "time", "number"]  # the kinds of answer a wh-phrase may ask for (fits)
PERSON, PLACE = "person", "place"  # what "who" and "where" ask for, as the datastore's articles say it (kinds)
# nouns that name no kind of thing: "what is the name of X", "what kind of animal" (its kind is the animal)
GENERIC_NOUNS = frozenset("name kind type sort one thing part member example form word term way".split())
MONTHS = frozenset("january february march april may june july august september october november december".split())
NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion dozen "
    "half once twice".split()
)
TOKEN_PATTERN = re.compile(
    r"(?i)\w+?(?=n['’]t\b)|n['’]t\b|['’](?:s|re|m|ve|ll|d)\b|\w+(?:[-.'’](?!(?:s|re|m|ve|ll|d)\b)\w+)*|[^\w\s]"
)


@dataclass(frozen=True)
class Token:
    text: str
    tag: str  # Penn Treebank
    start: int  # character offsets in the question
    end: int

    @property
    def lower(self) -> str:
        return self.text.lower()


@dataclass(frozen=True)
class WhPhrase:
    kind: str  # who (who, whom, what, which: a thing or a person), whose, where, when, how-many, how-much, how-adj
    end: int  # the token after it
    noun: tuple[Token, ...] = ()  # "which [river]", "how many [moons]", "whose [painting]", "which [planet's orbit]"
    preposition: Token | None = None  # fronted: "[In] which year", "[To] whom"
    person: bool = False  # "who", "whom", "whose": it asks for a person

    @property
    def expects(self) -> Expect | None:
        """The kind of answer it asks for: a place ("where", "which city"), a time ("when", "what year"), a number
        ("how many", "how old"); None where it does not say."""
        head = self.noun[-1].lower if self.noun else ""
        if self.kind == "where" or head in PLACE_NOUNS:
            return "place"
        if self.kind == "when" or head in TIME_NOUNS:
            return "time"
        return "number" if self.kind in ("how-many", "how-adj") else None

    @property
    def asks_for(self) -> str | None:
        """The kind of thing it asks for, as the datastore's articles would say it (:mod:`npmcore.answer.kinds`): a
        person ("who"), a place ("where"), or its noun ("which river": river; "which planet's orbit": planet); None
        where it names no kind, or asks for a time or a number (:attr:`expects`)."""
        if self.person:
            return PERSON
        if self.kind == "where":
            return PLACE
        owner = next((k for k, t in enumerate(self.noun) if t.tag == "POS"), len(self.noun))
        if owner == 0 or self.expects in ("time", "number"):
            return None
        words = [t.lower for t in self.noun[:owner]]
        of = words.index("of") if "of" in words[1:] else None  # "book of the Bible": a book; "kind of animal": animal
        head = noun_lemma(words[of - 1] if of is not None and words[of - 1] not in GENERIC_NOUNS else words[-1])
        return None if head in GENERIC_NOUNS or not head.isalpha() else head

    def gap(self, text: str) -> str:
        """What takes the phrase's place: the mask, or "[MASK]'s painting" for a possessive one."""
        if self.kind == "whose":
            return f"{MASK}'s {span(text, self.noun)}"
        owner = next((k for k, t in enumerate(self.noun) if t.tag == "POS"), None)  # "which planet's orbit"
        return MASK if owner is None else f"{MASK}{span(text, self.noun[owner:])}"


def fits(answer: str, expects: Expect | None) -> bool:
    """Whether ``answer`` is of the kind ``expects``: a place has no digit, a time a digit or a month, a number a
    digit or a number's word ("two", "dozen"); any answer fits None."""
    words = set(re.findall(r"[a-z]+", answer.lower()))
    digit = any(c.isdigit() for c in answer)
    if expects == "place":
        return not digit
    if expects == "time":
        return digit or bool(words & MONTHS)
    if expects == "number":
        return digit or bool(words & NUMBER_WORDS)
    return True


def tag(text: str) -> list[Token]:
    """``text``'s tokens, tagged (contractions apart: "what's" -> what 's; "didn't" -> did n't)."""
    found = list(TOKEN_PATTERN.finditer(text))
    if not found:
        return []
    tags = _tagger()([m.group() for m in found])
    tokens = [Token(m.group(), t, m.start(), m.end()) for m, (_, t) in zip(found, tags, strict=True)]
    return [_retagged(tokens, i) for i in range(len(tokens))]


def _retagged(tokens: list[Token], i: int) -> Token:
    """The tagger's tag, where the rules know better: a contraction's verb ("what's"), quotes, numbers, the verb
    after "who"."""
    t = tokens[i]
    retag = None
    if t.lower in ("'s", "’s") and i > 0 and tokens[i - 1].lower in WH_WORDS:
        retag = "VBZ"
    elif t.text in ("“", "”", "„", "«", "»"):
        retag = '"'
    elif t.text.isdigit():
        retag = "CD"
    elif i > 0 and tokens[i - 1].lower == "who" and t.tag in ("NN", "NNS", "JJ") and known_verb_lemmas(t.lower):
        retag = "VBD"  # "Who [shot] X?"
    return t if retag is None else Token(t.text, retag, t.start, t.end)


@functools.cache
def _tagger():
    """Pattern's tagger of TextBlob, on tokens (imported on a first question: a second of importing NLTK)."""
    from textblob.en import parser

    return parser.find_tags


def span(text: str, tokens: Sequence[Token]) -> str:
    return text[tokens[0].start : tokens[-1].end] if tokens else ""


def wh_phrase(tokens: list[Token], at: int, preposition: Token | None) -> WhPhrase | None:
    """The wh-phrase starting at token ``at``, None where the rules do not answer it (why, how did)."""
    word = tokens[at].lower
    nxt = tokens[at + 1] if at + 1 < len(tokens) else None
    if word in ("who", "what") and nxt is not None and nxt.lower == "or" and at + 2 < len(tokens):
        if tokens[at + 2].lower in ("who", "what"):  # "Who or what replaced X?"
            return WhPhrase("who", at + 3, preposition=preposition)
    if word in ("who", "whom"):
        return WhPhrase("who", at + 1, preposition=preposition, person=True)
    if word in ("when", "where"):
        return WhPhrase(word, at + 1, preposition=preposition)
    if word == "how" and nxt is not None:
        if nxt.lower in ("many", "much"):
            # "how many [matches]": the word after "many" is a noun, however tagged, unless auxiliary or preposition
            noun_follows = at + 2 < len(tokens) and not is_auxiliary(tokens[at + 2]) and tokens[at + 2].tag != "IN"
            end = _wh_noun_end(tokens, at + 2, first_is_noun=noun_follows)
            kind = "how-many" if end > at + 2 or nxt.lower == "many" else "how-much"
            return WhPhrase(kind, end, tuple(tokens[at + 2 : end]), preposition)
        if nxt.tag in ("JJ", "RB", "JJR"):
            return WhPhrase("how-adj", at + 2, (nxt,), preposition)
        return None
    if word in ("what", "which", "whose"):
        start = at + 2 if word == "which" and nxt is not None and nxt.lower == "of" else at + 1  # "which of the"
        end = _wh_noun_end(tokens, start)
        noun = tuple(t for t in tokens[at + 1 : end] if t.tag != "DT")
        if word == "whose" and not noun:
            return None
        return WhPhrase("whose" if word == "whose" else "who", end, noun, preposition, person=word == "whose")
    return None


def noun_end(tokens: Sequence[Token], i: int) -> int:
    """The end of the noun phrase's words from token ``i`` (determiners, adjectives, nouns, numbers, possessives)."""
    while i < len(tokens) and (tokens[i].lower not in BE or tokens[i].tag == "POS"):
        modifier = (  # "protected area", not "work [made] paleontology"
            tokens[i].tag in ("VBN", "VBG")
            and i + 1 < len(tokens)
            and tokens[i + 1].tag in ("NN", "NNS")
            and tokens[i - 1].tag not in ("NN", "NNS", "NNP", "NNPS")  # (at i == 0 Python's [-1]: the last token)
        )
        if not (tokens[i].tag in NOUNISH or tokens[i].tag in ("DT", '"') or modifier):  # "protected area", a title
            break
        i += 1
    return i


def _wh_noun_end(tokens: list[Token], i: int, first_is_noun: bool = False) -> int:
    """The end of a wh-phrase's noun phrase from token ``i``: its words (the first a noun whatever its tag where
    ``first_is_noun``), joined by "of", "and" or "or", and a phrase of a preposition that a verb follows ("how many
    floors above the ground has X"); a verb the tagger took for a plural noun is given back ("What river flows into
    X?")."""
    end = noun_end(tokens, i + 1 if first_is_noun else i)
    while i < end < len(tokens):
        joint = tokens[end]
        # "what kind of [lock]": the word after "of" is a noun, however tagged, unless it is an auxiliary
        noun_after_of = end + 1 < len(tokens) and joint.lower == "of" and not is_auxiliary(tokens[end + 1])
        after = noun_end(tokens, end + 2 if noun_after_of else end + 1)
        joins = joint.lower in ("of", "and", "or") or (
            joint.tag == "IN" and after < len(tokens) and is_verbal(tokens[after])
        )
        if not joins or after == end + 1:
            break
        end = after
    # "river [flows] into", "database [indexes] X": a new phrase follows it (never the phrase's first word)
    for k in range(i + 1, end):
        if is_verb_tagged_noun(tokens[k]) and (k + 1 == len(tokens) or tokens[k + 1].tag in PHRASE_START):
            return k
    return end


def is_auxiliary(t: Token) -> bool:
    return t.lower in BE or t.lower in DO or t.lower in HAVE or t.lower in MODALS


def is_verbal(t: Token) -> bool:
    return t.tag.startswith("VB") or t.tag == "MD" or is_auxiliary(t)


def is_verb_tagged_noun(t: Token) -> bool:
    """Whether ``t`` is a present verb tagged as a plural noun ("flows", "indexes")."""
    return t.tag == "NNS" and t.lower.endswith("s") and bool(known_verb_lemmas(t.lower))


@functools.cache
def known_verb_lemmas(word: str) -> tuple[str, ...]:
    """Every lemma ``word`` is a form of, as a verb, in lemminflect's tables ("found": find, found); () when it is no
    verb's there (a truthy result says ``word`` is a known verb form)."""
    from lemminflect import getAllLemmas

    return getAllLemmas(word, upos="VERB").get("VERB", ())


@functools.cache
def known_noun_lemmas(word: str) -> tuple[str, ...]:
    """Every lemma ``word`` is a form of, as a common noun, in lemminflect's tables ("rivers": river); () when it is
    none there (a name: "japan", "mozart")."""
    from lemminflect import getAllLemmas

    return getAllLemmas(word, upos="NOUN").get("NOUN", ())


@functools.cache
def known_adjective_lemmas(word: str) -> tuple[str, ...]:
    """Every lemma ``word`` is a form of, as an adjective, in lemminflect's tables ("highest": high); () when none."""
    from lemminflect import getAllLemmas

    return getAllLemmas(word, upos="ADJ").get("ADJ", ())


@functools.cache
def noun_lemma(word: str) -> str:
    """A noun's singular, lowercased ("rivers" -> river, "species"): lemminflect's, the word itself where it has
    none."""
    from lemminflect import getLemma

    found = getLemma(word.lower(), upos="NOUN")
    return found[0].lower() if found else word.lower()


@functools.cache
def verb_base_form(word: str) -> str:
    """``word``'s base form as a verb, lowercased: lemminflect's first lemma of it (from its tables, or guessed by its
    rules for a word they lack: "found" -> find), the word itself where there is none."""
    from lemminflect import getLemma

    found = getLemma(word.lower(), upos="VERB")
    return found[0] if found else word.lower()


@functools.cache
def inflected(lemma: str, tag: str) -> str:
    """``lemma`` in Penn ``tag`` (VBD sang, VBZ has, VBN written, VBP the lemma)."""
    from lemminflect import getInflection

    if tag == "VBP":
        return lemma
    found = getInflection(lemma, tag=tag)
    return found[0] if found else lemma


STATED_NOUN = (
    re.compile(r"(?i)^(?:the|a|an)\s+([\w\s'-]+?)\s+(?:of|in|for|on|to|from|at|that|which|who)\b.*?"
               r"\b(?:is|was|are|were)\s+(?:the\s+|an?\s+)?\[MASK\]"),
    re.compile(r"(?i)^\[MASK\]\s+(?:is|was|are|were)\s+(?:the|an?)\s+([\w\s'-]+?)\s+(?:of|in|for|on|to|from|at|that)\b"),
)  # fmt: skip


def stated_kind(statement: str) -> str | None:
    """The kind of thing a statement's mask stands for, where it says it as a copula's noun: "The capital of Australia
    is [MASK]." and "[MASK] is the longest river in Asia." (capital, river); None elsewhere."""
    for pattern in STATED_NOUN:
        found = pattern.search(statement.strip())
        if found:
            head = noun_lemma(found.group(1).split()[-1])
            return None if head in GENERIC_NOUNS or head in TIME_NOUNS or not head.isalpha() else head
    return None
