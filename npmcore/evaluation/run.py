"""Evaluating an NPM index on a task: predictions, metric and per-example records.

Closed-set tasks score each label by the retrieved tokens that are its verbalizer words
(filtered to single tokens of the encoder's vocabulary), calibrated by the label scores of
the task's domain premise (domain-conditional PMI: log score(y | x) - log score(y | domain),
as kNN-Prompt, whose closed-set inference NPM follows, does); open-set tasks take the top
phrase (NPM) or token (NPM single) and count exact matches against every gold alias.
LAMA tasks report the macro average over answer lengths 1, 2, 3, 4+ (in encoder tokens
of the shortest gold answer), as the paper does.
"""

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from npmcore.answer.answering import replies, sure_from
from npmcore.answer.inference import NPM, InferenceConfig
from npmcore.answer.tokens import Mode, classify, label_token_ids, predict_tokens
from npmcore.ask.asking import ask
from npmcore.evaluation.baselines import BASELINES, MaskFiller
from npmcore.evaluation.metrics import exact_match, in_passages, length_bucket, macro_by_length, repeats_query
from npmcore.evaluation.selective import calibration_report, shown_report
from npmcore.evaluation.tasks import Task

# npm: BM25-restricted for open-set tasks (the paper), kNN for closed-set; npm-no-bm25: kNN over the
# index for open-set tasks too; npm-single: one [MASK] vector, single-token answers; open-set baselines
# (npmcore.evaluation.baselines): mlm-head (the masked-LM head alone), mlm-read (the top BM25 passage, then the head).
System = Literal["npm", "npm-no-bm25", "npm-single", "mlm-head", "mlm-read"]


@dataclass(frozen=True)
class Record:
    id: str
    query: str
    gold: str  # the label name, or the gold aliases joined by " | "
    prediction: str  # "" when nothing was retrieved (closed-set: no label word in the top k)
    score: float  # the prediction's normalised score (closed-set: its log score)
    correct: bool
    evidence: str  # the best passage's block id of the prediction ("" for closed-set)
    group: str = ""  # the example's subset (Example.group)
    stale: bool | None = None  # the prediction is one of the example's stale answers; None: it has none
    # BM25-restricted open-set runs: whether a gold answer is written in the passages searched (the ceiling)
    in_passages: bool | None = None
    confidence: float | None = None  # evidence scoring with a calibrator: the prediction's probability of being right


@dataclass(frozen=True)
class Result:
    task: str
    system: System
    n: int
    metric: str  # "accuracy", "exact_match" or "macro_exact_match"
    score: float  # in [0, 1]
    records: tuple[Record, ...]
    notes: dict[str, int]  # counts worth reporting: skipped examples, dropped label words, abstentions
    # open-set: the share of answered examples whose answer repeats a content word of the query; None: closed-set
    query_copy_rate: float | None = None
    # what the examples' groups and stale answers say (:func:`breakdown`): "<metric>.<group>", "stale_rate"
    # and "stale_rate.<group>", and for BM25-restricted runs "ceiling" (the gold in the passages searched)
    breakdown: dict[str, float] = field(default_factory=dict)
    # every record with a confidence: how well it says when the prediction is right (selective.calibration_report)
    calibration: dict | None = None
    # and what a person is shown: the share sure, right when sure, right but greyed (selective.shown_report)
    shown: dict | None = None


