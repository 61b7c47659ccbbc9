"""A keyword query as the statements it stands for: "capital of australia" -> "The capital of australia is [MASK].",
"mona lisa painter" -> "Mona lisa was painted by [MASK].", "einstein birthplace" -> "Einstein was born in [MASK].".

A keyword query names a relation and what it is of, with no verb: the relation is a noun at its end ("penicillin
discoverer", "rhenium atomic number": the last noun with the adjectives before it, and "birth" or "death" before
it: "mozart birth date"), at its start ("currency japan") or before "of" or "in" ("capital of australia", "gas in
glowing signs"); a subject and "born" or "died" ("einstein born") asks where or when. Each reading gives statements:

* "The {relation} of {subject} is [MASK]." (with the query's own "of"/"in" where it has one);
* an agent noun whose verb is known to lemminflect ("painter", "discoverer", "founder", "inventor", "composer"):
  "{subject} was {done} by [MASK]." (a person is asked for);
* a birth or a death ("birthplace", "place of birth"): "{subject} was born in [MASK]." (a place; a time for "birth
  date", "year of death");
* a relation of time ("year", "date"): "{subject} was in [MASK]." (a time);
* a place ("petra country", "forbidden city location"): "{subject} is in [MASK]."; who made it ("author", "artist"):
  "{subject} is by [MASK]." ("X is a novel by Y").

Each statement is also asked the other ways passages say it (:func:`npmcore.ask.statements.other_ways`: "[MASK] is
the capital of australia."), and the query as the thing it names ("The red planet is [MASK]."). The relation's noun
is the kind of thing asked for (:mod:`npmcore.answer.kinds`). Every query is also asked as the paper asks a question,
and the answers of the most confident are shown (:mod:`npmcore.answer.answering`). Imports the answer stage's reading
of questions and statements.
"""

import re
from dataclasses import dataclass

from npmcore.ask.questions import (
    GENERIC_NOUNS,
    PERSON,
    PLACE,
    PLACE_NOUNS,
    TIME_NOUNS,
    Expect,
    Token,
    inflected,
    known_adjective_lemmas,
    known_noun_lemmas,
    known_verb_lemmas,
    noun_lemma,
    tag,
)
from npmcore.ask.statements import other_ways
from npmcore.mask import MASK

BIRTH = re.compile(r"(?i)\bbirth ?place\b|\bplace of birth\b|\bborn\b|\bbirth\b|\bhometown\b")
DEATH = re.compile(r"(?i)\bdeath ?place\b|\bplace of death\b|\bdied\b|\bdeath\b")
NO_SUBJECT_END = frozenset({"IN", "TO", "DT", "CC"})  # tags (their first two letters) no subject ends with
CLASSES = frozenset({"type", "kind", "class", "group", "category", "family", "sort"})  # a class of what a thing is
NUMBER_NOUNS = frozenset({"number", "population", "height", "length", "age", "count", "weight", "speed", "area"})
MODIFIERS = frozenset({"birth", "death"})  # nouns that name a relation with the noun after them ("birth date")
LIVED = re.compile(r"(?i)^(.+?)\s+(born|died)$")  # "einstein born": where or when


@dataclass(frozen=True)
class Reading:
    """A keyword query read one way: a statement it stands for, the kind of answer it expects and of thing it asks
    for."""

    statement: str
    expects: Expect | None = None
    kind: str | None = None


def read_keywords(text: str) -> tuple[Reading, ...]:
    """The statements a keyword query stands for (module docstring), the likeliest reading's first, then the thing
    the query names ("red planet": "The red planet is [MASK]."); () where it has no words."""
    words = " ".join(text.strip().strip("?!.,;:").split())
    tokens = tag(words)
    if not tokens:
        return ()
    made = [s for relation, subject in _readings(words, tokens) for s in _stated(relation, subject)]
    if (lived := LIVED.match(words)) is not None:  # "mozart born", "einstein died"
        made.insert(
            0, Reading(f"{lived.group(1)} {'was born' if lived.group(2).lower() == 'born' else 'died'} in {MASK}.")
        )
    made += [Reading(other, s.expects, s.kind) for s in made for other in other_ways((_capital(s.statement),))]
    first = made[0] if made else Reading("")
    made.append(Reading(f"The {words} is {MASK}.", first.expects, first.kind))  # "red planet": the thing named
    out: dict[str, Reading] = {}
    for s in made:
        statement = _capital(s.statement)
        out.setdefault(statement, Reading(statement, s.expects, s.kind))
    return tuple(out.values())


def is_adjective(word: str) -> bool:
    """Whether lemminflect knows ``word`` as an adjective ("official", "chemical", "highest")."""
    return bool(known_adjective_lemmas(word.lower()))


