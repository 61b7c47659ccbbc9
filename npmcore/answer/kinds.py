"""The kind of answer a question asks for, learned from the datastore: a candidate's own article says what it is.

"Which river flows through Baghdad?" asks for a river, and NPM's candidates include "Iraq" and "Tigris". Nothing
here knows rivers: the question's own words name the kind (the noun of its wh-phrase, "river"; "who": a person;
"where": a place), and each candidate's article in the datastore says whether it is one: the article whose title
spells the candidate ("Tigris", "Mercury (planet)", or the candidate and the kind's noun, "Portuguese language"),
whose opening says "The Tigris is a river in the Middle East". A candidate is

* **of the kind** (+1) where its article's title, or what its first sentence says it is, names the kind's noun
  ("river", "rivers"), for a person where the opening gives a life's years and speaks of him or her ("Sir Alexander
  Fleming (6 August 1881 – 11 March 1955) was a Scottish physician … His best-known …"), for a place where it names
  a place's noun ("Canberra is the capital city of Australia");
* **of another kind** (-1) where it has an article (not a list of meanings) that names none of them ("Iraq is a
  country");
* **unknown** (0) where the datastore holds no article of it: nothing is said of it.

The articles are the index's table of their openings (:mod:`npmcore.index.articles`: written with the index, looked
up per candidate). Imports that table, and the answer stage's phrases, pooling and questions (what a kind is called).
"""

import re

import numpy as np

from npmcore.answer.phrases import Phrases
from npmcore.answer.pooling import Pooled
from npmcore.ask.questions import PERSON, PLACE
from npmcore.index.articles import Article, Articles
from npmcore.vocab import spelled

JUDGED = 10  # the best answers whose kind is looked up
WEIGHTS = (3.0, 0.1)  # an answer's score times these, of the kind asked and of another kind (chosen on dev)
PREDICATE_WORDS = 12  # of an article's first sentence, after its verb: what it says its subject is
PLACE_NOUNS = frozenset(
    "city town village capital country nation state republic kingdom province county district region municipality "
    "territory island archipelago peninsula continent river lake sea ocean mountain valley desert place".split()
)
MEANINGS = re.compile(r"\b(?:may|might|can|could) (?:also )?(?:refer to|mean|be)\b", re.IGNORECASE)  # lists of meanings


def articles_of(articles: Articles, candidate: str, noun: str | None = None) -> list[Article]:
    """The articles of a candidate: titled as it is spelled (qualified or not), or as it and ``noun``
    ("Portuguese language"); lists of meanings left out."""
    names = (spelled(candidate),) if noun is None else (spelled(candidate), spelled(f"{candidate} {noun}"))
    return [a for a in articles.named(*names) if not MEANINGS.search(a.opening[:200])]


def noun_forms(noun: str) -> frozenset[str]:
    """A noun and its plural as articles write it: "river", "rivers"; "city", "cities"; "species"."""
    forms = {noun, f"{noun}s", f"{noun}es"}
    if noun.endswith("y"):
        forms.add(f"{noun[:-1]}ies")
    return frozenset(forms)


def says(article: Article, kind: str) -> bool:
    """Whether an article's title or what its first sentence says its subject is (:func:`predicate`) says it is of
    ``kind`` (a noun, :data:`PERSON` or :data:`PLACE`)."""
    if kind == PERSON:
        return article.life
    words = set(re.findall(r"[a-z]+", f"{article.title} {predicate(article.opening)}".lower()))
    if kind == PLACE:
        return not words.isdisjoint(PLACE_NOUNS | {f"{n}s" for n in PLACE_NOUNS})
    return not words.isdisjoint(noun_forms(kind))


def predicate(opening: str) -> str:
    """What an article's first two sentences say its subject is: the words after each one's first "is", "are", "was"
    or "were" (:data:`PREDICATE_WORDS` of them: "Canberra is [the capital city of Australia]", "It is [a noble gas]";
    not "Uruguay is a country … Its capital is Montevideo"), a sentence's first words where it has none."""
    said = []
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", opening, maxsplit=2)[:2]:
        found = re.search(r"\b(?:is|are|was|were)\b(.*)", sentence)
        said.append(" ".join((found.group(1) if found else sentence).split()[:PREDICATE_WORDS]))
    return " ".join(said)


def kind_of(articles: Articles, candidate: str, kind: str) -> int:
    """+1: ``candidate`` is of ``kind`` by its article; -1: it has articles, none saying so; 0: it has none."""
    found = articles_of(articles, candidate, None if kind in (PERSON, PLACE) else kind)
    if not found:
        return 0
    return 1 if any(says(a, kind) for a in found) else -1


def kind_named(articles: Articles, text: str) -> str | None:
    """The kind of thing ``text`` is by its article, as a kind a query asks for: a person (its opening gives a life),
    else the first place noun of what its first sentences say it is ("Africa is [the second-largest continent]":
    continent; "Salzburg is [the fourth-largest city in Austria]": city); None where it has no such article."""
    for article in articles_of(articles, text):
        if article.life:
            return PERSON
        words = re.findall(r"[a-z]+", predicate(article.opening).lower())
        if (noun := next((w for w in words if w in PLACE_NOUNS), None)) is not None:
            return noun
    return None


def preferred(pooled: Pooled, verdicts: np.ndarray, weights: tuple[float, float] = WEIGHTS) -> Pooled:
    """The pooled answers re-ranked by their kind: the first ``len(verdicts)`` scaled by ``weights`` (of the kind,
    of another kind; unknown ones as they are), every score then renormalised to sum as before; ``kinds`` the
    verdicts."""
    scale = np.ones(len(pooled.phrases.scores))
    scale[: len(verdicts)] = np.select([verdicts > 0, verdicts < 0], weights, 1.0)
    scores = pooled.phrases.scores * scale
    if scores.sum() > 0:
        scores *= pooled.phrases.scores.sum() / scores.sum()
    order = np.argsort(-scores, kind="stable")
    row = np.empty_like(order)
    row[order] = np.arange(len(order))
    kinds = np.zeros(len(order), dtype=np.int64)
    kinds[: len(verdicts)] = verdicts
    p = pooled.phrases
    return Pooled(
        Phrases(
            p.token_ids[order],
            scores[order],
            p.spans,
            p.span_scores,
            np.where(p.phrase_of_span >= 0, row[np.maximum(p.phrase_of_span, 0)], -1),
            None if p.parts is None else p.parts[order],
        ),
        tuple(pooled.members[i] for i in order),
        pooled.source,
        kinds[order],
    )
