"""What a person typed, answered (:func:`replies`): each of its queries (:func:`npmcore.ask.asking.ask`: a sentence
with a mask; a question's statements and the paper's question; a keyword query's readings; a yes/no question's two
sides) answered by NPM in one batch, only answers of the kind its query asks for (a place, a time, a number:
:func:`npmcore.ask.questions.fits`; a person, a river: :mod:`npmcore.answer.kinds`); the answers of its readings
pooled by the name they spell (:mod:`npmcore.answer.vote`), none its question's own subject
(:func:`npmcore.answer.checks.is_subject`); the names that may be shown as sure checked the other way round
(:mod:`npmcore.answer.checks`); the names rated and ranked by the reply's confidence (:mod:`npmcore.answer.sure`);
a yes/no question's verdict from its sides' names (:mod:`npmcore.answer.verdict`).

What a reply says, as the query service's results and ``npmcore query --json`` write it: :func:`reply_json`.

Imports the answer stage's NPM, vote, checks, reply's confidence and verdict, and how a query is asked.
"""

import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from npmcore.answer.checks import UNCHECKED, Check, is_subject, run_checks
from npmcore.answer.confidence import Calibrator, abstention
from npmcore.answer.inference import NPM, Answer, InferenceConfig
from npmcore.answer.kinds import kind_named
from npmcore.answer.phrases import Phrases
from npmcore.answer.pooling import Pooled
from npmcore.answer.sure import Sure, sure_of
from npmcore.answer.verdict import YesNo, verdict
from npmcore.answer.vote import Name, names
from npmcore.ask.asking import EXPLANATION, Asked, is_paper_form
from npmcore.ask.questions import fits
from npmcore.ask.subjects import Subject, reversed_statement, subject_of

CHECKED = 1  # of a reply's names (of each side of a yes/no question), the most confident may be checked


@dataclass(frozen=True)
class Reply:
    """What a person typed, answered."""

    asked: Asked
    query: str | None  # the query its first answer comes from; None where nothing was asked (an explanation)
    answers: list[Answer]
    yes_no: YesNo | None = None  # a yes/no question's verdict, where it has an answer


@dataclass(frozen=True)
class Named:
    """A name a reply may show: the vote of its readings (the queries of ``queries``, by their place in
    :attr:`Asked.queries`) and its check (None: not checked)."""

    name: Name
    queries: tuple[int, ...]
    check: Check | None = None

    @property
    def query(self) -> int:
        """The place of the query its shown answer comes from."""
        return self.queries[self.name.reading]

    def features(self) -> np.ndarray:
        """(len(SURE_FEATURES),) what the reply's confidence reads of it (:data:`npmcore.answer.sure.SURE_FEATURES`)."""
        return np.concatenate([self.name.votes(), UNCHECKED if self.check is None else self.check.features()])


def replies(npm: NPM, asked: Sequence[Asked], config: InferenceConfig = InferenceConfig()) -> list[Reply]:
    """For each asked, its names (:func:`named`: each checked where it may be shown as sure) rated by the reply's
    confidence and shown best first, each as its most confident answer with that confidence; for a yes/no question,
    its verdict and the names of the side it reads. Without a reply's confidence for the encoder's calibrator (or
    without a calibrator, or under NPM's own scoring) the names are shown by their own best confidence, unchecked."""
    sure = _sure(npm.encoder_source, npm.calibrator) if config.scoring == "evidence" else None  # NPM's: no confidence
    asked = [_of_kind(npm, a) for a in asked]
    found = list(answers_by_query(npm, asked, config))
    out = []
    for a, groups in zip(asked, named(npm, asked, found, config, sure.check_from if sure else None), strict=True):
        rated = [_rated(group, sure)[: config.answers] for group in groups]
        yes_no = None
        shown = rated[0] if rated else []
        if a.sides and any(rated):
            sides = [(side, [answer for _, answer in found]) for side, found in zip(a.sides, rated, strict=True)]
            yes_no = verdict(sides)
            side = rated[yes_no.side]  # what the corpus says there first: the answer the verdict reads
            shown = sorted(side, key=lambda named_answer: named_answer[1].text != yes_no.corpus_says)
        query = a.queries[shown[0][0].query] if shown else None
        out.append(Reply(a, query, [answer for _, answer in shown], yes_no))
    return out


def named(
    npm: NPM,
    asked: Sequence[Asked],
    found: Sequence[list[tuple[str, Phrases | Pooled, list[Answer]]]],
    config: InferenceConfig = InferenceConfig(),
    check_from: float | None = None,
    checked: int = CHECKED,
) -> list[list[list[Named]]]:
    """For each asked and its queries' answers (``found``: :func:`answers_by_query`), the names of each group of its
    readings (:func:`voted`), the first ``checked`` of each group whose best confidence is at least ``check_from``
    checked (None: none), in one batch with the others: what :func:`replies` rates."""
    out, pending = [], []
    for a, mine in zip(asked, found, strict=True):
        answers = [found_answers for _, _, found_answers in mine]
        groups = []
        for places in groups_of(a):
            group = [Named(name, places) for name in voted(a, answers, places, config.exclude_query_words)]
            if check_from is not None:
                for k, one in enumerate(group[:checked]):
                    if (one.name.best.confidence or 0.0) >= check_from and (check := _check_of(a, one)) is not None:
                        pending.append((len(out), len(groups), k, *check, _read(one.name)))
            groups.append(group)
        out.append(groups)
    checks = run_checks(npm, [(q, s) for *_, q, s, _ in pending], [b for *_, b in pending], config)
    for (n, g, k, *_), check in zip(pending, checks, strict=True):
        out[n][g][k] = replace(out[n][g][k], check=check)
    return out


