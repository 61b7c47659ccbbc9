"""Fit the confidence of evidence scoring's answers and of the replies shown on the dev sets; say how well it holds.

Usage: python bench/confidence.py --dated-indexes INDEX_2015 INDEX_2020 INDEX_COMBINED [--model PATH] [--store DIR]
                                  [--limit 300] [--out DIR] [--folds 5]

Answers every dev fact as the evaluation does (``npm`` restricted to the top BM25 passages, evidence scoring
with the encoder's ``ranker.json``), in the settings its users meet: the verbatim, paraphrase and cloze dev
sets against the index of the embedded default corpus (the demo's; built or reused in ``--store``), and, as
``bench/paper_table.py`` asks them, the dev splits of T-REx, Google-RE and KAMEL against the September 2020
dump's index (10 passages, query words allowed), NQ and TriviaQA against it (10 passages), the temporal facts
against it and entity translation against the May 2015 one (3 passages), and, given the index of the 2020 dump and
Simple English Wikipedia, the five knowledge tasks against it as the paper table asks them there:
``--limit`` seeded facts of each (``bench/ranker.py``'s ``DATED``); and against that combined index, as the query
service asks them (:data:`ASKED`): the dev sets of queries people type (``bench/data/typed-dev.jsonl``: each fact
typed as a question, asked as its statements and the paper's question, and as a statement; ``everyday-dev.jsonl``:
what a person knows, typed without reading the articles, as a question, as keywords and as a statement; the
service's defaults),
and KAMEL, NQ and TriviaQA asked as statements as the paper table's statements row asks them. Each answer among the
best five of each query a fact is asked as is right when it is an exact match of a gold answer (the evaluation's
test); a question's answers shown are those of its query whose first answer is the most confident
(:func:`npmcore.answer.confidence.shown`).

:func:`npmcore.answer.confidence.fit_calibrator` fits gradient-boosted trees on all of them (every answer weighing the
same, the typed sets' :data:`TYPED_WEIGHT` times: what the service is asked) and chooses ``min_confidence``;
``--folds``-fold cross-validation over the facts (seeded; the lines that type one fact several ways in one fold) says
how well a calibrator fitted without a fact rates the answer it shows first: per set the expected calibration error,
the area under the risk-coverage curve and the accuracy at 10%, 25%, 50% and 100% coverage
(:mod:`npmcore.evaluation.selective`). Then the **reply's confidence** (:mod:`npmcore.answer.sure`): each fact's
reply as the service makes it (its readings' names, :func:`npmcore.answer.answering.named`, the first two checked the
other way round), its answers rated by the cross-validated calibrator, a logistic regression of each name's vote and
check fitted on them (the typed sets :data:`TYPED_WEIGHT` times), for each of :data:`CHECK_FROM`; its
``min_confidence`` the lowest at which the answers shown as sure to the typed sets are right at least 9 times in 10 for
each way of typing, the ``check_from`` kept the one that then leaves most of them right and sure; the same folds rate
the answer each reply shows. Writes ``confidence.npz`` and ``sure.json`` into ``--out`` (default: the encoder's
folder) and logs one MLflow run (experiment npm-confidence in the store): both files, the cross-validated figures
and the answers the calibrator was fitted on (``answers.npz``: ``{set}.0`` … ``{set}.3``, each set's features, right,
fact, query). Last line: one JSON object {"sets": {set: {"n", "ece", "aurc", "accuracy_at_coverage", "abstained",
"reply": {"n", "ece", "aurc", "accuracy_at_coverage", "shown": {"min_confidence", "sure", "precision",
"right_greyed"}}}}, "min_confidence", "sure": {"min_confidence", "check_from", "tried"}, "seconds"} (``abstained``:
the share of the answers shown first below the calibrator's ``min_confidence``; ``reply``: the answers the service
shows, rated by the reply's confidence).
"""

import argparse
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
from paper_table import STATEMENTS_PASSAGES  # noqa: E402
from ranker import CLOZE_SETS, DATA, DATED, dev_tasks  # noqa: E402