def is_common_noun(word: str) -> bool:
    """Whether lemminflect knows ``word`` as a common noun ("currency", "painter"; not "japan", "mozart")."""
    return bool(known_noun_lemmas(word.lower()))


def _readings(words: str, tokens: list[Token]) -> list[tuple[str, str]]:
    """(relation, subject) pairs a query can be read as, the likeliest first: a common noun at the end (with the
    adjectives before it: "rhenium atomic number", "lord of the rings author"), before "of", "in" or "for" ("capital
    of australia"), a common noun at the start of a name ("currency japan")."""
    out = []
    if len(tokens) > 1 and is_common_noun(tokens[-1].text):
        first = len(tokens) - 1
        while first > 1 and (is_adjective(tokens[first - 1].text) or tokens[first - 1].lower in MODIFIERS):
            first -= 1  # "greenland [official] language", "water [chemical] formula", "mozart [birth] date"
        if first > 1 and noun_lemma(tokens[-1].text) in CLASSES and is_common_noun(tokens[first - 1].text):
            first -= 1  # "koala [animal] type": a class of what it is
        last = tokens[first - 1]  # "red planet": no subject, the planet is named; "hubble launch year": a subject
        if last.tag[:2] not in NO_SUBJECT_END and not is_adjective(last.text):
            out.append((f"{_span(words, tokens[first:])} of", _span(words, tokens[:first])))
    found = re.match(r"(?i)^(.+?)\s+(of|in|for)\s+(.+)$", words)
    if found and is_common_noun(found.group(1).split()[-1]):
        out.append((f"{found.group(1)} {found.group(2)}", found.group(3)))
    elif len(tokens) > 1 and is_common_noun(tokens[0].text) and not is_common_noun(tokens[-1].text):
        out.append((f"{tokens[0].text} of", _span(words, tokens[1:])))  # "currency japan"
    return out


def _capital(statement: str) -> str:
    return statement[:1].upper() + statement[1:]


def _span(text: str, tokens: list[Token]) -> str:
    return text[tokens[0].start : tokens[-1].end]


def _stated(relation: str, subject: str) -> list[Reading]:
    """The statements of one reading, each with the kind of answer it expects and of thing it asks for."""
    noun = relation.rsplit(" ", 1)[0]  # "capital of" -> capital; "atomic number of" -> atomic number
    head = noun_lemma(noun.split()[-1])
    plain = f"The {relation} {subject} is {MASK}."
    for verb, pattern in (("was born", BIRTH), ("died", DEATH)):
        if pattern.search(noun):
            if head in TIME_NOUNS:  # "birth date", "year of death"
                return [Reading(f"{subject} {verb} in {MASK}.", "time"), Reading(plain, "time")]
            return [Reading(f"{subject} {verb} in {MASK}.", "place", PLACE), Reading(plain, "place", PLACE)]
    if head in TIME_NOUNS:
        return [Reading(f"{subject} was in {MASK}.", "time"), Reading(plain, "time")]
    if head in NUMBER_NOUNS:
        return [Reading(plain, "number")]
    if head in CLASSES:  # "koala animal type": what it is
        return [Reading(f"The {subject} is a {MASK}.")]
    done = _agent_verb(head)
    if done is not None:
        done_by = f"{subject} was {inflected(done, 'VBN')} by {MASK}."
        by = f"{subject} is by {MASK}."  # "X is a novel by Y"
        return [Reading(done_by, None, PERSON), Reading(plain, None, PERSON), Reading(by, None, PERSON)]
    if re.search(r"(?:or|ist)$", head):  # "author", "artist": who made it
        return [Reading(plain, None, head), Reading(f"{subject} is by {MASK}.", None, head)]
    if head in PLACE_NOUNS or head == "location":  # "petra country", "forbidden city location": where it is
        kind = None if head == "location" else head
        return [Reading(f"{subject} is in {MASK}.", "place", kind), Reading(plain, "place", kind)]
    kind = None if head in GENERIC_NOUNS or not head.isalpha() else head
    return [Reading(plain, None, kind)]


def _agent_verb(noun: str) -> str | None:
    """The verb of an agent noun ("painter" -> paint, "discoverer" -> discover, "composer" -> compose, "inventor"
    -> invent, "creator" -> create); None for another noun."""
    for suffix in ("er", "or"):
        if noun.endswith(suffix) and len(noun) > len(suffix) + 2:
            stem = noun[: -len(suffix)]
            for verb in (stem, f"{stem}e"):
                if verb in known_verb_lemmas(verb):
                    return verb
    return None
