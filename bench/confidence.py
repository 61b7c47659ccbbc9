"""Fit the confidence of evidence scoring's answers on the dev sets, and say how well it is calibrated.

Usage: python bench/confidence.py --dated-indexes INDEX_2015 INDEX_2020 [INDEX_COMBINED] [--model PATH] [--store DIR]
                                  [--limit 300] [--out DIR] [--folds 5]

Answers every dev fact as the evaluation does (``npm`` restricted to the top BM25 passages, evidence scoring
with the encoder's ``ranker.json``), in the settings its users meet: the verbatim, paraphrase and cloze dev
sets against the index of the embedded default corpus (the demo's; built or reused in ``--store``), and, as
``bench/paper_table.py`` asks them, the dev splits of T-REx, Google-RE and KAMEL against the September 2020
dump's index (10 passages, query words allowed), NQ and TriviaQA against it (10 passages), the temporal facts
against it and entity translation against the May 2015 one (3 passages), and, given the index of the 2020 dump and
Simple English Wikipedia, the five knowledge tasks against it as the paper table asks them there:
``--limit`` seeded facts of each (``bench/ranker.py``'s ``DATED``). Each answer among a fact's best five is right
when it is an exact match of a gold answer (the evaluation's test).

:func:`npmcore.answer.confidence.fit_calibrator` fits gradient-boosted trees on all of them (every answer weighing the
same) and chooses ``min_confidence``; ``--folds``-fold cross-validation over the facts (seeded) says how well a
calibrator fitted without a fact rates its first answer: per set the expected calibration error, the area under
the risk-coverage curve and the accuracy at 10%, 25%, 50% and 100% coverage
(:mod:`npmcore.evaluation.selective`). Writes ``confidence.npz`` into ``--out`` (default: the encoder's folder)
and logs one MLflow run (experiment npm-confidence in the store): the calibrator and the cross-validated figures.
Last line: one JSON object {"sets": {set: {"n", "ece", "aurc", "accuracy_at_coverage", "abstained"}},
"min_confidence", "seconds"} (``abstained``: the share of first answers below ``min_confidence``).
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
from ranker import CLOZE_SETS, DATED, dev_tasks  # noqa: E402

from flows.evaluate import EvalParams, runs_of, task_indexes  # noqa: E402
from flows.params import ClusterParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.answer.confidence import CONFIDENCE_FILE, confidence_features, fit_calibrator  # noqa: E402
from npmcore.answer.inference import NPM  # noqa: E402
from npmcore.answer.ranking import Ranker  # noqa: E402
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.encoder import default_encoder_path, local_model_dir  # noqa: E402
from npmcore.evaluation.metrics import exact_match  # noqa: E402
from npmcore.evaluation.selective import calibration_report  # noqa: E402
from npmcore.evaluation.tasks import Task  # noqa: E402
from npmcore.tracking import resolve_encoder, tracking  # noqa: E402
from npmcore.tracking_store import tracking_uri  # noqa: E402

ANSWERS = 5  # answers per fact fitted on: the service shows five, each with its confidence
BATCH = 32


def answered(npm: NPM, task: Task, params: EvalParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, right, fact) of each fact's best :data:`ANSWERS` answers (first answers first), as the
    evaluation answers them."""
    ((_, tau),) = runs_of(task, params)
    config = replace(params.inference(tau, task.name), answers=ANSWERS)
    features, right, fact = [], [], []
    for lo in range(0, len(task.examples), BATCH):
        examples = task.examples[lo : lo + BATCH]
        for n, (ex, phrases) in enumerate(zip(examples, npm.phrases([e.query for e in examples], config), strict=True)):
            answers = npm.top_answers(ex.query, phrases, config)
            features.append(confidence_features(phrases, ex.query, ANSWERS))
            right += [exact_match(a.text, ex.answers) for a in answers]
            fact += [lo + n] * len(answers)
    return np.concatenate(features), np.array(right, dtype=bool), np.array(fact)