from flows.evaluate import EvalParams, runs_of, task_indexes  # noqa: E402
from flows.params import ClusterParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.answer.answering import CHECKED, Named, answers_by_query, groups_of, named, voted  # noqa: E402
from npmcore.answer.checks import Check  # noqa: E402
from npmcore.answer.confidence import (  # noqa: E402
    CONFIDENCE_FEATURES,
    CONFIDENCE_FILE,
    Calibrator,
    confidence_features,
    fit_calibrator,
    shown,
)
from npmcore.answer.inference import NPM, Answer, InferenceConfig  # noqa: E402
from npmcore.answer.ranking import Ranker  # noqa: E402
from npmcore.answer.sure import SURE_FEATURES, SURE_FILE, Sure, fit_sure, precision_threshold  # noqa: E402
from npmcore.ask.asking import (
    Asked,  # noqa: E402
    ask,  # noqa: E402
)
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.encoder import default_encoder_path, local_model_dir  # noqa: E402
from npmcore.evaluation.metrics import exact_match  # noqa: E402
from npmcore.evaluation.selective import calibration_report, shown_report  # noqa: E402
from npmcore.evaluation.tasks import Task, load_task  # noqa: E402
from npmcore.tracking import resolve_encoder, tracking  # noqa: E402
from npmcore.tracking_store import tracking_uri  # noqa: E402
from npmcore.vocab import spelled  # noqa: E402

ANSWERS = 5  # answers per query fitted on: the service shows five, each with its confidence
BATCH = 32
# the dev sets of queries people type (bench/data/{name}-dev.jsonl), asked with the query service's defaults: written
# from the articles (questions and statements), and what a person knows, without reading them (questions, keywords
# and statements)
TYPED = ("typed", "everyday")
# the sets asked as the query service asks them, on the combined index: set -> (task, passages, query words allowed)
ASKED = {name: ("cloze", InferenceConfig().passages, False) for name in TYPED} | {
    f"{task}_statements": (task, passages, False) for task, passages in STATEMENTS_PASSAGES.items()
}
Answered = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # features, right, fact, query of each answer
NAMES = 5  # of each fact's reply, the names the reply's confidence is fitted on
CHECK_FROM = (0.1, 0.2, 0.3, 0.4)  # the confidences from which a name may be checked, each tried (the best is kept)


@dataclass(frozen=True)
class Voted:
    """A fact as its reply votes on it: how it was asked, each query's answers and their rows among the set's answers,
    the checks of its first names by what they spell, and its gold answers."""

    id: str
    asked: Asked
    answers: tuple[tuple[Answer, ...], ...]
    rows: tuple[tuple[int, ...], ...]
    checks: dict[str, Check]
    gold: tuple[str, ...]
    exclude_query_words: bool


QUERIES = 16  # query ids: fact * QUERIES + the query's place among the fact's
# what people type weighs three times its answers in the fit: cross-validated on the dev sets (--limit 1000), the
# typed set's ECE 0.072 weighing the same as every answer, 0.056 at twice, 0.042 at three times, 0.040 at five, the
# benchmarks' within 0.005 up to three times (docs/evaluate.md)
TYPED_WEIGHT = 3.0
TYPED_FORMS = ("question", "keywords", "statement")  # the last part of a typed line's id: how its fact was typed


