"""The cost of an index's table of article openings (``articles.sqlite``, :mod:`npmcore.index.articles`) by size.

Usage: python bench/articles.py --index INDEX_URL [INDEX_URL …] [--lookups 2000]

For the corpus of each index (smallest first gives the growth): the table written as the index build writes it (one
pass over the corpus's titles and texts, a shard at a time), timed, its size and the process's peak RSS; then
``--lookups`` lookups of real candidate names (the titles of the table's own articles, every 7th, each with a
kind's noun as the second name, as :func:`npmcore.answer.kinds.articles_of` asks), timed. One JSON line per index:
``{"corpus", "blocks", "articles", "seconds", "articles_per_s", "mb", "peak_rss_mb", "lookup_us", "cpu"}``.
"""

import argparse
import json
import resource
import sqlite3
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from npmcore.index.articles import ARTICLES, Articles, name_of, write_articles  # noqa: E402
from npmcore.machine import cpu_flags, cpu_name  # noqa: E402
from npmcore.snapshots import open_corpus, open_index  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", nargs="+", required=True, metavar="INDEX_URL")
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    for url in args.index:
        corpus = open_index(url).corpus
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / ARTICLES
            started = time.perf_counter()
            count = write_articles(corpus, path)
            seconds = time.perf_counter() - started
            with sqlite3.connect(path) as db:
                titles = [t for (t,) in db.execute("SELECT title FROM articles WHERE rowid % 7 = 0")]
            names = [name_of(t) for t in titles[: args.lookups]]
            table = Articles(path)
            started = time.perf_counter()
            for name in names:
                table.named(name, f"{name}river")
            lookup_us = 1e6 * (time.perf_counter() - started) / max(len(names), 1)
            table.close()
            row = {
                "corpus": open_corpus(corpus).manifest.id,
                "blocks": open_corpus(corpus).manifest.counts["blocks"],
                "articles": count,
                "seconds": round(seconds, 1),
                "articles_per_s": round(count / seconds),
                "mb": round(path.stat().st_size / 2**20, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "lookup_us": round(lookup_us, 1),
                "cpu": f"{cpu_name()}; {' '.join(f for f in ('amx_bf16', 'avx512_bf16', 'avx2') if f in cpu_flags())}",
            }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
