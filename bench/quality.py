"""Quality of an encoder with NPM inference: the quick evaluation behind issue 7's targets.

Usage: python bench/quality.py [--model PATH_OR_URI] [--store DIR] [--limit 100]

Runs the ``evaluate`` flow (BM25-restricted NPM for open-set tasks, kNN over the
reference index for closed-set ones) on MR, SST-2 and CR (accuracy, review reference
corpora without the evaluated reviews), LAMA T-REx and Google-RE (macro exact match over
answer lengths, enwiki_sample wiki_00 + the facts' evidence sentences) and the cloze test
split ``bench/data/cloze-test.jsonl`` (exact match, the embedded default corpus), at most
``--limit`` seeded examples per task. Every run is logged to MLflow (experiment npm-eval in
the store). The default model is the shipped encoder. Last line: one JSON object
{"mr", "sst2", "cr", "trex", "google_re", "cloze"}.
"""

import argparse
import json
import tempfile
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from flows.evaluate import EvalParams, evaluate  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["mr", "sst2", "cr", "trex", "google_re", "cloze"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="encoder (path, cached name or models:/…); default: the shipped one")
    parser.add_argument("--store", default=None, help="store for corpora, indexes and MLflow runs (default: a temp dir)")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--cloze", default=str(ROOT / "bench" / "data" / "cloze-test.jsonl"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = args.store or tmp
        scores = {}
        params = EvalParams(tasks=TASKS, store=store, model=args.model, data=args.cloze, limit=args.limit)
        for row in evaluate(params):
            scores[row.task] = round(row.score, 4)
            print(f"{row.task}: {row.metric} {row.score:.4f} (n={row.n}, corpus {row.corpus_tokens:,} tokens, {row.notes})", flush=True)
    print(json.dumps(scores))


if __name__ == "__main__":
    main()
