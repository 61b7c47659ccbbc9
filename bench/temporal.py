"""Write the temporal sets: TempLAMA rebuilt on two dated dumps of the same Wikipedia articles.

Usage: python bench/temporal.py [--dumps DIR] [--out bench/data] [--seed 0] [--test 400] [--dev 150]
                                [--per-article 2]

Reads the May 2015 and September 2020 WikiExtractor dumps of the same 15k English Wikipedia
articles (``DIR/2015-05`` and ``DIR/2020-09``; default: the shared archive
``shared/data/enwiki_dated/enwiki_dated.tar.xz`` unpacked once into the cache:
:func:`npmcore.evaluation.dumps.dated_dump`),
aligns the articles by page id and draws facts with :mod:`npmcore.evaluation.temporal`: per split
(by article: one fifth dev, the rest test) up to ``--test`` / ``--dev`` *changed* facts (a 2020
sentence whose 2015 version differs in one name, number or date) and as many *unchanged* ones (a
sentence both dumps write the same, one name, number or date masked), at most ``--per-article``
of each kind per article. Writes ``temporal-dev.jsonl`` and ``temporal-test.jsonl`` (id, query,
answers_2015, answers_2020, kind, answer_kind, title, page_id, evidence_2015, evidence_2020; each
file written under a temporary name, then renamed). Last line: one JSON object with, per split,
the facts drawn by kind and answer kind, and the candidates before sampling (changed facts by
answer kind; unchanged: the shared sentences, which are masked only where the draw visits them).
"""

import argparse
import json
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from npmcore.evaluation.dumps import dated_dump  # noqa: E402
from npmcore.evaluation.temporal import (  # noqa: E402
    DUMPS,
    SPLITS,
    aligned,
    candidates,
    draw,
    read_dump,
    split_of,
)

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dumps", type=Path, default=None, help="folder holding 2015-05/ and 2020-09/")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test", type=int, default=400, help="changed (and as many unchanged) test facts")
    parser.add_argument("--dev", type=int, default=150, help="changed (and as many unchanged) dev facts")
    parser.add_argument("--per-article", type=int, default=2, help="facts of each kind per article")
    args = parser.parse_args()
    start = time.perf_counter()
    old, new = (read_dump(args.dumps / dump if args.dumps else dated_dump(dump)) for dump in DUMPS)
    articles = aligned(old, new)
    print(f"{len(old)} articles of {DUMPS[0]}, {len(new)} of {DUMPS[1]}, {len(articles)} aligned", flush=True)
    changed, shared = candidates(articles)
    print(f"{len(changed)} changed facts, {len(shared)} shared sentences ({time.perf_counter() - start:.0f} s)")
    drawn = draw(changed, shared, {"dev": args.dev, "test": args.test}, args.seed, args.per_article)
    args.out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict] = {}
    for split in SPLITS:
        facts = drawn[split]
        path = args.out / f"temporal-{split}.jsonl"
        partial = path.with_suffix(".jsonl.tmp")  # renamed when whole: a file there is never half written
        partial.write_text("".join(json.dumps(asdict(f), ensure_ascii=False) + "\n" for f in facts), encoding="utf-8")
        partial.replace(path)
        print(f"{path}: {len(facts)} facts from {len({f.page_id for f in facts})} articles", flush=True)
        in_split = [f for f in changed if split_of(f.page_id) == split]
        counts[split] = {
            "drawn": {
                kind: dict(Counter(f.answer_kind for f in facts if f.kind == kind)) for kind in ("changed", "unchanged")
            },
            "available": {
                "changed": dict(Counter(f.answer_kind for f in in_split)),
                "changed_articles": len({f.page_id for f in in_split}),
                "unchanged_sentences": sum(split_of(s.page_id) == split for s in shared),
            },
        }
    print(json.dumps({"aligned_articles": len(articles), "seed": args.seed, **counts}))


if __name__ == "__main__":
    main()
