"""Incremental backfill vs a full build, on two versions of the embedded Wikipedia dump sample.

Usage: python bench/backfill.py [--changed 0.05] [--store DIR]
Version 2 of the dump edits, adds and deletes articles (``--changed`` of the articles in
all, a third each). Each figure is one run of the ``backfill_dump`` flow (ingest,
datastore, FAISS, BM25), timed in one process with a Prefect API and a Dask cluster up, as a
deployment's worker runs it against a running scheduler (``--dask-address``; starting a
local cluster adds the same few seconds to both): ``full_s`` indexes version 2 in an empty
store, ``incremental_s`` indexes it in a store that holds version 1 (unchanged pages are
copied, not parsed; unchanged blocks reuse their vectors and the trained index). Version 1
is indexed first, which also warms the process and the workers up.
Last line: {"full_s", "incremental_s", "ratio", "blocks_reembedded_fraction"}; target ratio <= 0.15.
"""

import argparse
import bz2
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
from npmcore.corpus import default_corpus  # noqa: E402

PAGES_PER_PARTITION = 25  # the sample's 106 articles in 5 partitions: both workers parse and embed, as with a real dump


def dump_versions(changed: float, folder: Path, seed: int = 0) -> tuple[Path, Path]:
    """v1: the sample's articles; v2: ``changed`` of them edited, deleted or added (new titles)."""
    xml = bz2.open(default_corpus()[0], "rt", encoding="utf-8").read()
    head, footer = xml[: xml.index("<page>")], "</mediawiki>\n"
    pages = re.findall(r"<page>.*?</page>", xml, flags=re.S)
    articles = [p for p in pages if "#REDIRECT" not in p and "disambig" not in p.lower()]
    rng = random.Random(seed)
    picked = rng.sample(range(len(articles)), max(3, round(changed * len(articles))))
    edit, delete, add = picked[0::3], set(picked[1::3]), picked[2::3]
    v2 = list(articles)
    for i in edit:
        v2[i] = v2[i].replace("</text>", "\nThis paragraph was added in the second version of the dump.</text>")
    v2 += [re.sub(r"<title>(.*?)</title>", r"<title>\1 (second version)</title>", articles[i]) for i in add]
    v2 = [p for i, p in enumerate(v2) if i not in delete]
    (folder / "v1.xml").write_text(head + "".join(articles) + footer, encoding="utf-8")
    (folder / "v2.xml").write_text(head + "".join(v2) + footer, encoding="utf-8")
    return folder / "v1.xml", folder / "v2.xml"


def backfill(dump: Path, day: str, store: str, cluster: ClusterParams) -> tuple[float, BackfillResult]:
    """Seconds of one backfill_dump flow run, and its result."""
    start = time.perf_counter()
    params = BackfillParams(
        dump=str(dump), dump_date=day, store=store, cluster=cluster, pages_per_partition=PAGES_PER_PARTITION
    )
    result = backfill_dump(params)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changed", type=float, default=0.05, help="fraction of articles edited, deleted or added")
    parser.add_argument("--store", default=None, help="folder for the two stores (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.store or tmp)
        root.mkdir(parents=True, exist_ok=True)
        v1, v2 = dump_versions(args.changed, root)
        with prefect_api(), dask_cluster() as address:
            cluster = ClusterParams(dask_address=address)
            backfill(v1, "2026-01-01", str(root / "incremental"), cluster)
            full_s, _ = backfill(v2, "2026-02-01", str(root / "full"), cluster)
            incremental_s, result = backfill(v2, "2026-02-01", str(root / "incremental"), cluster)
        blocks, reused = result.blocks, result.reused_blocks
    print(
        json.dumps(
            {
                "full_s": round(full_s, 1),
                "incremental_s": round(incremental_s, 1),
                "ratio": round(incremental_s / full_s, 3),
                "blocks_reembedded_fraction": round((blocks - reused) / blocks, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
