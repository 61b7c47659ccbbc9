"""How a query that a person types is asked:

* a sentence with one ``[MASK]`` as it is;
* a question as the statements it stands for ("Where was Lionel Messi born?" -> "Lionel Messi was born in [MASK].")
  and the way the paper asks NQ and TriviaQA ("Where was Lionel Messi born? The answer is [MASK]."), or in the
  paper's way alone where no statement can be made of it or that is asked for;
* a yes/no question as the statements that mask what it asserts (:mod:`npmcore.ask.yes_no`: "Is Paris the
  capital of France?" -> "[MASK] is the capital of France.", asserting Paris), answered yes or no;
* a question that asks for an explanation ("why …", "how does …") is not asked: NPM answers with a phrase of its
  corpus and cannot explain (:data:`EXPLANATION`);
* anything else, keywords ("capital of australia", "einstein birthplace"), as the statements they stand for
  (:mod:`npmcore.ask.keywords`) and the paper's way.

NPM reads statements far better than questions (docs/evaluate.md); the command line, the query service and its
page ask questions and keywords as statements, and every answer says how it was asked. Each of a query's statements
is asked, and the answers are those of the one whose first answer is the most confident, of the kind it asks for
(:func:`npmcore.answer.answering.replies`): on the dev set of questions people type, asking the paper's form
beside the statements answered 0.420 against 0.393 (docs/evaluate.md).
"""

import re
from dataclasses import dataclass
from typing import Literal, get_args

from npmcore.ask.keywords import read_keywords
from npmcore.ask.questions import BE, DO, HAVE, MODALS, WH_WORDS, Expect, stated_kind, tag
from npmcore.ask.statements import state
from npmcore.ask.yes_no import Side, is_yes_no, yes_no_reading
from npmcore.mask import MASK

# The words a question starts with (an interrogative or an auxiliary put first: "Is Paris in France?")
QUESTION_WORDS = frozenset(
    "who whom whose what which when where why how is are was were do does did can could will would should "
    "has have had".split()
)
WH_DETERMINERS = frozenset({"which", "what", "whose"})  # "… of which organisation": a wh-phrase ends the question
PRONOUNS = frozenset("i you he she it we they".split())
PREPOSITIONS = frozenset("in on at to from by for with of during under after before since about into".split())
FINITE = frozenset({"VBD", "VBZ", "VBP", "MD"})  # a verb with a tense: a sentence's, not a keyword query's
How = Literal["mask", "statements", "question", "keywords", "yes-no", "explanation"]
EXPLANATION = (
    "NPM answers with a phrase of its corpus (a name, a place, a date, a number) and cannot explain why or how: ask "
    "who, what, where or when, or write a sentence with [MASK]."
)
# How a question is asked: as the statements it stands for, or as the paper asks NQ and TriviaQA
Form = Literal["statements", "paper"]
FORMS: tuple[Form, ...] = get_args(Form)
QUOTES = "\"'“”‘’«»()"


@dataclass(frozen=True)
class Asked:
    text: str  # as it was typed
    queries: tuple[str, ...]  # what NPM is asked: sentences with one [MASK] each (replies picks one's answers)
    how: How  # "mask": the text itself; "statements": the question's statements, then the paper's form; "question":
    # the paper's form alone; "keywords": the statements a keyword query stands for, then the paper's form; "yes-no":
    # the statements that mask what a yes/no question asserts; "explanation": nothing (EXPLANATION)
    # of each query (empty: None for every one), the kind of answer it asks for (a place, a time, a number) ...
    expected: tuple[Expect | None, ...] = ()
    # ... and the kind of thing it asks for, as the datastore's articles say what each candidate is
    # (npmcore.answer.kinds): a person, a place, the noun of a question's wh-phrase ("which river"), of a statement
    # ("the capital of X is") or of a keyword query's relation ("mona lisa painter")
    kinds: tuple[str | None, ...] = ()
    # a yes/no question's sides, whose statements are its queries in order: each the part its statements mask
    # ("Paris" of "[MASK] is the capital of France.", "France" of "Paris is the capital of [MASK].")
    sides: tuple[Side, ...] = ()

    @property
    def expects(self) -> Expect | None:
        """What its first query expects (a question's: what its wh-phrase asks for)."""
        return self.expected[0] if self.expected else None

    @property
    def kind(self) -> str | None:
        """The kind of thing its first query asks for."""
        return self.kinds[0] if self.kinds else None

    def reading(self, n: int) -> tuple[Expect | None, str | None]:
        """What its query ``n`` expects and the kind of thing it asks for."""
        return (self.expected[n] if self.expected else None, self.kinds[n] if self.kinds else None)


PAPER_ANSWER = f"? The answer is {MASK}."  # how the paper's question ends


def question_query(question: str) -> str:
    """``"who wrote hamlet"`` or ``"Who wrote Hamlet?"`` -> ``"... hamlet? The answer is [MASK]."``"""
    return f"{question.removesuffix('?').rstrip()}{PAPER_ANSWER}"


