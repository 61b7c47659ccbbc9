"""How a query that a person types is asked: a sentence with one ``[MASK]`` as it is, a question the way
the paper asks NQ and TriviaQA ("Who taught Aristotle?" -> "Who taught Aristotle? The answer is [MASK].").

The command line, the query service and its page answer both; the answer says how it was asked.
"""

from dataclasses import dataclass
from typing import Literal

MASK = "[MASK]"  # the mask marker of queries, for every encoder

# The words a question starts with (an interrogative or an auxiliary put first: "Is Paris in France?")
QUESTION_WORDS = frozenset(
    "who whom whose what which when where why how is are was were do does did can could will would should "
    "has have had".split()
)
How = Literal["mask", "question"]


@dataclass(frozen=True)
class Asked:
    text: str  # as it was typed
    query: str  # what NPM is asked: a sentence with one [MASK]
    how: How  # "mask": the text itself; "question": the question asked as the paper asks NQ and TriviaQA


def question_query(question: str) -> str:
    """``"who wrote hamlet"`` or ``"Who wrote Hamlet?"`` -> ``"... hamlet? The answer is [MASK]."``"""
    return f"{question.removesuffix('?').rstrip()}? The answer is {MASK}."


QUOTES = "\"'“”‘’«»()"


def reads_as_question(text: str) -> bool:
    """Whether a text without a mask is a question: it ends with "?" or starts with a question word (quotes
    around it aside)."""
    words = text.strip(QUOTES + " ").split()
    return bool(words) and (words[-1].endswith("?") or words[0].lower().strip(QUOTES) in QUESTION_WORDS)


def ask(text: str) -> Asked:
    """The query NPM is asked for ``text``; a text that is neither a sentence with one mask nor a question is
    refused with a ValueError that says what a query is."""
    count = text.count(MASK)
    if count == 1:
        return Asked(text, text, "mask")
    if count == 0 and reads_as_question(text):
        return Asked(text, question_query(text.strip()), "question")
    question = ', or is a question ("Who taught Aristotle?")' if count == 0 else ""
    raise ValueError(f"a query needs exactly one {MASK}, found {count}{question}")
