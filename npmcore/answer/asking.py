"""How a query that a person types is asked: a sentence with one ``[MASK]`` as it is; a question as the statements
it stands for ("Where was Lionel Messi born?" -> "Lionel Messi was born in [MASK].") and the way the paper asks NQ
and TriviaQA ("Where was Lionel Messi born? The answer is [MASK]."), or in the paper's way alone where no statement
can be made of it or that is asked for.

NPM reads statements far better than questions (docs/evaluate.md); the command line, the query service and its
page ask questions as statements, and every answer says how it was asked. Each of a question's queries is asked, and
the answers are those of the one whose first answer is the most confident, of the kind the question asks for
(:func:`npmcore.answer.answering.best_answers`): on the dev set of questions people type, asking the paper's form
beside the statements answered 0.420 against 0.393 (docs/evaluate.md).
"""

import re
from dataclasses import dataclass
from typing import Literal, get_args

from npmcore.answer.questions import WH_WORDS, Expect
from npmcore.answer.statements import state
from npmcore.mask import MASK

# The words a question starts with (an interrogative or an auxiliary put first: "Is Paris in France?")
QUESTION_WORDS = frozenset(
    "who whom whose what which when where why how is are was were do does did can could will would should "
    "has have had".split()
)
WH_DETERMINERS = frozenset({"which", "what", "whose"})  # "… of which organisation": a wh-phrase ends the question
PRONOUNS = frozenset("i you he she it we they".split())
PREPOSITIONS = frozenset("in on at to from by for with of during under after before since about into".split())
How = Literal["mask", "statements", "question"]
# How a question is asked: as the statements it stands for, or as the paper asks NQ and TriviaQA
Form = Literal["statements", "paper"]
FORMS: tuple[Form, ...] = get_args(Form)
QUOTES = "\"'“”‘’«»()"


@dataclass(frozen=True)
class Asked:
    text: str  # as it was typed
    queries: tuple[str, ...]  # what NPM is asked: sentences with one [MASK] each (best_answers picks one's answers)
    how: How  # "mask": the text itself; "statements": the question's statements, then the paper's form; "question":
    # the paper's form alone
    # asked as statements: the kind of answer the question asks for (a place, a time, a number), where it says
    expects: Expect | None = None


def question_query(question: str) -> str:
    """``"who wrote hamlet"`` or ``"Who wrote Hamlet?"`` -> ``"... hamlet? The answer is [MASK]."``"""
    return f"{question.removesuffix('?').rstrip()}? The answer is {MASK}."


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


def ask(text: str, form: Form = "statements") -> Asked:
    """What NPM is asked for ``text``: a sentence with one mask as it is; a question as its statements and as the paper
    asks questions, or (no statement made of it, or ``form`` "paper") as the paper alone. A text that is neither is
    refused with a ValueError that says what a query is."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    count = text.count(MASK)
    if count == 1:
        return Asked(text, (text,), "mask")
    if count == 0 and reads_as_question(text):
        stated = state(text) if form == "statements" else None
        paper = question_query(text.strip())
        if stated is not None and stated.statements:
            return Asked(text, (*stated.statements, paper), "statements", stated.expects)
        return Asked(text, (paper,), "question")
    question = ', or is a question ("Who taught Aristotle?")' if count == 0 else ""
    raise ValueError(f"a query needs exactly one {MASK}, found {count}{question}")
