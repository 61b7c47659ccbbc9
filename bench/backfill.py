"""Incremental backfill vs a full build, on two versions of a Wikipedia dump.

Usage: python bench/backfill.py [--files N] [--edited 0.03] [--added 0.01] [--deleted 0.01] [--store DIR]
Version 1 is the embedded Wikipedia dump sample (106 articles) with, for ``--files N``, the
articles of the first N files of ../shared/data/enwiki_sample written into it as pages of the
same dump (their plain text is their wikitext; 64 files: the whole 96k-article extract).
Version 2, a month later: ``--edited`` of the articles get a new paragraph, ``--added`` more
are new (new titles) and ``--deleted`` are gone. Each figure is one run of the
``backfill_dump`` flow (ingest, datastore, FAISS, BM25), timed in one process with a Prefect
API and a Dask cluster up, as a deployment's worker runs it against a running scheduler
(``--dask-address``; starting a local cluster adds the same few seconds to both): ``full_s``
indexes version 2 in an empty store, ``incremental_s`` indexes it in a store that holds
version 1 (unchanged pages are copied, not parsed; unchanged blocks reuse their vectors, their
index codes and the trained index). Version 1 is indexed first, which also warms the process and the workers up.
Last line: {"files", "articles", "tokens", "full_s", "incremental_s", "ratio",
"blocks_reembedded_fraction"}; target ratio <= 0.05.
"""

import argparse
import bz2
import html
import json
import random
import re
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from flows.backfill import BackfillParams, BackfillResult, backfill_dump  # noqa: E402
from flows.params import ClusterParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.cluster import dask_cluster  # noqa: E402
from npmcore.corpus.readers import default_corpus  # noqa: E402
from npmcore.storage import read_manifest  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "enwiki_sample"
SAMPLE_PAGES_PER_PARTITION = 10  # the sample's 106 pages in 11 partitions: both workers stay busy
EXTRACT_DOC = re.compile(r'<doc id="(\d+)" url="[^"]*" title="([^"]*)">\n(.*?)</doc>', re.S)


def extract_pages(files: int) -> list[str]:
    """The articles of the first ``files`` extract files as dump pages (plain text as wikitext)."""
    pages = []
    for i in range(files):
        for doc_id, title, text in EXTRACT_DOC.findall((DATA / f"wiki_{i:02d}").read_text(encoding="utf-8")):
            body = text.split("\n", 1)[1].strip() if "\n" in text else ""  # its first line repeats the title
            if body:
                pages.append(page(int(doc_id), html.unescape(title), body))
    return pages


def page(page_id: int, title: str, text: str) -> str:
    return (
        f"<page>\n    <title>{html.escape(title, quote=False)}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n"
        f"    <revision>\n      <id>{page_id}</id>\n      <timestamp>2026-01-01T00:00:00Z</timestamp>\n"
        "      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
        f'      <text xml:space="preserve">{html.escape(text, quote=False)}</text>\n    </revision>\n  </page>\n'
    )


def dump_versions(
    files: int, edited: float, added: float, deleted: float, folder: Path, seed: int = 0
) -> tuple[Path, Path, int]:
    """v1: the sample's pages (and the extract's); v2: articles edited, added (new titles) and deleted."""
    xml = bz2.open(default_corpus()[0], "rt", encoding="utf-8").read()
    head, footer = xml[: xml.index("<page>")], "</mediawiki>\n"
    pages = re.findall(r"<page>.*?</page>", xml, flags=re.S) + extract_pages(files)
    articles = [p for p in pages if "#REDIRECT" not in p and "disambig" not in p.lower()]
    rng = random.Random(seed)
    counts = [max(1, round(share * len(articles))) for share in (edited, deleted, added)]
    picked = rng.sample(range(len(articles)), sum(counts))
    edit, delete, add = picked[: counts[0]], set(picked[counts[0] : -counts[2]]), picked[-counts[2] :]
    v2 = list(articles)
    for i in edit:
        v2[i] = v2[i].replace("</text>", "\nThis paragraph was added in the second version of the dump.</text>")
    v2 += [
        re.sub(
            r"<id>(\d+)</id>",
            lambda m: f"<id>{int(m.group(1)) + 10**8}</id>",
            re.sub(r"<title>(.*?)</title>", r"<title>\1 (second version)</title>", articles[i]),
        )
        for i in add
    ]
    v2 = [p for i, p in enumerate(v2) if i not in delete]
    (folder / "v1.xml").write_text(head + "".join(articles) + footer, encoding="utf-8")
    (folder / "v2.xml").write_text(head + "".join(v2) + footer, encoding="utf-8")
    return folder / "v1.xml", folder / "v2.xml", len(articles)


def backfill(dump: Path, day: str, store: str, cluster: ClusterParams, pages: int) -> tuple[float, BackfillResult]:
    """Seconds of one backfill_dump flow run, and its result."""
    start = time.perf_counter()
    params = BackfillParams(dump=str(dump), dump_date=day, store=store, cluster=cluster, pages_per_partition=pages)
    result = backfill_dump(params)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=0, help="enwiki_sample files written into the dump (0 to 64)")
    parser.add_argument("--edited", type=float, default=0.03, help="fraction of articles edited in version 2")
    parser.add_argument("--added", type=float, default=0.01, help="fraction of new articles in version 2")
    parser.add_argument("--deleted", type=float, default=0.01, help="fraction of articles deleted in version 2")
    parser.add_argument("--store", default=None, help="folder for the two stores (default: a temp dir)")
    args = parser.parse_args()
    if not 0 <= args.files <= 64:
        parser.error("--files: 0 to 64")
    pages = (
        SAMPLE_PAGES_PER_PARTITION if args.files == 0 else BackfillParams.model_fields["pages_per_partition"].default
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.store or tmp)
        root.mkdir(parents=True, exist_ok=True)
        v1, v2, articles = dump_versions(args.files, args.edited, args.added, args.deleted, root)
        with prefect_api(), dask_cluster() as address:
            cluster = ClusterParams(dask_address=address)
            backfill(v1, "2026-01-01", str(root / "incremental"), cluster, pages)
            full_s, _ = backfill(v2, "2026-02-01", str(root / "full"), cluster, pages)
            incremental_s, result = backfill(v2, "2026-02-01", str(root / "incremental"), cluster, pages)
        blocks, reused = result.blocks, result.reused_blocks
        tokens = read_manifest(result.index).counts["tokens"]
    print(
        json.dumps(
            {
                "files": args.files,
                "articles": articles,
                "tokens": tokens,
                "full_s": round(full_s, 1),
                "incremental_s": round(incremental_s, 1),
                "ratio": round(incremental_s / full_s, 3),
                "blocks_reembedded_fraction": round((blocks - reused) / blocks, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