def is_paper_form(query: str) -> bool:
    """Whether a query is a question asked as the paper asks it (:func:`question_query`), not a statement."""
    return query.endswith(PAPER_ANSWER)


def reads_as_question(text: str) -> bool:
    """Whether a text without a mask is a question: it ends with "?", starts with a question word ("what's" and
    "whats" count), or with a preposition and a wh-word ("in which year", "during whose reign"), or ends with a
    wh-word ("allergic to what") or a short wh-phrase ("a member of which organisation", "born in what year");
    quotes around it aside."""
    words = [w.lower().strip(QUOTES) for w in text.strip(QUOTES + " ").split()]
    if not words:
        return False
    first = re.sub(r"^(what|who|where|when|how)(?:['’]?s|['’](?:re|d|ll))$", r"\1", words[0])
    fronted = len(words) > 1 and words[0] in PREPOSITIONS and words[1] in WH_WORDS
    tail = next((words[i + 1 :] for i in (-3, -2) if len(words) > -i and words[i] in WH_DETERMINERS), None)
    ending = words[-1] in WH_WORDS or (tail is not None and PRONOUNS.isdisjoint(tail))  # "in which I live": relative
    return text.rstrip(QUOTES + " ").endswith("?") or first in QUESTION_WORDS or fronted or ending


def reads_as_sentence(text: str) -> bool:
    """Whether a text without a mask is a sentence, not keywords: a full stop at its end and a verb after its first
    word ("Plato taught me."), or a verb with a tense and "is", "was", "has" … after its first word ("Aristotle was
    taught by Plato"; not "einstein birthplace", "mozart born", "garden of earthly delights painter")."""
    tokens = tag(text.strip())
    if len(tokens) < 3:
        return False
    verbs = {t.tag for t in tokens[1:]}
    if text.strip().endswith("."):  # "Plato taught me.": a verb that may read as a participle
        return bool(verbs & (FINITE | {"VBN"}))
    return bool(verbs & FINITE) and any(t.lower in BE or t.lower in HAVE for t in tokens[1:])


def asks_to_explain(text: str) -> bool:
    """Whether a question asks for an explanation: "why …", "how does/did/is/can …" (not "how many", "how old")."""
    words = [w.lower().strip(QUOTES) for w in text.strip(QUOTES + " ").split()[:2]]
    explains = BE | frozenset(DO) | HAVE | MODALS
    return bool(words) and (words[0] == "why" or (words[0] == "how" and len(words) > 1 and words[1] in explains))


def ask(text: str, form: Form = "statements") -> Asked:
    """What NPM is asked for ``text`` (module docstring); ``form`` "paper" asks a question or keywords in the paper's
    way alone. A text with several masks, a sentence without one or no words is refused with a ValueError that says
    what a query is."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    count = text.count(MASK)
    if count == 1:
        return Asked(text, (text,), "mask", kinds=(stated_kind(text),))
    if count > 1:
        raise ValueError(f"a query needs at most one {MASK}, found {count}: write a sentence with one, or a question")
    if not re.search(r"\w", text):
        raise ValueError("a query needs words: a question, keywords, or a sentence with one [MASK]")
    paper = question_query(text.strip())
    question = reads_as_question(text)
    if not question and reads_as_sentence(text):
        raise ValueError(
            f'a sentence needs one {MASK} where its answer goes ("Aristotle was taught by {MASK}."), or ask a '
            "question or type keywords"
        )
    if form == "paper":
        return Asked(text, (paper,), "question")
    if not question:
        readings = read_keywords(text)  # the paper's form asks for what the likeliest reading asks for
        queries = (*(r.statement for r in readings), paper)
        expected = (*(r.expects for r in readings), readings[0].expects)
        kinds = (*(r.kind for r in readings), readings[0].kind)
        return Asked(text, queries, "keywords", expected, kinds)
    if asks_to_explain(text):
        return Asked(text, (), "explanation")
    if is_yes_no(text):
        reading = yes_no_reading(text)
        if reading is None:
            return Asked(text, (paper,), "question")
        if reading.choice:  # "a fish or a mammal": answered as the question it is
            side = reading.sides[0]
            return Asked(text, side.statements, "statements", kinds=(side.kind,) * len(side.statements))
        queries = tuple(q for side in reading.sides for q in side.statements)
        kinds = tuple(side.kind for side in reading.sides for _ in side.statements)
        return Asked(text, queries, "yes-no", kinds=kinds, sides=reading.sides)
    stated = state(text)
    if stated.statements:
        kind = stated.kind or stated_kind(stated.statements[0])
        n = len(stated.statements) + 1
        return Asked(text, (*stated.statements, paper), "statements", (stated.expects,) * n, (kind,) * n)
    return Asked(text, (paper,), "question")
