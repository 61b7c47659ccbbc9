"""Why NPM misses paraphrased facts: the gold answer's rank among its candidates, the top-1's kind.

For each fact: where the gold answer ranks among the candidate phrases NPM scores, and the kind
of its top-1 answer (name, number, date, other) against the gold's.

Usage: python bench/paraphrase.py [--model PATH_OR_URI] [--store DIR] [--data bench/data/paraphrase-dev.jsonl]
                                  [--scoring evidence|npm]

Builds, or reuses from the store, the index the ``evaluate`` flow's ``cloze`` task searches (the
embedded default corpus, ingested and indexed by the flows; another encoder than the index's
encodes the top BM25 passages again), and answers every fact of ``--data`` (a cloze jsonl whose
facts carry a ``kind``) as that task does: BM25-restricted NPM with the flow's defaults (3
passages, τ = 1, answers that start and end with a content word and hold no word of the
query, ``--scoring`` evidence or npm). Every candidate phrase is kept (``NPM.phrases``), so for
each fact it finds where the gold answer ranks (``npmcore.evaluation.diagnostics``: decoded
candidates against the gold answers, accents and punctuation aside) and the kind of the top-1
answer.

Prints one row per fact, the top-1 kind against the gold kind, and as its last line one JSON
object {"n", "exact_match", "answer_in_candidates", "rank_median", "rank_at_1", "rank_le_3",
"rank_le_10", "exact_match_by_kind", "top1_kind_vs_gold"}: shares of all facts, except the median
rank, taken over the facts whose gold answer is a candidate. Any cloze jsonl whose facts carry a
``kind`` works: ``bench/data/verbatim-dev.jsonl`` too.
"""

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from flows.evaluate import EvalParams, runs_of, task_indexes  # noqa: E402
from flows.params import ClusterParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.answer.inference import NPM, SCORINGS, InferenceConfig  # noqa: E402
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.evaluation.diagnostics import KINDS, Diagnosis, gold_rank, summarize  # noqa: E402
from npmcore.evaluation.metrics import exact_match  # noqa: E402
from npmcore.evaluation.tasks import Task, load_task  # noqa: E402
from npmcore.tracking import resolve_encoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32  # queries per NPM call


def cloze_index(evaluated: Task, params: EvalParams) -> str:
    """The index the evaluate flow's cloze task searches (the same snapshot: reused once built)."""
    with dask_cluster(params.cluster.dask_address, params.cluster.n_workers) as address:
        (index,) = task_indexes(evaluated, params.model_copy(update={"cluster": ClusterParams(dask_address=address)}))
    return index


def diagnose(npm: NPM, evaluated: Task, kinds: dict[str, str], config: InferenceConfig) -> list[Diagnosis]:
    """Every fact answered with all its candidates kept: the gold's rank and the top-1 answer."""
    diagnoses = []
    for start in range(0, len(evaluated.examples), BATCH):
        examples = evaluated.examples[start : start + BATCH]
        for ex, phrases in zip(examples, npm.phrases([ex.query for ex in examples], config), strict=True):
            top = npm.answers_from(ex.query, phrases, replace(config, answers=1))
            text = top[0].text if top else ""
            decoded = (npm.tokenizer.decode(ids[ids >= 0].tolist()) for ids in phrases.token_ids)
            rank = gold_rank(decoded, ex.answers)
            exact = bool(top) and exact_match(text, ex.answers)
            diagnoses.append(Diagnosis(ex.id, kinds[ex.id], rank, len(phrases.scores), text, exact))
    return diagnoses


def print_table(diagnoses: list[Diagnosis], evaluated: Task) -> None:
    gold = {ex.id: ex.answers[0] for ex in evaluated.examples}
    print(f"{'fact':<10} {'gold kind':<9} {'rank':>6} {'cands':>6}  {'top-1 (kind)':<34} gold answer")
    for d in diagnoses:
        rank = "-" if d.rank is None else str(d.rank)
        top = f"{d.top[:24]} ({d.top_kind})" if d.top else "-"
        print(f"{d.id:<10} {d.gold_kind:<9} {rank:>6} {d.candidates:>6}  {top:<34} {gold[d.id]}")


def print_confusion(confusion: dict[str, dict[str, int]]) -> None:
    print("\ngold kind \\ top-1 kind " + "".join(f"{k:>8}" for k in KINDS))
    for gold, row in confusion.items():
        print(f"{gold:<23}" + "".join(f"{row[k]:>8}" for k in KINDS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default=None, help="encoder (path, cached name or models:/…); default: the shipped one"
    )
    parser.add_argument("--store", default=None, help="store of the corpus and index (default: a temp dir)")
    parser.add_argument("--data", default=str(ROOT / "bench" / "data" / "paraphrase-dev.jsonl"))
    parser.add_argument("--scoring", choices=SCORINGS, default=EvalParams.model_fields["scoring"].default)
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text(encoding="utf-8").splitlines() if line.strip()]
    if bad := [n for n, row in enumerate(rows, start=1) if row.get("id") is None or row.get("kind") not in KINDS]:
        raise SystemExit(f"{args.data}: facts {bad[:10]} (1-based) lack an id or a kind ({', '.join(KINDS)})")
    kinds = {str(row["id"]): row["kind"] for row in rows}
    evaluated = load_task("cloze", limit=None, path=args.data)
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = args.store or tmp
        params = EvalParams(tasks=["cloze"], store=store, model=args.model, data=args.data, scoring=args.scoring)
        index = cloze_index(evaluated, params)
        ((_, tau),) = runs_of(evaluated, params)
        config = params.inference(tau)
        npm = NPM(index, encoder=resolve_encoder(params.model, params.store))
        diagnoses = diagnose(npm, evaluated, kinds, config)
    summary = summarize(diagnoses)
    print_table(diagnoses, evaluated)
    print_confusion(summary["top1_kind_vs_gold"])
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