def voted(
    asked: Asked, answers: Sequence[Sequence[Answer]], places: Sequence[int], exclude_query_words: bool = True
) -> list[Name]:
    """The names the answers of the queries of ``places`` vote for, the most confident first
    (:func:`npmcore.answer.vote.names`), none the subject of one of these queries where query words are excluded
    (:func:`npmcore.answer.checks.is_subject`; a yes/no question's other side masks it)."""
    found = names([answers[q] for q in places])
    if not exclude_query_words:
        return found
    mine = (asked.queries[q] for q in places)
    subjects = [s.text for q in mine if not is_paper_form(q) and (s := subject_of(q)) is not None]
    return [name for name in found if not any(is_subject(name.best.text, subject) for subject in subjects)]


def groups_of(asked: Asked) -> list[tuple[int, ...]]:
    """The places of the queries that vote together: all of them; a yes/no question's, those of each side."""
    if not asked.queries:
        return []
    if not asked.sides:
        return [tuple(range(len(asked.queries)))]
    ends = np.cumsum([0, *(len(side.statements) for side in asked.sides)])
    return [tuple(range(lo, hi)) for lo, hi in itertools.pairwise(ends.tolist())]


def answers_by_query(
    npm: NPM, asked: Sequence[Asked], config: InferenceConfig = InferenceConfig()
) -> Iterator[list[tuple[str, Phrases | Pooled, list[Answer]]]]:
    """What :func:`named` votes on: for each asked, each of its queries with its phrases (under evidence scoring
    pooled, :meth:`npmcore.answer.inference.NPM.pooled`) and answers (all queries answered in one batch), only
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


def _of_kind(npm: NPM, asked: Asked) -> Asked:
    """A yes/no question's sides asked for the kind of thing each asserts, where its statements do not say
    (:func:`npmcore.answer.kinds.kind_named`: "Is the Nile in Africa?" asks "The Nile is in [MASK]." for a
    continent)."""
    if not asked.sides or all(asked.kinds):
        return asked
    kinds = tuple(
        kind or kind_named(npm.articles, side.asserted)
        for side, kind in zip((s for s in asked.sides for _ in s.statements), asked.kinds, strict=True)
    )
    return replace(asked, kinds=kinds)


def _check_of(asked: Asked, one: Named) -> tuple[str, Subject] | None:
    """The query that checks a name and the subject it masks: the statement its shown answer comes from turned round
    (for the paper's question, the first statement of its group that has a subject); None where none has one."""
    for place in (one.query, *one.queries):
        query = asked.queries[place]
        if not is_paper_form(query) and (subject := subject_of(query)) is not None:
            return reversed_statement(query, subject, one.name.best.text), subject
    return None


def _read(name: Name) -> list[int]:
    """The passages a name's check reads: those its best answer was found in (its evidence)."""
    return sorted({evidence.block for evidence in name.best.evidence})


def _rated(group: list[Named], sure: Sure | None) -> list[tuple[Named, Answer]]:
    """A group's names, each as its most confident answer with the reply's confidence (without one, its own) and the
    texts of the others as its forms, best first."""
    if not group:
        return []
    if sure is None:
        confidence = [one.name.best.confidence for one in group]
    else:
        confidence = sure.confidence(np.stack([one.features() for one in group])).tolist()
    order = sorted(range(len(group)), key=lambda k: -(confidence[k] or 0.0))
    return [(group[k], _shown(group[k].name, confidence[k])) for k in order]


def _shown(name: Name, confidence: float | None) -> Answer:
    best = name.best
    forms = [t for _, a in name.answers for t in (a.text, *a.forms) if t != best.text]
    return replace(best, confidence=confidence, forms=tuple(dict.fromkeys(forms)))


@functools.lru_cache(maxsize=8)
def _sure(encoder: str, calibrator: Calibrator | None) -> Sure | None:
    return sure_of(encoder, calibrator)


def sure_from(npm: NPM) -> float | None:
    """The confidence from which an answer is shown as sure: the reply's confidence's ``min_confidence``, else the
    calibrator's; None without a calibrator."""
    if (sure := _sure(npm.encoder_source, npm.calibrator)) is not None:
        return sure.min_confidence
    return npm.calibrator.min_confidence if npm.calibrator is not None else None


def reply_json(npm: NPM, reply: Reply, min_confidence: float | None = None, explain: bool = False) -> dict:
    """A reply as the query service's results and ``npmcore query --json`` write it: the text typed, how it was
    asked (the queries NPM was asked and the one its answers come from), whether anything was found and whether its
    answers are unsure (below ``min_confidence``; None: the calibrator's), its answers (each with its other forms,
    score, confidence, evidence passages and where they come from; with ``explain`` its score's parts), a yes/no
    question's verdict, and a note where nothing was asked (a why)."""
    return {
        "query": reply.asked.text,
        "asked": {"how": reply.asked.how, "queries": list(reply.asked.queries), "answered": reply.query},
        **abstention(npm.calibrator, reply.answers, sure_from(npm) if min_confidence is None else min_confidence),
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
