"""What a person typed, answered (:func:`replies`): each of its queries (:func:`npmcore.ask.asking.ask`: a sentence
with a mask; a question's statements and the paper's question; a keyword query's statements; a yes/no question's
statements) answered by NPM in one batch, only answers of the kind its query asks for (a place, a time, a number:
:func:`npmcore.ask.questions.fits`; a person, a river: :mod:`npmcore.answer.kinds`), and the answers of the query
whose first answer is the most confident chosen; a yes/no question's verdict from them (:mod:`npmcore.answer.verdict`).

What a reply says, as the query service's results and ``npmcore query --json`` write it: :func:`reply_json`.

Imports the answer stage's NPM, how a query is asked, the confidence's abstention and the yes/no verdict.
"""

import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from npmcore.answer.confidence import abstention
from npmcore.answer.inference import NPM, Answer, InferenceConfig
from npmcore.answer.phrases import Phrases
from npmcore.answer.pooling import Pooled
from npmcore.answer.verdict import YesNo, verdict
from npmcore.ask.asking import EXPLANATION, Asked
from npmcore.ask.questions import fits


@dataclass(frozen=True)
class Reply:
    """What a person typed, answered."""

    asked: Asked
    query: str | None  # the query its answers are of; None where nothing was asked (an explanation)
    answers: list[Answer]
    yes_no: YesNo | None = None  # a yes/no question's verdict, where it has an answer


def replies(npm: NPM, asked: Sequence[Asked], config: InferenceConfig = InferenceConfig()) -> list[Reply]:
    """For each asked, the query it is answered by and that query's answers: of its queries
    (:func:`answers_by_query`), the one whose first answer is the most confident (the first where there is no
    confidence); for a yes/no question, its verdict."""
    out = []
    for a, mine in zip(asked, answers_by_query(npm, asked, config), strict=True):
        if not mine:
            out.append(Reply(a, None, []))
            continue
        query, answers = max(((query, found) for query, _, found in mine), key=lambda pair: _sureness(pair[1]))
        yes_no = None
        if a.asserted is not None and answers:
            yes_no = verdict(a.asserted, answers[0].text, answers[0].forms, answers[0].confidence)
        out.append(Reply(a, query, answers, yes_no))
    return out


def answers_by_query(
    npm: NPM, asked: Sequence[Asked], config: InferenceConfig = InferenceConfig()
) -> Iterator[list[tuple[str, Phrases | Pooled, list[Answer]]]]:
    """What :func:`replies` chooses from: for each asked, each of its queries with its phrases (under evidence
    scoring pooled, :meth:`npmcore.answer.inference.NPM.pooled`) and answers (all queries answered in one batch), only
    answers of the kind each asks for."""
    queries = [q for a in asked for q in a.queries]
    found = zip(queries, npm.phrases(queries, config), strict=True)
    for a in asked:
        mine = []
        for n, (query, phrases) in enumerate(itertools.islice(found, len(a.queries))):
            expects, kind = a.reading(n)
            keep = None if expects is None else functools.partial(fits, expects=expects)
            ranked = npm.pooled(phrases, kind) if phrases.parts is not None else phrases
            mine.append((query, ranked, npm.answers_from(query, ranked, config, keep)))
        yield mine


def _sureness(answers: list[Answer]) -> float:
    """How sure a query's answers are: its first answer's confidence (0 without one; -1 with no answer)."""
    return (answers[0].confidence or 0.0) if answers else -1.0


def reply_json(npm: NPM, reply: Reply, min_confidence: float | None = None, explain: bool = False) -> dict:
    """A reply as the query service's results and ``npmcore query --json`` write it: the text typed, how it was
    asked (the queries NPM was asked and the one its answers come from), whether anything was found and whether its
    answers are unsure (below ``min_confidence``; None: the calibrator's), its answers (each with its other forms,
    score, confidence, evidence passages and where they come from; with ``explain`` its score's parts), a yes/no
    question's verdict, and a note where nothing was asked (a why)."""
    return {
        "query": reply.asked.text,
        "asked": {"how": reply.asked.how, "queries": list(reply.asked.queries), "answered": reply.query},
        **abstention(npm.calibrator, reply.answers, min_confidence),
        "answers": [_answer_json(npm, answer, explain) for answer in reply.answers],
        "yes_no": None if reply.yes_no is None else asdict(reply.yes_no),  # yes where the corpus says what it asserts
        "note": EXPLANATION if reply.asked.how == "explanation" else None,  # why nothing was asked
    }


def _answer_json(npm: NPM, answer: Answer, explain: bool) -> dict:
    return {
        "text": answer.text,
        "forms": list(answer.forms),  # the other forms of the name it is, as the passages write them
        "score": answer.score,
        "confidence": answer.confidence,
        "evidence": [
            {
                "block_id": s.block_id,
                "title": s.title,
                "text": s.text,
                "start": s.start,
                "end": s.end,
                "score": s.score,
                "source": asdict(s.source),
            }
            for s in (npm.evidence.span(e) for e in answer.evidence)
        ],
        **({"parts": answer.parts} if explain else {}),
    }
