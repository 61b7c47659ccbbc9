"""What people type, asked as the query service asks it: questions and keyword queries against the same facts typed as
statements.

Usage: python bench/asking.py --index INDEX [--data typed|everyday] [--split dev|test] [--ask statements|paper]
                              [--passages N]

Two sets of facts, each fact typed by hand as a person types into a search box, with the answer as a person accepts
it (every form of it):

* ``bench/data/typed-{split}.jsonl`` (``--data typed``): facts about articles of the two datastores of the paper table
  (the September 2020 dump and Simple English Wikipedia of December 2021), written from the articles, typed as a
  question ("where was john langdon born") and as a statement with one ``[MASK]`` ("John Langdon was born in
  [MASK].") (500 facts of dev, 100 of test);
* ``bench/data/everyday-{split}.jsonl`` (``--data everyday``, the default): what a person knows (capitals,
  birthplaces, authors, founders, dates, sports, languages, inventors, rivers, currencies, painters, composers,
  landmarks, elements, …), written from general knowledge **without reading the articles first**, each typed as a
  question ("who discovered penicillin"), as keywords ("penicillin discoverer") and as a statement ("Penicillin was
  discovered by [MASK]."); then checked against the datastores (a sentence stating it, which each line names): 416 of
  the 420 written are held (4 not: an article's pronoun, a missing article), 250 facts of dev and 166 of test.

Every line is answered as the query service answers it (:func:`npmcore.answer.answering.replies`, through the
evaluation's cloze task: its defaults, ``--passages`` top BM25 passages, evidence scoring and the encoder's
calibrator and reply's confidence), against ``--index`` (the paper table's combined index,
``2020-09+simplewiki-2021-12``); a question is asked ``--ask`` (statements: its statements and the paper's question,
its readings voting; paper: the paper's question alone). A line the service does not answer is counted as
``refused`` and scored wrong.

Per form: ``exact_match`` of the answer shown first (over every line of the form, refused ones included),
``refused``, ``ceiling`` (a gold answer in the passages searched), the calibration of its confidence (ECE, AURC,
accuracy at 10/25/50/100% coverage), ``abstained`` (shown greyed: below the service's ``min_confidence``, the
reply's confidence's), ``right_abstained`` (right answers greyed, as a share of the right ones), ``given_right`` and
``abstained_right`` (the share right of the answers shown as sure, and of the best guesses shown greyed), ``shown``
(the same as ``npmcore eval`` says it: ``min_confidence``, ``sure``, ``precision``, ``right_greyed``). Last line,
one JSON object:
``{"data", "split", "ask", "passages", "index", "min_confidence", "questions": {…}, "keywords": {…}, "statements":
{…}, "gap", "keywords_gap", "seconds"}`` (``gap``: statements' exact match minus questions', ``keywords_gap``: minus
keywords'; a set without keywords has none).
"""

import argparse
import json
import time

from npmcore.runtime import configure_environment

configure_environment()

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from npmcore.answer.answering import sure_from  # noqa: E402
from npmcore.answer.inference import NPM, InferenceConfig  # noqa: E402
from npmcore.ask.asking import FORMS  # noqa: E402
from npmcore.evaluation.run import Record, run_task  # noqa: E402
from npmcore.evaluation.selective import calibration_report, shown_report  # noqa: E402
from npmcore.evaluation.tasks import load_task  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


FORM_NAMES = {"question": "questions", "keywords": "keywords", "statement": "statements"}


def summary(records: list[Record], refused: int, min_confidence: float | None) -> dict:
    """A form's exact match (its refused lines wrong), ceiling, calibration and abstentions."""
    right = np.array([r.correct for r in records], dtype=bool)
    confidence = np.array([r.confidence or 0.0 for r in records])
    withheld = confidence < (min_confidence if min_confidence is not None else 0.0)
    n = len(records) + refused
    return {
        "n": n,
        "refused": refused,
        "exact_match": round(float(right.sum() / max(n, 1)), 4),
        "ceiling": round(float(np.mean([bool(r.in_passages) for r in records])), 4) if records else None,
        "calibration": calibration_report(confidence, right) if records else None,
        "mean_confidence": round(float(confidence.mean()), 4) if records else None,
        "abstained": round(float(withheld.mean()), 4) if records else None,
        "right_abstained": round(float((withheld & right).sum() / max(right.sum(), 1)), 4),
        "given_right": round(float(right[~withheld].mean()), 4) if (~withheld).any() else None,
        "abstained_right": round(float(right[withheld].mean()), 4) if withheld.any() else None,
        "shown": shown_report(confidence, right, min_confidence) if min_confidence is not None and records else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--index", required=True, help="the combined index of bench/paper_table.py")
    parser.add_argument("--data", choices=("typed", "everyday"), default="everyday", help="the set of facts")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--ask", choices=FORMS, default="statements", help="how a question is asked")
    parser.add_argument("--passages", type=int, default=InferenceConfig().passages, help="the service's default")
    args = parser.parse_args()
    started = time.perf_counter()
    path = DATA / f"{args.data}-{args.split}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    task = load_task("cloze", limit=None, path=path, form=args.ask)
    npm = NPM(args.index)
    result = run_task(task, npm, "npm", InferenceConfig(passages=args.passages))
    threshold = sure_from(npm)
    answered = {r.id for r in result.records}
    forms = {}
    for form, name in FORM_NAMES.items():
        mine = [r for r in result.records if r.id.endswith(f"-{form}")]
        refused = sum(1 for line in lines if line["form"] == form and line["id"] not in answered)
        if mine or refused:
            forms[name] = summary(mine, refused, threshold)
    for name, row in forms.items():
        c = row["calibration"] or {"ece": float("nan")}
        print(f"{name:<10} n={row['n']} exact match {row['exact_match']:.3f} (refused {row['refused']}, ceiling "
              f"{row['ceiling']}), ECE {c['ece']:.3f}, mean confidence {row['mean_confidence']}, abstained "
              f"{row['abstained']} (of the right answers {row['right_abstained']:.2f}); right: {row['given_right']} "
              f"of those given, {row['abstained_right']} of the greyed guesses")  # fmt: skip
    gap = forms["statements"]["exact_match"] - forms["questions"]["exact_match"]
    keywords_gap = (
        forms["statements"]["exact_match"] - forms["keywords"]["exact_match"] if "keywords" in forms else None
    )
    print(f"statements - questions: {gap:+.3f}; statements - keywords: {keywords_gap} (min_confidence {threshold})")
    line = {"data": args.data, "split": args.split, "ask": args.ask, "passages": args.passages, "index": args.index,
            "min_confidence": threshold, **forms, "gap": round(gap, 4),
            "keywords_gap": None if keywords_gap is None else round(keywords_gap, 4),
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    print(json.dumps(line))


if __name__ == "__main__":
    main()
