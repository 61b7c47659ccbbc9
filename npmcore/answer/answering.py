"""What a person typed, answered: each of its queries (:func:`npmcore.answer.asking.ask`: a sentence with a mask, or
a question's statements and the paper's question) answered by NPM in one batch, only answers of the kind the question
asks for (a place, a time, a number: :func:`npmcore.answer.questions.fits`), and the answers of the query whose
first answer is the most confident chosen.

Imports the answer stage's NPM and how a query is asked.
"""

import functools
import itertools
from collections.abc import Iterator, Sequence

from npmcore.answer.asking import Asked
from npmcore.answer.inference import NPM, Answer, InferenceConfig
from npmcore.answer.phrases import Phrases
from npmcore.answer.questions import fits


def best_answers(
    npm: NPM, asked: Sequence[Asked], config: InferenceConfig = InferenceConfig()
) -> list[tuple[str, list[Answer]]]:
    """For each asked, the query it is answered by and that query's answers: of its queries
    (:func:`answers_by_query`), the one whose first answer is the most confident (the first where there is no
    confidence)."""
    return [
        max(((query, found) for query, _, found in mine), key=lambda pair: _sureness(pair[1]))
        for mine in answers_by_query(npm, asked, config)
    ]


def answers_by_query(
    npm: NPM, asked: Sequence[Asked], config: InferenceConfig = InferenceConfig()
) -> Iterator[list[tuple[str, Phrases, list[Answer]]]]:
    """What :func:`best_answers` chooses from: for each asked, each of its queries with its phrases and answers (all
    queries answered in one batch), only answers of the kind its question asks for."""
    queries = [q for a in asked for q in a.queries]
    found = zip(queries, npm.phrases(queries, config), strict=True)
    for a in asked:
        keep = None if a.expects is None else functools.partial(fits, expects=a.expects)
        mine = itertools.islice(found, len(a.queries))
        yield [(query, phrases, npm.answers_from(query, phrases, config, keep)) for query, phrases in mine]


def _sureness(answers: list[Answer]) -> float:
    """How sure a query's answers are: its first answer's confidence (0 without one; -1 with no answer)."""
    return (answers[0].confidence or 0.0) if answers else -1.0
