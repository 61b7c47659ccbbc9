"""Write the verbatim sets: sentences of the default corpus, word for word, one phrase masked.

Usage: python bench/verbatim.py [--store DIR] [--per-kind 80] [--out bench/data]

Ingests (or reuses from the store) the embedded default corpus exactly as the evaluate flow's
``cloze`` task does, reads its blocks, and draws facts with
:func:`npmcore.evaluation.verbatim.draw_facts`: ``--per-kind`` names, years, numbers and other
content words per split. The dev set (seed 1, for tuning) is drawn first; the test set (seed 2,
reported once) never uses a sentence of the dev set. Writes ``verbatim-dev.jsonl`` and
``verbatim-test.jsonl`` (cloze jsonl: id, query, answers, title, evidence, kind, block_id);
``bench/quality.py`` evaluates them as ``verbatim``. Last line: one JSON object with the counts
per split and kind.
"""

import argparse
import json
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from flows.ingest import ingest_corpus  # noqa: E402
from flows.params import ClusterParams, IngestParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.evaluation.verbatim import draw_facts  # noqa: E402
from npmcore.snapshots import read_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEEDS = {"dev": 1, "test": 2}  # drawn in this order: test leaves out dev's sentences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default=None, help="store of the default corpus (default: a temp dir)")
    parser.add_argument("--per-kind", type=int, default=80, help="facts of each kind per split")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        # the evaluate flow's cloze corpus (flows/evaluate.py task_indexes): the same snapshot
        corpus = ingest_corpus(IngestParams(store=args.store or tmp, pages_per_partition=25, cluster=ClusterParams()))
        blocks = [
            row
            for table in read_blocks(corpus, ["block_id", "title", "text"])
            for row in zip(*(table.column(c).to_pylist() for c in ("block_id", "title", "text")), strict=True)
        ]
    used: frozenset[str] = frozenset()
    counts = {}
    for split, seed in SEEDS.items():
        facts = draw_facts(blocks, args.per_kind, seed, f"verbatim-{split}", exclude=used)
        used |= {f.evidence for f in facts}
        path = args.out / f"verbatim-{split}.jsonl"
        partial = path.with_suffix(".jsonl.tmp")  # renamed when whole: a file there is never half written
        partial.write_text("".join(json.dumps(asdict(f), ensure_ascii=False) + "\n" for f in facts), encoding="utf-8")
        partial.replace(path)
        counts[split] = dict(Counter(f.kind for f in facts))
        print(f"{path}: {len(facts)} facts from {len({f.title for f in facts})} documents", flush=True)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
