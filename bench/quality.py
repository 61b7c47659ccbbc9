"""Quality of an encoder with NPM inference: the quick evaluation behind the quality targets.

Usage: python bench/quality.py [--model PATH_OR_URI] [--store DIR] [--limit 100] [--split dev]
                               [--exclude-query-words | --allow-query-words] [--scoring evidence|npm]
                               [--precision auto|f32|bf16]

Runs the ``evaluate`` flow (BM25-restricted NPM for open-set tasks, kNN over the
reference index for closed-set ones) on MR, SST-2 and CR (accuracy, review reference
corpora without the evaluated reviews), LAMA T-REx and Google-RE (macro exact match over
answer lengths, enwiki_sample wiki_00 + the facts' evidence sentences) and the cloze test
split ``bench/data/cloze-test.jsonl`` (exact match, the embedded default corpus), at most
``--limit`` seeded examples per task. Every run is logged to MLflow (experiment npm-eval in
the store). The default model is the shipped encoder. The cloze task runs again on the verbatim
test set ``bench/data/verbatim-test.jsonl`` (all of its facts: sentences of the default corpus, word
for word, one name, year, number or other word masked; ``bench/verbatim.py`` draws them), reported as
``verbatim``. Last line: one JSON object {"mr", "sst2", "cr", "trex", "google_re", "cloze",
"verbatim"} and, for the open-set tasks, the share of answers that repeat a content word of the query
({"trex_query_copy_rate", …}). ``--scoring`` ranks open-set candidates by evidence (the default) or
by NPM's own scores (the paper's). ``--precision`` is the encoder's, for the reference corpora's vectors and
the queries alike (``auto``: this machine's, :mod:`npmcore.index.precision`).

``--split dev`` evaluates the tuning data instead: SST-2's dev file, the LAMA dev facts
(one fifth of the facts, by uuid hash, never in the test split), the cloze dev split and,
reported as ``paraphrase``, the cloze task again on ``bench/data/paraphrase-dev.jsonl`` (all of
its facts, each worded unlike its evidence sentence; the same default-corpus index, reused) and the
verbatim dev set ``bench/data/verbatim-dev.jsonl`` as ``verbatim``; MR and CR have no dev data and are
left out; last line {"sst2", "trex", "google_re", "cloze", "paraphrase", "verbatim"} and the copy
rates. Choose recipes on dev, report test. (``bench/paraphrase.py`` shows where a set's answers rank
among the candidates, by kind.)
"""

import argparse
import json
import tempfile
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from flows.evaluate import EvalParams, evaluate  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.answer.inference import SCORINGS  # noqa: E402
from npmcore.index.precision import SETTINGS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"test": ["mr", "sst2", "cr", "trex", "google_re", "cloze"], "dev": ["sst2", "trex", "google_re", "cloze"]}
DATA = ROOT / "bench" / "data"
PARAPHRASE = DATA / "paraphrase-dev.jsonl"  # dev: the cloze task again, as "paraphrase"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default=None, help="encoder (path, cached name or models:/…); default: the shipped one"
    )
    parser.add_argument(
        "--store", default=None, help="store for corpora, indexes and MLflow runs (default: a temp dir)"
    )
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--split", choices=sorted(TASKS), default="test", help="test (report) or dev (tune)")
    parser.add_argument(
        "--exclude-query-words",
        action=argparse.BooleanOptionalAction,
        default=EvalParams.model_fields["exclude_query_words"].default,
        help="open-set answers never hold a content word of the query (default: the evaluate flow's)",
    )
    parser.add_argument(
        "--scoring",
        choices=SCORINGS,
        default=EvalParams.model_fields["scoring"].default,
        help="open-set candidates ranked by evidence or by NPM's scores (default: the evaluate flow's)",
    )
    parser.add_argument(
        "--precision",
        choices=SETTINGS,
        default=EvalParams.model_fields["precision"].default,
        help="of the encoder, embedding the reference corpora and encoding the queries (default: auto)",
    )
    args = parser.parse_args()
    cloze = DATA / f"cloze-{args.split}.jsonl"
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = args.store or tmp
        scores = {}
        params = EvalParams(
            tasks=TASKS[args.split],
            store=store,
            model=args.model,
            data=str(cloze),
            limit=args.limit,
            split=args.split,
            exclude_query_words=args.exclude_query_words,
            scoring=args.scoring,
            precision=args.precision,
        )
        runs: list[tuple[str | None, EvalParams]] = [(None, params)]  # (reported name, else the task's own)
        # the cloze task again on other files; its default-corpus index (content-addressed) is reused
        again = {"verbatim": DATA / f"verbatim-{args.split}.jsonl"}
        if args.split == "dev":
            again = {"paraphrase": PARAPHRASE, **again}
        for name, path in again.items():
            runs.append((name, params.model_copy(update={"tasks": ["cloze"], "data": str(path), "limit": None})))
        copies = {}
        for name, run in runs:
            for row in evaluate(run):
                task = name or row.task
                scores[task] = round(row.score, 4)
                if row.query_copy_rate is not None:
                    copies[f"{task}_query_copy_rate"] = round(row.query_copy_rate, 4)
                print(
                    f"{task}: {row.metric} {row.score:.4f} "
                    f"(n={row.n}, corpus {row.corpus_tokens:,} tokens, {row.notes})",
                    flush=True,
                )
    print(json.dumps({**scores, **copies}))


if __name__ == "__main__":
    main()
