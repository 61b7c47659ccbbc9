"""The cost of a second source: Simple English Wikipedia added beside the September 2020 dump.

Usage: python bench/sources.py [--store DIR] [--vectors]

1. The September 2020 dump is ingested and indexed as BM25 alone, as the paper table does it (``npmcore ingest``,
   ``npmcore index --bm25-only``; in a store that holds them, e.g. the paper table's, they are reused): not timed.
2. Timed, as a user runs it: ``npmcore backfill`` of Simple English Wikipedia of December 2021 (WikiExtractor
   ``--json``, 273k pages) with ``--previous`` the 2020 index, the flow ``backfill_dump`` from its start to its
   end: the new source ingested on the Dask workers (the 2020 shards copied beside it), then BM25 over both
   (the 2020 dump's Lucene index extended by the new blocks, not built again). Run it in a store without the
   combined index (a fresh one), else the backfill finds it made and does nothing.
3. The index plan of the combined datastore's token vectors (``npmcore index`` logs the same lines): the factory,
   the hours of embedding on this machine's worker threads at its measured rate, the GiB of the datastore
   (float16 vectors) and of the FAISS index. Built only with ``--vectors`` (hours on 2 cores: see the plan).

Last line, one JSON object: ``{"backfill_s", "docs", "empty_docs", "blocks", "tokens", "corpus_tokens",
"vectors_plan": {"tokens", "factory", "embedding_hours", "faiss_hours", "datastore_gib", "index_gib", "serve_gib"},
"vectors_s", "cpu"}`` (``vectors_s`` with ``--vectors``; ``cpu``: the model and whether it has AMX or AVX512_BF16).
"""

import argparse
import json
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from flows.backfill import BackfillParams, backfill_dump  # noqa: E402
from flows.index import IndexParams, index_corpus  # noqa: E402
from flows.ingest import ingest_corpus  # noqa: E402
from flows.params import ClusterParams, IngestParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.cluster import dask_client, dask_cluster, worker_threads  # noqa: E402
from npmcore.encoder import default_encoder_path, encoder_config  # noqa: E402
from npmcore.evaluation.dumps import DUMP_DATES, SIMPLE, dated_dump, simple_wikipedia  # noqa: E402
from npmcore.index.datastore import embedding_precision, embedding_seconds  # noqa: E402
from npmcore.index.indexer import corpus_choice  # noqa: E402
from npmcore.machine import cpu_flags, cpu_name  # noqa: E402
from npmcore.snapshots import open_corpus, open_index  # noqa: E402

HOUR, GIB = 3600, 2**30


def vectors_plan(corpus: str, address: str) -> dict:
    """What embedding and indexing the corpus's token vectors would take here (the index plan's figures)."""
    encoder = str(default_encoder_path())
    choice = corpus_choice(corpus, None)
    with dask_client(address) as client:
        threads = worker_threads(client)
    precision = embedding_precision(None, "auto")
    return {
        "tokens": choice.tokens,
        "factory": choice.factory,
        "precision": precision,
        "worker_threads": threads,
        "embedding_hours": round(embedding_seconds(corpus, None, threads, precision) / HOUR, 2),
        "faiss_hours": round((choice.train_s + choice.encode_s / threads) / HOUR, 2),
        "datastore_gib": round(choice.tokens * encoder_config(encoder).hidden_size * 2 / GIB, 1),
        "index_gib": round(choice.disk_bytes / GIB, 1),
        "serve_gib": round(choice.ram_bytes / GIB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="sources-store", help="store of the corpora and indexes")
    parser.add_argument("--vectors", action="store_true", help="also embed and index the combined datastore")
    args = parser.parse_args()
    store = str(Path(args.store).resolve()) if "://" not in args.store else args.store
    flags = cpu_flags()
    with prefect_api():
        first = IngestParams(inputs=[str(dated_dump("2020-09"))], store=store, dump_date=DUMP_DATES["2020-09"])
        english = index_corpus(IndexParams(store=store, corpus=ingest_corpus(first), vectors=False))
        started = time.perf_counter()
        added = backfill_dump(
            BackfillParams(dump=[str(simple_wikipedia())], dump_date=DUMP_DATES[SIMPLE], store=store, previous=english)
        )
        backfill_s = time.perf_counter() - started
        simple = next(s for s in open_corpus(added.corpus).sources if s.name == "simple.wikipedia.org")
        with dask_cluster(n_workers=ClusterParams().n_workers, store=store) as address:
            plan = vectors_plan(added.corpus, address)
        vectors_s = None
        if args.vectors:
            started = time.perf_counter()
            index_corpus(IndexParams(store=store, corpus=added.corpus))
            vectors_s = round(time.perf_counter() - started, 1)
    line = {
        "backfill_s": round(backfill_s, 1),
        **{k: getattr(simple, k) for k in ("docs", "empty_docs", "blocks", "tokens")},
        "corpus_tokens": open_index(added.index).manifest.counts["tokens"],
        "vectors_plan": plan,
        "vectors_s": vectors_s,
        "cpu": f"{cpu_name()}; " + ", ".join(f for f in ("amx_bf16", "avx512_bf16", "avx2") if f in flags),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