def answered(npm: NPM, task: Task, params: EvalParams) -> tuple[Answered, list[Voted]]:
    """(features, right, fact, query) of the best :data:`ANSWERS` answers of every query each fact is asked as
    (:func:`npmcore.answer.answering.answers_by_query`: a question's statements and its paper form, answers of the kind
    it asks for), as the evaluation answers them, a query's rows consecutive, best first; and each fact as its reply
    votes on it, its first names checked (:func:`npmcore.answer.answering.named`)."""
    ((_, tau),) = runs_of(task, params)
    config = replace(params.inference(tau, task.name), answers=ANSWERS)
    features, right, fact, query, facts = [], [], [], [], []
    for lo in range(0, len(task.examples), BATCH):
        examples = task.examples[lo : lo + BATCH]
        asked = [ex.asked or ask(ex.query) for ex in examples]  # a sentence with a mask, as the service asks it
        found = list(answers_by_query(npm, asked, config))
        checked = named(npm, asked, found, config, check_from=0.0, checked=CHECKED + 1)
        for n, (ex, a, mine, groups) in enumerate(zip(examples, asked, found, checked, strict=True)):
            rows = []
            for k, (text, ranked, answers) in enumerate(mine):
                rows.append(tuple(range(len(right), len(right) + len(answers))))
                if not answers:
                    continue
                ranks = [a.rank for a in answers]
                features.append(confidence_features(ranked.phrases, text, max(ranks) + 1, ranked.kinds)[ranks])
                right += [exact_match(a.text, ex.answers) for a in answers]
                fact += [lo + n] * len(answers)
                query += [(lo + n) * QUERIES + k] * len(answers)
            checks = {spelled(one.name.best.text): one.check for group in groups for one in group if one.check}
            answers = tuple(tuple(answers) for _, _, answers in mine)
            facts.append(Voted(ex.id, a, answers, tuple(rows), checks, tuple(ex.answers), config.exclude_query_words))
    width = len(CONFIDENCE_FEATURES)
    answered = (
        np.concatenate(features) if features else np.empty((0, width)),
        np.array(right, dtype=bool),
        np.array(fact, dtype=np.int64),
        np.array(query, dtype=np.int64),
    )
    return answered, facts