def run_task(
    task: Task,
    npm: NPM,
    system: System = "npm",
    config: InferenceConfig = InferenceConfig(),
    batch_size: int = 16,
    calibrate: bool = True,
) -> Result:
    """Run ``task`` against ``npm`` (an index of the task's reference corpus) with ``system``
    (which sets ``config.restrict``); ``calibrate``: closed-set scores relative to the task's
    domain premise (when it has one)."""
    if not task.examples:
        raise ValueError(f"task {task.name} has no examples to evaluate (skipped: {task.skipped})")
    if system in BASELINES and task.kind != "open":
        raise ValueError(f"system {system} is an open-set baseline; task {task.name} is closed-set")
    config = replace(config, restrict=system != "npm-no-bm25")
    mode = "npm-single" if system == "npm-single" else "npm"
    filler = MaskFiller(npm) if system in BASELINES else None
    notes = {f"skipped_{reason}": count for reason, count in task.skipped.items()}
    labels = label_ids(task, npm, notes) if task.kind == "closed" else None
    prior = domain_scores(task, npm, labels, mode, config) if labels is not None and calibrate and task.domain else None
    records = []
    for lo in range(0, len(task.examples), batch_size):
        batch = task.examples[lo : lo + batch_size]
        if filler is not None:
            records.extend(_filled(batch, npm, filler, system == "mlm-read", config))
        elif labels is None:
            records.extend(_open(batch, npm, mode, config))
        else:
            records.extend(_closed(task, batch, npm, labels, prior, mode, config, notes))
    correct = [r.correct for r in records]
    if task.macro_key == "answer_length":
        metric, score = "macro_exact_match", macro_by_length(correct, answer_lengths(task, npm))
    else:
        metric, score = ("accuracy" if task.kind == "closed" else "exact_match"), float(np.mean(correct))
    copy_rate = query_copy_rate(records) if task.kind == "open" else None
    confident = [r.confidence for r in records]
    calibration = None if None in confident else calibration_report(confident, correct)
    threshold = sure_from(npm) if calibration is not None else None
    shown = None if threshold is None else shown_report(confident, correct, threshold)
    return Result(
        task.name,
        system,
        len(records),
        metric,
        score,
        tuple(records),
        notes,
        copy_rate,
        breakdown(records),
        calibration,
        shown,
    )


def breakdown(records: list[Record]) -> dict[str, float]:
    """Exact match (accuracy) and examples per group (``exact_match.<group>``, ``count.<group>``), the share of
    stale predictions among the examples that have stale answers (``stale_rate``, and per group), and the share of
    examples whose passages searched hold a gold answer (``ceiling``, and per group) where that is known."""
    out: dict[str, float] = {}
    scopes = {"": records} | {
        f".{g}": [r for r in records if r.group == g] for g in sorted({r.group for r in records} - {""})
    }
    for key, mine in scopes.items():
        if key:
            out[f"exact_match{key}"] = float(np.mean([r.correct for r in mine]))
            out[f"count{key}"] = float(len(mine))
        if any(r.stale is not None for r in mine):
            out[f"stale_rate{key}"] = float(np.mean([r.stale for r in mine if r.stale is not None]))
        if mine and all(r.in_passages is not None for r in mine):
            out[f"ceiling{key}"] = float(np.mean([r.in_passages for r in mine]))
    return out


def query_copy_rate(records: list[Record]) -> float:
    """The share of answered records whose prediction repeats a content word of the query (0 when none answered)."""
    answered = [r for r in records if r.prediction]
    return sum(repeats_query(r.prediction, r.query) for r in answered) / len(answered) if answered else 0.0


def answer_lengths(task: Task, npm: NPM) -> list[int]:
    """Per open-set example, the length in encoder tokens of its shortest gold answer."""
    return [
        min(len(npm.tokenizer(f" {a}", add_special_tokens=False)["input_ids"]) for a in ex.answers)
        for ex in task.examples
    ]


def accuracy_by_length(result: Result, lengths: list[int]) -> dict[str, float]:
    """Exact match per answer-length bucket ("1", "2", "3", "4+"), for the paper's Figure 8."""
    buckets: dict[str, list[bool]] = {}
    for record, n in zip(result.records, lengths, strict=True):
        buckets.setdefault(length_bucket(n), []).append(record.correct)
    return {b: float(np.mean(buckets[b])) for b in ("1", "2", "3", "4+") if b in buckets}


def label_ids(task: Task, npm: NPM, notes: dict[str, int]) -> list[np.ndarray]:
    """Token ids of each label's verbalizer words that are single tokens; a label left without any is an error."""
    out = []
    for name, words in zip(task.labels, task.label_words, strict=True):
        ids, dropped = label_token_ids(npm.tokenizer, list(words))
        notes["label_words_dropped"] = notes.get("label_words_dropped", 0) + len(dropped)
        if len(ids) == 0:
            raise ValueError(
                f"task {task.name}: no word of label {name!r} ({', '.join(words)}) is a single token of the encoder"
            )
        out.append(ids)
    return out


