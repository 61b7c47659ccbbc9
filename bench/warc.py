"""Benchmark: ingest CC-News-like WARC files with 1 and 2 Dask workers; the extractor's share of the time.

Usage: python bench/warc.py [--files 4] [--repeat 8]
The files are the October month of ``tests/news_warc.py`` (the 300 Lee articles rendered as the
pages of three news sites, with a crawl's duplicates and noise) in ``--files`` WARC files, written
``--repeat`` times under other names (every copy after the first is dropped as a duplicate, but
read and extracted like new pages). Each run ingests them into a fresh store; the cluster is
started, and every worker warmed up by an ingest of pywb's small crawl, before the clock starts.
The shares come from one process reading the same files: the time spent in the WARC reader
(warcio: decompressing, parsing, decoding the HTML), in the extractor (trafilatura) and in the
language detector, as fractions of a single-process ingest.
Last line: {"pages", "articles", "pages_per_s_1w", "pages_per_s_2w", "speedup", "extractor_share",
"reader_share", "language_share"}.
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from npmcore.cluster import dask_client  # noqa: E402
from npmcore.corpus.ingest import ingest  # noqa: E402
from npmcore.corpus.warc import Page, extract, iter_records, language  # noqa: E402
from npmcore.storage import open_snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = str(ROOT / "tests" / "data" / "pywb" / "example-wget-1-14.warc.gz")
sys.path.insert(0, str(ROOT / "tests"))
from news_warc import write_news_months  # noqa: E402


def run(files: list[str], n_workers: int | None) -> tuple[float, dict[str, int]]:
    """Seconds of one ingest into a fresh store (in this process when ``n_workers`` is None), after
    a warm-up ingest of pywb's small crawl on the same workers (imports, tokenizer, language model)."""
    with tempfile.TemporaryDirectory() as store, tempfile.TemporaryDirectory() as warm_up:
        if n_workers is None:
            ingest([WARM_UP], warm_up)
            start = time.perf_counter()
            url = ingest(files, store)
            return time.perf_counter() - start, open_snapshot(url).counts
        with dask_client(n_workers=n_workers) as client:
            client.run(ingest, [WARM_UP], warm_up)  # on every worker
            start = time.perf_counter()
            url = ingest(files, store, client=client)
            return time.perf_counter() - start, open_snapshot(url).counts


def stages(files: list[str]) -> dict[str, float]:
    """Seconds spent reading the records, extracting the articles and detecting their language."""
    start = time.perf_counter()
    pages = [p for f in files for p in iter_records(f, strict=True) if isinstance(p, Page)]
    read = time.perf_counter() - start
    start = time.perf_counter()
    found = [extract(p.html) for p in pages]
    extracted = time.perf_counter() - start
    start = time.perf_counter()
    for title_text in found:
        if title_text is not None:
            language(title_text[1])
    return {"read": read, "extract": extracted, "language": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=4, help="WARC files the month is written in")
    parser.add_argument("--repeat", type=int, default=8, help="copies of the month's files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="npm-bench-warc-") as tmp:
        october, _ = write_news_months(Path(tmp) / "news", args.files)
        files = []
        for copy in range(args.repeat):
            for path in october.files:
                files.append(str(shutil.copy(path, path.with_name(path.name.replace(".warc.gz", f"-{copy}.warc.gz")))))
        serial, counts = run(files, None)
        shares = stages(files)
        s1, counts1 = run(files, 1)
        s2, counts2 = run(files, 2)
    assert counts == counts1 == counts2, (counts, counts1, counts2)
    result = {
        "pages": counts["pages"],
        "articles": counts["articles"],
        "pages_per_s_1w": round(counts["pages"] / s1, 1),
        "pages_per_s_2w": round(counts["pages"] / s2, 1),
        "speedup": round(s1 / s2, 3),
        "extractor_share": round(shares["extract"] / serial, 3),
        "reader_share": round(shares["read"] / serial, 3),
        "language_share": round(shares["language"] / serial, 3),
    }
    print(
        f"{len(files)} files, {counts['records']:,} records, {counts['pages']:,} pages, {counts['articles']:,} "
        f"articles kept, {counts['tokens']:,} tokens: 1 worker {s1:.1f} s, 2 workers {s2:.1f} s; "
        f"one process {serial:.1f} s "
        f"(reading {shares['read']:.1f} s, extracting {shares['extract']:.1f} s, language {shares['language']:.1f} s)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