def reply_rows(
    facts: list[Voted], confidence: np.ndarray, check_from: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, right, fact) of the first :data:`NAMES` names of each fact's reply (its first group's: a yes/no
    question's first side), its answers rated ``confidence`` (by their rows), those of its first
    :data:`~npmcore.answer.answering.CHECKED` names from ``check_from`` checked, as
    :func:`npmcore.answer.answering.replies` rates them."""
    features, right, fact = [], [], []
    for f, v in enumerate(facts):
        answers = [
            [replace(a, confidence=float(confidence[r])) for a, r in zip(mine, rows, strict=True)]
            for mine, rows in zip(v.answers, v.rows, strict=True)
        ]
        groups = groups_of(v.asked)
        if not groups:
            continue
        names = voted(v.asked, answers, groups[0], v.exclude_query_words)
        for k, name in enumerate(names[:NAMES]):
            sure = k < CHECKED and (name.best.confidence or 0.0) >= check_from
            check = v.checks.get(spelled(name.best.text)) if sure else None
            features.append(Named(name, groups[0], check).features())
            right.append(exact_match(name.best.text, v.gold))
            fact.append(f)
    return np.array(features).reshape(-1, len(SURE_FEATURES)), np.array(right, dtype=bool), np.array(fact)


def asked_tasks(limit: int) -> dict[str, Task]:
    """The sets of :data:`ASKED`: the dev sets people type, and ``limit`` seeded dev facts of each task asked as
    statements."""
    tasks = {name: load_task("cloze", limit=None, path=str(DATA / f"{name}-dev.jsonl")) for name in TYPED}
    for name, (task, *_) in ASKED.items():
        if name not in TYPED:
            tasks[name] = load_task(task, limit=limit, seed=0, split="dev", form="statements")
    return tasks


def pooled(sets: dict[str, Answered], held: dict[str, np.ndarray] | None = None) -> Answered:
    """The sets' answers in one (the rows ``held`` of each, where given), facts and queries numbered apart."""
    parts = []
    for i, (name, (x, y, fact, query)) in enumerate(sets.items()):
        keep = np.ones(len(y), dtype=bool) if held is None else held[name]
        parts.append((x[keep], y[keep], fact[keep] + 100_000 * i, query[keep] + 100_000 * QUERIES * i))
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="encoder (path, cached name or models:/…); default: shipped")
    parser.add_argument("--store", default=None, help="store of the default corpus's index and the MLflow run")
    parser.add_argument(
        "--dated-indexes", nargs="+", required=True, metavar="INDEX",
        help="the indexes bench/paper_table.py builds: of 2015, of 2020, and of 2020 with Simple English Wikipedia",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, default=300, help="dev facts per dated set (seeded sample)")
    parser.add_argument("--out", type=Path, default=None, help="folder for confidence.npz (default: the encoder's)")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    if len(args.dated_indexes) != 3:
        raise SystemExit("--dated-indexes takes the 2015 and 2020 indexes, and the combined one")
    started = time.perf_counter()
    if args.out is None and args.model is not None and not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model} is not a folder to write {CONFIDENCE_FILE} into: give --out")
    out = args.out or Path(local_model_dir(args.model or str(default_encoder_path())))
    tasks = {name: task for name, task in dev_tasks(args.limit, len(args.dated_indexes)).items()
             if name in CLOZE_SETS or name in DATED}  # fmt: skip
    tasks |= asked_tasks(args.limit)
    sets: dict[str, Answered] = {}
    replies: dict[str, list[Voted]] = {}
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = args.store or tmp
        encoder = resolve_encoder(args.model, store)
        base = EvalParams(tasks=list(tasks), store=store, model=args.model)
        with dask_cluster(None, None) as address:
            cluster = base.model_copy(update={"cluster": ClusterParams(dask_address=address)})
            default_index = task_indexes(tasks["cloze"], cluster)[0]
        npms: dict[str, NPM] = {}
        for name, task in tasks.items():
            if name in ASKED:
                (_, passages, query_words), which = ASKED[name], 2
            else:
                _, which, passages, query_words = DATED.get(name, (None, None, base.passages, False))
            index = default_index if which is None else args.dated_indexes[which]
            npm = npms.setdefault(index, NPM(index, encoder=encoder))
            params = base.model_copy(update={"passages": passages, "exclude_query_words": not query_words})
            sets[name], replies[name] = answered(npm, task, params)
            _, right, fact, query = sets[name]
            first = shown(np.zeros(len(right)), fact, query)  # the first query's first answer, before any fit
            print(f"{name}: {first.sum()} facts, first answer right for {right[first].mean():.3f}", flush=True)
        ranker = next(iter(npms.values())).ranker
        fingerprint = next(iter(npms.values())).fingerprint
        features, right, facts, queries = pooled(sets)
        weights = weights_of(sets)
        provenance = {
            "encoder": args.model or "default",
            "sets": {name: len(np.unique(fact)) for name, (_, _, fact, _) in sets.items()},
            "limit": args.limit,
            "answers": ANSWERS,
            "typed_weight": TYPED_WEIGHT,
            "fitted_by": "bench/confidence.py",
        }
        groups = {name: facts_of([v.id for v in facts]) for name, facts in replies.items()}
        cv, rated, fold_of = cross_validated(sets, groups, args.folds, ranker, fingerprint)
        calibrator = fit_calibrator(features, right, facts, queries, ranker, fingerprint, provenance, weights)
        sure, shown_cv, choice = reply_confidence(replies, rated, fold_of, args.folds, calibrator, provenance)
        report = {
            name: {
                **calibration_report(confidence, right),
                "abstained": round(float((confidence < calibrator.min_confidence).mean()), 4),
            }
            for name, (confidence, right) in cv.items()
        }
        for name, (confidence, right_shown) in shown_cv.items():
            report[name]["reply"] = {
                **calibration_report(confidence, right_shown),
                "shown": shown_report(confidence, right_shown, sure.min_confidence),
            }
        out.mkdir(parents=True, exist_ok=True)
        path = out / CONFIDENCE_FILE
        calibrator.save(path)
        sure.save(out / SURE_FILE)
        with tracking(tracking_uri(store), "npm-confidence"), mlflow.start_run(run_name="confidence/fit"):
            mlflow.log_params({"model": args.model or "default", "limit": args.limit, "folds": args.folds})
            mlflow.log_metric("min_confidence", calibrator.min_confidence)
            for name, row in report.items():
                mlflow.log_metrics({f"{name}.ece": row["ece"], f"{name}.aurc": row["aurc"]})
                mlflow.log_metrics({f"{name}.accuracy_at_{c}": v for c, v in row["accuracy_at_coverage"].items()})
            mlflow.log_metrics({"sure.min_confidence": sure.min_confidence, "sure.check_from": sure.check_from})
            for name, row in report.items():
                mlflow.log_metrics(
                    {f"{name}.reply.ece": row["reply"]["ece"], f"{name}.reply.aurc": row["reply"]["aurc"]}
                )
                shown_now = row["reply"]["shown"].items()
                mlflow.log_metrics({f"{name}.reply.shown.{k}": v for k, v in shown_now if v is not None})
            mlflow.log_artifact(str(path))
            mlflow.log_artifact(str(out / SURE_FILE))
            fitted_on = Path(tmp) / "answers.npz"  # what it was fitted on: each set's features, right, fact, query
            np.savez_compressed(
                fitted_on, **{f"{name}.{i}": column for name, s in sets.items() for i, column in enumerate(s)}
            )
            mlflow.log_artifact(str(fitted_on))
    for name, row in report.items():
        at = row["accuracy_at_coverage"]
        accuracy = " ".join(f"{at[c]:.3f}" for c in ("0.1", "0.25", "0.5", "1.0"))
        print(f"{name:<19} n={row['n']:<4} ECE {row['ece']:.3f} AURC {row['aurc']:.3f} "
              f"accuracy at 10/25/50/100%: {accuracy}; abstains {row['abstained']:.2f}")  # fmt: skip
    for name, row in report.items():
        reply, figures = row["reply"], row["reply"]["shown"]
        print(f"{name:<19} reply: ECE {reply['ece']:.3f} right {reply['accuracy_at_coverage']['1.0']:.3f}; "
              f"sure {figures['sure']:.2f}, right {figures['precision']}; "
              f"right greyed {figures['right_greyed']}")  # fmt: skip
    print(f"wrote {path} (min_confidence {calibrator.min_confidence:.3f}) and {out / SURE_FILE} (min_confidence "
          f"{sure.min_confidence:.3f}, checked from {sure.check_from}; tried: {choice})")  # fmt: skip
    seconds = round(time.perf_counter() - started)
    print(json.dumps({
        "sets": report,
        "min_confidence": round(calibrator.min_confidence, 4),
        "sure": {"min_confidence": round(sure.min_confidence, 4), "check_from": sure.check_from, "tried": choice},
        "seconds": seconds,
    }))  # fmt: skip


