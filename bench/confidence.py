"""Fit the confidence of evidence scoring's answers on the dev sets, and say how well it is calibrated.

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
``--folds``-fold cross-validation over the facts (seeded) says how well a calibrator fitted without a fact rates the
answer it shows first: per set the expected calibration error, the area under
the risk-coverage curve and the accuracy at 10%, 25%, 50% and 100% coverage
(:mod:`npmcore.evaluation.selective`). Writes ``confidence.npz`` into ``--out`` (default: the encoder's folder)
and logs one MLflow run (experiment npm-confidence in the store): the calibrator, the cross-validated figures and
the answers it was fitted on (``answers.npz``: ``{set}.0`` … ``{set}.3``, each set's features, right, fact, query).
Last line: one JSON object {"sets": {set: {"n", "ece", "aurc", "accuracy_at_coverage", "abstained"}},
"min_confidence", "seconds"} (``abstained``: the share of the answers shown first below ``min_confidence``).
"""

import argparse
import json
import tempfile
import time
from dataclasses import replace
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
from npmcore.answer.answering import answers_by_query  # noqa: E402
from npmcore.answer.confidence import CONFIDENCE_FILE, confidence_features, fit_calibrator, shown  # noqa: E402
from npmcore.answer.inference import NPM, InferenceConfig  # noqa: E402
from npmcore.answer.ranking import Ranker  # noqa: E402
from npmcore.ask.asking import ask  # noqa: E402
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.encoder import default_encoder_path, local_model_dir  # noqa: E402
from npmcore.evaluation.metrics import exact_match  # noqa: E402
from npmcore.evaluation.selective import calibration_report  # noqa: E402
from npmcore.evaluation.tasks import Task, load_task  # noqa: E402
from npmcore.tracking import resolve_encoder, tracking  # noqa: E402
from npmcore.tracking_store import tracking_uri  # noqa: E402

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
QUERIES = 16  # query ids: fact * QUERIES + the query's place among the fact's
# what people type weighs three times its answers in the fit: cross-validated on the dev sets (--limit 1000), the
# typed set's ECE 0.072 weighing the same as every answer, 0.056 at twice, 0.042 at three times, 0.040 at five, the
# benchmarks' within 0.005 up to three times (docs/evaluate.md)
TYPED_WEIGHT = 3.0


def answered(npm: NPM, task: Task, params: EvalParams) -> Answered:
    """(features, right, fact, query) of the best :data:`ANSWERS` answers of every query each fact is asked as
    (:func:`npmcore.answer.answering.answers_by_query`: a question's statements and its paper form, answers of the kind
    it asks for), as the evaluation answers them; a query's rows consecutive, best first."""
    ((_, tau),) = runs_of(task, params)
    config = replace(params.inference(tau, task.name), answers=ANSWERS)
    features, right, fact, query = [], [], [], []
    for lo in range(0, len(task.examples), BATCH):
        examples = task.examples[lo : lo + BATCH]
        asked = [ex.asked or ask(ex.query) for ex in examples]  # a sentence with a mask, as the service asks it
        for n, (ex, mine) in enumerate(zip(examples, answers_by_query(npm, asked, config), strict=True)):
            for k, (text, ranked, answers) in enumerate(mine):
                if not answers:
                    continue
                ranks = [a.rank for a in answers]
                features.append(confidence_features(ranked.phrases, text, max(ranks) + 1, ranked.kinds)[ranks])
                right += [exact_match(a.text, ex.answers) for a in answers]
                fact += [lo + n] * len(answers)
                query += [(lo + n) * QUERIES + k] * len(answers)
    return np.concatenate(features), np.array(right, dtype=bool), np.array(fact), np.array(query)


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
            sets[name] = answered(npm, task, params)
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
        cv = cross_validated(sets, args.folds, ranker, fingerprint)
        calibrator = fit_calibrator(features, right, facts, queries, ranker, fingerprint, provenance, weights)
        report = {
            name: {
                **calibration_report(confidence, right),
                "abstained": round(float((confidence < calibrator.min_confidence).mean()), 4),
            }
            for name, (confidence, right) in cv.items()
        }
        out.mkdir(parents=True, exist_ok=True)
        path = out / CONFIDENCE_FILE
        calibrator.save(path)
        with tracking(tracking_uri(store), "npm-confidence"), mlflow.start_run(run_name="confidence/fit"):
            mlflow.log_params({"model": args.model or "default", "limit": args.limit, "folds": args.folds})
            mlflow.log_metric("min_confidence", calibrator.min_confidence)
            for name, row in report.items():
                mlflow.log_metrics({f"{name}.ece": row["ece"], f"{name}.aurc": row["aurc"]})
                mlflow.log_metrics({f"{name}.accuracy_at_{c}": v for c, v in row["accuracy_at_coverage"].items()})
            mlflow.log_artifact(str(path))
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
    print(f"wrote {path} (min_confidence {calibrator.min_confidence:.3f})")
    seconds = round(time.perf_counter() - started)
    print(json.dumps({"sets": report, "min_confidence": round(calibrator.min_confidence, 4), "seconds": seconds}))


def weights_of(sets: dict[str, Answered], held: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Each answer's weight in the fit, in :func:`pooled`'s order: :data:`TYPED_WEIGHT` for the typed sets', else 1."""
    return np.concatenate([
        np.full(len(right) if held is None else held[name].sum(), TYPED_WEIGHT if name in TYPED else 1.0)
        for name, (_, right, _, _) in sets.items()
    ])  # fmt: skip


def cross_validated(
    sets: dict[str, Answered], folds: int, ranker: Ranker, fingerprint: str
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per set, the confidence of each fact's answer shown first (:func:`npmcore.answer.confidence.shown`) and
    whether it is right, rated by a calibrator fitted on the other folds' facts (facts drawn into folds, seeded)."""
    rng = np.random.default_rng(0)
    fold_of = {name: rng.integers(0, folds, fact.max() + 1)[fact] for name, (_, _, fact, _) in sets.items()}
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
    return out


if __name__ == "__main__":
    main()