def domain_scores(task: Task, npm: NPM, labels: list[np.ndarray], mode: Mode, config: InferenceConfig) -> np.ndarray:
    """(labels,) log scores of the task's domain premise. A label none of whose words the premise
    retrieves gets the lowest finite score of the others (none retrieved at all: zeros, no calibration)."""
    row = classify(npm, [task.domain], labels, mode=mode, config=config)[0]
    finite = row[np.isfinite(row)]
    return np.where(np.isfinite(row), row, finite.min() if len(finite) else 0.0)


def _closed(
    task: Task,
    examples,
    npm: NPM,
    labels: list[np.ndarray],
    prior: np.ndarray | None,
    mode: Mode,
    config: InferenceConfig,
    notes: dict[str, int],
) -> list[Record]:
    scores = classify(npm, [ex.query for ex in examples], labels, mode=mode, config=config)
    if prior is not None:
        scores = scores - prior  # -inf (no word of the label retrieved) stays -inf
    records = []
    for ex, row in zip(examples, scores, strict=True):
        if np.isneginf(row).all():
            notes["abstained"] = notes.get("abstained", 0) + 1
            records.append(Record(ex.id, ex.query, task.labels[ex.label], "", float("-inf"), False, ""))
            continue
        best = int(np.argmax(row))
        records.append(
            Record(ex.id, ex.query, task.labels[ex.label], task.labels[best], float(row[best]), best == ex.label, "")
        )
    return records


def _open(examples, npm: NPM, mode: Mode, config: InferenceConfig) -> list[Record]:
    """Records of NPM's answers: each example asked as it asks (a question's statements:
    :func:`npmcore.answer.answering.replies`); NPM single answers the first query alone."""
    if mode == "npm":
        asked = [ex.asked or ask(ex.query) for ex in examples]  # a sentence with a mask, as the service asks it
        answers = [reply.answers for reply in replies(npm, asked, config)]
    else:
        answers = predict_tokens(npm, [ex.query for ex in examples], config)
    records = []
    for ex, found in zip(examples, answers, strict=True):
        top = found[0] if found else None
        evidence = str(top.evidence[0].block) if top and top.evidence else ""
        queries = ex.queries if mode == "npm" else (ex.query,)
        passages = [p for q in queries for p in npm.retrieval.passages(q, config.passages)] if config.restrict else []
        searched = in_passages(ex.answers, passages) if config.restrict else None
        record = _open_record(ex, top.text if top else "", top.score if top else 0.0, evidence, searched)
        # nothing answered is sure to be wrong, where answers carry a confidence
        nothing = 0.0 if mode == "npm" and config.scoring == "evidence" and npm.calibrator is not None else None
        records.append(replace(record, confidence=top.confidence if top else nothing))
    return records


def _filled(examples, npm: NPM, filler: MaskFiller, read: bool, config: InferenceConfig) -> list[Record]:
    """Records of a baseline: the head's one word at the mask (after the top BM25 passage with ``read``)."""
    records = []
    for ex, text in zip(examples, filler.fill([ex.query for ex in examples], read), strict=True):
        searched = in_passages(ex.answers, npm.retrieval.passages(ex.query, 1)) if read else None
        records.append(_open_record(ex, text, 0.0, "", searched))
    return records


def _open_record(ex, prediction: str, score: float, evidence: str, searched: bool | None) -> Record:
    """An open-set example's record: right against its gold answers, stale against its stale ones."""
    return Record(
        ex.id,
        ex.query,
        " | ".join(ex.answers),
        prediction,
        score,
        bool(prediction) and exact_match(prediction, ex.answers),
        evidence,
        ex.group,
        (bool(prediction) and exact_match(prediction, ex.stale)) if ex.stale else None,
        searched,
    )