def weights_of(sets: dict[str, Answered], held: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Each answer's weight in the fit, in :func:`pooled`'s order: :data:`TYPED_WEIGHT` for the typed sets', else 1."""
    return np.concatenate([
        np.full(len(right) if held is None else held[name].sum(), TYPED_WEIGHT if name in TYPED else 1.0)
        for name, (_, right, _, _) in sets.items()
    ])  # fmt: skip


def cross_validated(
    sets: dict[str, Answered], groups: dict[str, np.ndarray], folds: int, ranker: Ranker, fingerprint: str
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per set, the confidence of each fact's answer shown first (:func:`npmcore.answer.confidence.shown`) and
    whether it is right, rated by a calibrator fitted on the other folds' facts (``groups``: each line's fact, the
    ways one fact is typed in one fold; facts drawn into folds, seeded); every answer's confidence so rated; each
    answer's fold."""
    rng = np.random.default_rng(0)
    fold_of = {
        name: rng.integers(0, folds, groups[name].max() + 1)[groups[name][fact]]
        for name, (_, _, fact, _) in sets.items()
    }
    rated = {name: np.zeros(len(right)) for name, (_, right, _, _) in sets.items()}
    for k in range(folds):
        held = {name: fold != k for name, fold in fold_of.items()}
        calibrator = fit_calibrator(*pooled(sets, held), ranker, fingerprint, weights=weights_of(sets, held))
        for name, (features, _, _, _) in sets.items():
            rated[name][fold_of[name] == k] = calibrator.confidence(features[fold_of[name] == k])
    out = {}
    for name, (_, right, fact, query) in sets.items():
        first = shown(rated[name], fact, query)
        out[name] = (rated[name][first], right[first])
    return out, rated, fold_of


def reply_confidence(
    replies: dict[str, list[Voted]],
    rated: dict[str, np.ndarray],
    fold_of: dict[str, np.ndarray],
    folds: int,
    calibrator: Calibrator,
    provenance: dict,
) -> tuple[Sure, dict[str, tuple[np.ndarray, np.ndarray]], dict]:
    """The reply's confidence (:mod:`npmcore.answer.sure`), fitted on each fact's names rated by the calibrator's
    cross-validated confidences (the typed sets :data:`TYPED_WEIGHT` times), for each of :data:`CHECK_FROM`; per
    set, the confidence of each fact's answer shown (its most confident name) and whether it is right, as the same
    folds rate them. ``min_confidence``: the lowest from which the shown answers of the typed sets are right at least
    :data:`~npmcore.answer.sure.PRECISION` of the time for each way of typing (question, keywords, statement; the id's
    last part); kept: the ``check_from`` whose typed answers are then right and sure most often, the highest on a
    tie."""
    best = None
    tried = {}
    for check_from in CHECK_FROM:
        rows = {name: reply_rows(facts, rated[name], check_from) for name, facts in replies.items()}
        fact_fold = {name: _fact_folds(replies[name], fold_of[name]) for name in replies}
        shown_cv = {}
        for name, (x, y, fact) in rows.items():
            confidence = np.zeros(len(y))
            for k in range(folds):
                train = {n: fact_fold[n][f] != k for n, (_, _, f) in rows.items()}
                xs = np.concatenate([rows[n][0][t] for n, t in train.items()])
                ys = np.concatenate([rows[n][1][t] for n, t in train.items()])
                ws = np.concatenate([np.full(t.sum(), TYPED_WEIGHT if n in TYPED else 1.0) for n, t in train.items()])
                held = fact_fold[name][fact] == k
                confidence[held] = fit_sure(xs, ys, ws, calibrator, 1.0, check_from, {}).confidence(x[held])
            shown_cv[name] = _first_names(confidence, y, fact, len(replies[name]))
        typed_confidence = np.concatenate([shown_cv[n][0] for n in TYPED])
        typed_right = np.concatenate([shown_cv[n][1] for n in TYPED])
        form = np.array([v.id.rsplit("-", 1)[-1] for n in TYPED for v in replies[n]])  # TYPED_FORMS
        threshold = max(  # each way of typing right at least PRECISION of the time
            precision_threshold(typed_confidence[form == f], typed_right[form == f]) for f in np.unique(form)
        )
        score = float((typed_right & (typed_confidence >= threshold)).mean())
        tried[check_from] = {"min_confidence": round(threshold, 4), "right_and_sure": round(score, 4)}
        if best is None or score >= best[0]:
            best = (score, check_from, threshold, rows, shown_cv)
    _, check_from, threshold, rows, shown_cv = best
    x = np.concatenate([r[0] for r in rows.values()])
    y = np.concatenate([r[1] for r in rows.values()])
    w = np.concatenate([np.full(len(r[1]), TYPED_WEIGHT if n in TYPED else 1.0) for n, r in rows.items()])
    record = {**provenance, "names": NAMES, "checked": CHECKED, "tried": tried}
    return fit_sure(x, y, w, calibrator, threshold, check_from, record), shown_cv, tried


def facts_of(ids: list[str]) -> np.ndarray:
    """Each line's fact: the lines that type one fact several ways ("everyday-387-question", "everyday-387-keywords",
    "everyday-387-statement") are one, so that no fold rates a line by a fit that saw the same fact typed another
    way; any other line is its own."""
    key = [i.rsplit("-", 1)[0] if i.rsplit("-", 1)[-1] in TYPED_FORMS else i for i in ids]
    index = {k: n for n, k in enumerate(dict.fromkeys(key))}
    return np.array([index[k] for k in key] or [0], dtype=np.int64)


def _fact_folds(facts: list[Voted], fold: np.ndarray) -> np.ndarray:
    """Each fact's fold, as its answers' (a fact without answers: fold 0)."""
    rows = [next((r[0] for r in v.rows if r), None) for v in facts]
    return np.array([0 if r is None else int(fold[r]) for r in rows], dtype=np.int64)


def _first_names(
    confidence: np.ndarray, right: np.ndarray, fact: np.ndarray, facts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per fact, the confidence of its most confident name and whether it is right (0 and wrong without names)."""
    best_confidence, best_right = np.zeros(facts), np.zeros(facts, dtype=bool)
    for c, r, f in zip(confidence, right, fact, strict=True):
        if c > best_confidence[f]:
            best_confidence[f], best_right[f] = c, r
    return best_confidence, best_right


if __name__ == "__main__":
    main()