def firsts(fact: np.ndarray) -> np.ndarray:
    """Which rows are a fact's first answer (rows of one fact are consecutive, best first)."""
    return np.r_[True, fact[1:] != fact[:-1]] if len(fact) else np.zeros(0, dtype=bool)


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
    if len(args.dated_indexes) not in (2, 3):
        raise SystemExit("--dated-indexes takes the 2015 and 2020 indexes, and the combined one")
    started = time.perf_counter()
    if args.out is None and args.model is not None and not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model} is not a folder to write {CONFIDENCE_FILE} into: give --out")
    out = args.out or Path(local_model_dir(args.model or str(default_encoder_path())))
    tasks = {name: task for name, task in dev_tasks(args.limit, len(args.dated_indexes)).items()
             if name in CLOZE_SETS or name in DATED}  # fmt: skip
    sets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = args.store or tmp
        encoder = resolve_encoder(args.model, store)
        base = EvalParams(tasks=list(tasks), store=store, model=args.model)
        with dask_cluster(None, None) as address:
            cluster = base.model_copy(update={"cluster": ClusterParams(dask_address=address)})
            default_index = task_indexes(tasks["cloze"], cluster)[0]
        npms: dict[str, NPM] = {}
        for name, task in tasks.items():
            _, which, passages, query_words = DATED.get(name, (None, None, base.passages, False))
            index = default_index if which is None else args.dated_indexes[which]
            npm = npms.setdefault(index, NPM(index, encoder=encoder))
            params = base.model_copy(update={"passages": passages, "exclude_query_words": not query_words})
            sets[name] = answered(npm, task, params)
            first = firsts(sets[name][2])
            print(f"{name}: {first.sum()} facts, first answer right for {sets[name][1][first].mean():.3f}", flush=True)
        ranker = next(iter(npms.values())).ranker
        fingerprint = next(iter(npms.values())).fingerprint
        features, right = (np.concatenate([s[i] for s in sets.values()]) for i in (0, 1))
        facts = np.concatenate([fact + 100_000 * i for i, (_, _, fact) in enumerate(sets.values())])
        provenance = {
            "encoder": args.model or "default",
            "sets": {name: int(firsts(fact).sum()) for name, (_, _, fact) in sets.items()},
            "limit": args.limit,
            "answers": ANSWERS,
            "fitted_by": "bench/confidence.py",
        }
        cv = cross_validated(sets, args.folds, ranker, fingerprint)
        calibrator = fit_calibrator(features, right, facts, firsts(facts), ranker, fingerprint, provenance)
        report = {
            name: {
                **calibration_report(confidence, sets[name][1][firsts(sets[name][2])]),
                "abstained": round(float((confidence < calibrator.min_confidence).mean()), 4),
            }
            for name, confidence in cv.items()
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
    for name, row in report.items():
        at = row["accuracy_at_coverage"]
        accuracy = " ".join(f"{at[c]:.3f}" for c in ("0.1", "0.25", "0.5", "1.0"))
        print(f"{name:<19} n={row['n']:<4} ECE {row['ece']:.3f} AURC {row['aurc']:.3f} "
              f"accuracy at 10/25/50/100%: {accuracy}; abstains {row['abstained']:.2f}")  # fmt: skip
    print(f"wrote {path} (min_confidence {calibrator.min_confidence:.3f})")
    seconds = round(time.perf_counter() - started)
    print(json.dumps({"sets": report, "min_confidence": round(calibrator.min_confidence, 4), "seconds": seconds}))


def cross_validated(sets: dict, folds: int, ranker: Ranker, fingerprint: str) -> dict[str, np.ndarray]:
    """Per set, the confidence of each fact's first answer by a calibrator fitted on the other folds' facts
    (facts drawn into folds, seeded)."""
    rng = np.random.default_rng(0)
    fold_of = {name: rng.integers(0, folds, fact.max() + 1)[fact] for name, (_, _, fact) in sets.items()}
    out = {name: np.zeros(int(firsts(fact).sum())) for name, (_, _, fact) in sets.items()}
    for k in range(folds):
        train = [(x[fold_of[n] != k], y[fold_of[n] != k], f[fold_of[n] != k] + 100_000 * i)
                 for i, (n, (x, y, f)) in enumerate(sets.items())]  # fmt: skip
        x, y, f = (np.concatenate(parts) for parts in zip(*train, strict=True))
        calibrator = fit_calibrator(x, y, f, firsts(f), ranker, fingerprint)
        for name, (features, _, fact) in sets.items():
            first = firsts(fact)
            out[name][(fold_of[name] == k)[first]] = calibrator.confidence(features[(fold_of[name] == k) & first])
    return out


if __name__ == "__main__":
    main()
