"""Benchmark: ingest the 96k-article Wikipedia extract with 1 and with 2 Dask workers.

Usage: python bench/ingest.py [--data ../shared/data/enwiki_sample] [--max-files N]
Prints a table, then as its last line one JSON object:
{"docs", "blocks", "tokens", "docs_per_s_1w", "docs_per_s_2w", "speedup"}.
Each run uses a fresh store (no snapshot reuse); the cluster is started before the clock
starts, so the figure is ingestion throughput (each worker still loads its tokenizer).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from npmcore.cluster import dask_client  # noqa: E402
from npmcore.corpus.ingest import ingest  # noqa: E402
from npmcore.storage import open_snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run(files: list[str], n_workers: int) -> tuple[float, dict[str, int]]:
    with tempfile.TemporaryDirectory() as store, dask_client(n_workers=n_workers) as client:
        start = time.perf_counter()
        url = ingest(files, store, client=client)
        seconds = time.perf_counter() - start
        return seconds, open_snapshot(url).counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "enwiki_sample"))
    parser.add_argument("--max-files", type=int, default=None, help="use only the first N shards")
    args = parser.parse_args()
    files = sorted(str(p) for p in Path(args.data).glob("wiki_*"))[: args.max_files]
    if not files:
        raise SystemExit(f"no wiki_* files under {args.data}")
    s1, counts = run(files, 1)
    s2, counts2 = run(files, 2)
    assert counts == counts2, (counts, counts2)
    result = {
        "docs": counts["docs"],
        "blocks": counts["blocks"],
        "tokens": counts["tokens"],
        "docs_per_s_1w": round(counts["docs"] / s1, 1),
        "docs_per_s_2w": round(counts["docs"] / s2, 1),
        "speedup": round(s1 / s2, 3),
    }
    print(
        f"{len(files)} files, {counts['docs']:,} docs ({counts['empty_docs']:,} empty), {counts['blocks']:,} blocks, "
        f"{counts['tokens']:,} tokens: 1 worker {s1:.1f} s, 2 workers {s2:.1f} s"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
