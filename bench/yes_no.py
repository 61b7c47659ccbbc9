"""Yes/no questions as people type them, answered as the query service answers them: the verdict against the truth.

Usage: python bench/yes_no.py --index INDEX [--split dev|test] [--out PATH]

``bench/data/yes-no-{split}.jsonl``: questions of everyday knowledge ("Did Shakespeare write Hamlet?", "Is Sydney the
capital of Australia?"), half true and half false, half of one-to-one relations (a country's capital, a book's
author) and half of one-to-many (an author's books, a river's countries), a quarter typed casually; written from
what a person knows **without reading the articles**, then checked against the combined datastore (the sentence
that says it, or says the truth a false one confuses, is on each line); 120 dev, 80 test. Each is answered as the
service answers it (:func:`npmcore.answer.answering.replies`, the service's defaults) against ``--index`` (the paper
table's combined index): its verdict (:mod:`npmcore.answer.verdict`) is **right** where it is yes to a true question
or no to a false one, **contradicts** the truth where it is no to a true one or yes to a false one, and neither where
it says the corpus does not say (``unknown``).

Last line, one JSON object: ``{"split", "n", "right", "contradicts", "unknown", "true_yes", "true", "false_no",
"false", "by_relation": {relation: {"n", "right", "contradicts"}}, "seconds"}``; ``--out`` writes each question's
verdict, what the corpus says and its confidence, one JSON line each.
"""

import argparse
import json
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from npmcore.answer.answering import replies  # noqa: E402
from npmcore.answer.inference import NPM, InferenceConfig  # noqa: E402
from npmcore.ask.asking import ask  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
BATCH = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", required=True, help="the combined index of bench/paper_table.py")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--out", type=Path, default=None, help="each question's verdict, one JSON line each")
    args = parser.parse_args()
    started = time.perf_counter()
    lines = [json.loads(line) for line in (DATA / f"yes-no-{args.split}.jsonl").read_text().splitlines() if line]
    npm = NPM(args.index)
    verdicts = []
    for lo in range(0, len(lines), BATCH):
        batch = lines[lo : lo + BATCH]
        for line, reply in zip(batch, replies(npm, [ask(line["query"]) for line in batch], InferenceConfig())):
            said = reply.yes_no
            verdict = said.verdict if said is not None else None
            truth = line["truth"]
            verdicts.append({
                "id": line["id"], "query": line["query"], "truth": truth, "relation": line["relation"],
                "verdict": verdict, "corpus_says": said.corpus_says if said else None,
                "confidence": said.confidence if said else None,
                "right": verdict == ("yes" if truth else "no"), "contradicts": verdict == ("no" if truth else "yes"),
            })  # fmt: skip
    if args.out is not None:
        args.out.write_text("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in verdicts))
    relations = sorted({v["relation"] for v in verdicts})
    print(json.dumps({
        "split": args.split,
        "n": len(verdicts),
        "right": sum(v["right"] for v in verdicts),
        "contradicts": sum(v["contradicts"] for v in verdicts),
        "unknown": sum(v["verdict"] not in ("yes", "no") for v in verdicts),
        "true_yes": sum(v["truth"] and v["verdict"] == "yes" for v in verdicts),
        "true": sum(v["truth"] for v in verdicts),
        "false_no": sum(not v["truth"] and v["verdict"] == "no" for v in verdicts),
        "false": sum(not v["truth"] for v in verdicts),
        "by_relation": {
            r: {
                "n": sum(v["relation"] == r for v in verdicts),
                "right": sum(v["right"] for v in verdicts if v["relation"] == r),
                "contradicts": sum(v["contradicts"] for v in verdicts if v["relation"] == r),
            }
            for r in relations
        },
        "seconds": round(time.perf_counter() - started, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
