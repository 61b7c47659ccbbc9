"""Write the entity translation sets: an entity's name in a non-Latin script, from a 2015 Wikipedia dump's openings.

Usage: python bench/entity_translation.py [--dump DIR] [--out bench/data] [--seed 0]

Reads the WikiExtractor files of ``--dump`` (``DIR/AA/wiki_00`` …; default: the dump of May 2015 from
``{shared data}/enwiki_dated/enwiki_dated.tar.xz``, unpacked once into the cache:
:func:`npmcore.evaluation.dumps.dated_dump`)
and makes facts with :func:`npmcore.evaluation.translation.translation_facts`: "The Korean translation of Banpo
Bridge is: [MASK]." answered by the name the article's opening gives. The 2015 dump, whose extractor expanded
Wikipedia's language templates, holds many more such names than the 2020 one. Articles are split one in five to
dev, the rest to test (:func:`npmcore.evaluation.translation.split_of`, seeded). Writes
``entity-translation-dev.jsonl`` and ``entity-translation-test.jsonl`` (id, query, answers, language, title,
page_id, evidence). Last line: one JSON object with the counts per split and language.
"""

import argparse
import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from npmcore.evaluation.dumps import dated_dump, dump_files
from npmcore.evaluation.translation import read_articles, split_facts, translation_facts

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", type=Path, default=None, help="WikiExtractor folder (default: the 2015 dump)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data")
    parser.add_argument("--seed", type=int, default=0, help="seed of the dev/test split")
    args = parser.parse_args()
    facts = translation_facts(read_articles(dump_files(args.dump or dated_dump("2015-05"))))
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, rows in split_facts(facts, args.seed).items():
        path = args.out / f"entity-translation-{split}.jsonl"
        partial = path.with_suffix(".jsonl.tmp")  # renamed when whole: a file there is never half written
        partial.write_text("".join(json.dumps(asdict(f), ensure_ascii=False) + "\n" for f in rows), encoding="utf-8")
        partial.replace(path)
        counts[split] = dict(Counter(f.language for f in rows).most_common())
        print(f"{path}: {len(rows)} facts from {len({f.page_id for f in rows})} articles", flush=True)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
