"""The quality gates of a precision: what bf16 vectors keep of f32's, on the demo corpus.

Usage: python bench/precision.py [--store DIR] [--k 4096] [--data bench/data/cloze-test.jsonl]

Ingests the embedded default corpus (the demo's, 690k tokens) and indexes it twice through the index flow,
with ``precision`` f32 and bf16 (the default factory; a CPU without bf16 units refuses bf16). The queries are
the cloze facts of ``--data``, each giving its two mask vectors (q_start, q_end) as ``NPM`` encodes them, in
the precision of the index searched. Then:

* ``datastore_recall``: the mean share of the f32 datastore's exact top-k (f32 queries, brute force over all
  its vectors) that the bf16 datastore's exact top-k (bf16 queries) holds;
* ``index_recall``: for each precision, the mean share of its own datastore's exact top-k that its index finds
  (the FAISS codes' shortlist re-scored from the datastore, as kNN search does): the index's recall in that
  precision;
* ``cosine``: the mean cosine of each token's bf16 vector with its f32 vector.

Run it alone on the machine. The last line is one JSON object
``{"k", "queries", "datastore_recall", "index_recall": {"f32", "bf16"}, "cosine", "cpu"}``.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runs from a tree that is not installed

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import numpy as np  # noqa: E402

from flows.index import IndexParams, index_corpus  # noqa: E402
from flows.ingest import ingest_corpus  # noqa: E402
from flows.params import IngestParams  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402
from npmcore.answer.inference import NPM  # noqa: E402
from npmcore.evaluation.tasks import load_task  # noqa: E402
from npmcore.machine import cpu_name  # noqa: E402
from npmcore.snapshots import DatastoreRows, open_datastore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from topk import overlap  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("f32", "bf16")


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Ids (len(queries), k) of the exact top-k inner products of ``queries`` over ``vectors``."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default=None, help="store of the corpus and both indexes (default: a temp dir)")
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--data", default=str(ROOT / "bench" / "data" / "cloze-test.jsonl"), help="cloze facts")
    args = parser.parse_args()
    queries = [e.query for e in load_task("cloze", limit=None, path=args.data).examples]
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        store = str(Path(args.store or tmp).resolve())
        corpus = ingest_corpus(IngestParams(store=store))
        indexes = {p: index_corpus(IndexParams(store=store, corpus=corpus, precision=p)) for p in PRECISIONS}
        vectors, found, exact = {}, {}, {}
        for precision, index in indexes.items():
            npm = NPM(index, precision=precision)
            q = npm.encode_queries(queries, 2).reshape(-1, npm.dim) * npm.scale
            stored = npm.index_snapshot.datastore
            vectors[precision] = DatastoreRows(stored).gather(
                np.arange(open_datastore(stored).manifest.counts["tokens"])
            )
            exact[precision] = exact_top_k(vectors[precision], q, args.k)
            found[precision] = npm.retrieval.search(q, args.k)[1]
    f32, bf16 = vectors["f32"], vectors["bf16"]
    cosine = (f32 * bf16).sum(1) / (np.linalg.norm(f32, axis=1) * np.linalg.norm(bf16, axis=1))
    result = {
        "k": args.k,
        "queries": len(queries),
        "datastore_recall": round(overlap(exact["bf16"], exact["f32"]), 4),
        "index_recall": {p: round(overlap(found[p], exact[p]), 4) for p in PRECISIONS},
        "cosine": round(float(cosine.mean()), 6),
        "cpu": cpu_name(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
