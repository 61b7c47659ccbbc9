"""Questions people type, asked as the query service asks them, against the same facts typed as statements.

Usage: python bench/asking.py --index INDEX [--split dev|test] [--ask statements|paper] [--passages N]

``bench/data/typed-{split}.jsonl`` holds facts about articles of the two datastores of the paper table (the
September 2020 dump and Simple English Wikipedia of December 2021), each typed by hand twice as a person types into a
search box: as a question ("where was john langdon born") and as a statement with one ``[MASK]`` ("John Langdon was
born in [MASK]."), with the answer as its article writes it (500 facts of dev, 100 of test; written for this
benchmark from the articles, not from any benchmark file). Every line is answered as the query service answers it
(:meth:`npmcore.answer.inference.NPM.answer`, through the evaluation's cloze task: its defaults, ``--passages`` top
BM25 passages, evidence scoring and the encoder's calibrator), against ``--index`` (the paper table's combined
index, ``2020-09+simplewiki-2021-12``); a question is asked ``--ask`` (statements: its statements and the paper's
question, the answers of the most confident; paper: the paper's question alone).

Per form: ``exact_match`` of the answer shown first, ``ceiling`` (a gold answer in the passages searched), the
calibration of its confidence (ECE, AURC, accuracy at 10/25/50/100% coverage), ``abstained`` (shown "not in this
corpus": below the calibrator's ``min_confidence``), ``right_abstained`` (right answers withheld, as a share of
the right ones), ``given_right`` and ``abstained_right`` (the share right of the answers given, and of the best
guesses shown greyed). Last line, one JSON object: ``{"split", "ask", "passages", "index", "n", "questions": {…},
"statements": {…}, "gap", "seconds"}`` (``gap``: statements' exact match minus questions').
"""

import argparse
import json
import time

from npmcore.runtime import configure_environment

configure_environment()

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from npmcore.answer.asking import FORMS  # noqa: E402
from npmcore.answer.inference import NPM, InferenceConfig  # noqa: E402
from npmcore.evaluation.run import Record, run_task  # noqa: E402
from npmcore.evaluation.selective import calibration_report  # noqa: E402
from npmcore.evaluation.tasks import load_task  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


def summary(records: list[Record], min_confidence: float | None) -> dict:
    """A form's exact match, ceiling, calibration and abstentions."""
    right = np.array([r.correct for r in records])
    confidence = np.array([r.confidence or 0.0 for r in records])
    withheld = confidence < (min_confidence if min_confidence is not None else 0.0)
    return {
        "n": len(records),
        "exact_match": round(float(right.mean()), 4),
        "ceiling": round(float(np.mean([bool(r.in_passages) for r in records])), 4),
        "calibration": calibration_report(confidence, right),
        "mean_confidence": round(float(confidence.mean()), 4),
        "abstained": round(float(withheld.mean()), 4),
        "right_abstained": round(float((withheld & right).sum() / max(right.sum(), 1)), 4),
        "given_right": round(float(right[~withheld].mean()), 4) if (~withheld).any() else None,
        "abstained_right": round(float(right[withheld].mean()), 4) if withheld.any() else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", required=True, help="the combined index of bench/paper_table.py")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--ask", choices=FORMS, default="statements", help="how a question is asked")
    parser.add_argument("--passages", type=int, default=InferenceConfig().passages, help="the service's default")
    args = parser.parse_args()
    started = time.perf_counter()
    task = load_task("cloze", limit=None, path=DATA / f"typed-{args.split}.jsonl", form=args.ask)
    npm = NPM(args.index)
    result = run_task(task, npm, "npm", InferenceConfig(passages=args.passages))
    threshold = None if npm.calibrator is None else npm.calibrator.min_confidence
    forms = {
        name: summary([r for r in result.records if r.id.endswith(f"-{form}")], threshold)
        for name, form in (("questions", "question"), ("statements", "statement"))
    }
    for name, row in forms.items():
        c = row["calibration"]
        print(f"{name:<10} n={row['n']} exact match {row['exact_match']:.3f} (ceiling {row['ceiling']:.3f}), "
              f"ECE {c['ece']:.3f}, mean confidence {row['mean_confidence']:.3f}, abstained {row['abstained']:.2f} "
              f"(of the right answers {row['right_abstained']:.2f}); right: {row['given_right']} of those given, "
              f"{row['abstained_right']} of the greyed guesses")  # fmt: skip
    gap = forms["statements"]["exact_match"] - forms["questions"]["exact_match"]
    print(f"statements - questions: {gap:+.3f} (min_confidence {threshold})")
    line = {"split": args.split, "ask": args.ask, "passages": args.passages, "index": args.index,
            "min_confidence": threshold, **forms, "gap": round(gap, 4),
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    print(json.dumps(line))


if __name__ == "__main__":
    main()
