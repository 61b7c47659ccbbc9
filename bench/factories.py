"""Benchmark: FAISS index factories within the byte budget, recall of the exact top-k.

Usage: python bench/factories.py [FACTORY …] [--shards 2 3 | --datastore URL] [--k 4096] [--queries 64]
                                 [--train-size N …] [--rerank 1 4 …] [--search-params nprobe=16 …]
                                 [--opq-iterations 5 50 …]

Ingests and embeds (default encoder, local Dask cluster) the given enwiki_sample files
(``wiki_02`` and ``wiki_03`` by default: about 390k tokens), or takes an existing datastore
(``--datastore``, e.g. the one ``npmcore demo`` built of the embedded default corpus),
encodes the two mask vectors of ``--queries`` real masked sentences of the held-out
``wiki_63`` as ``npmcore query`` does, and for each factory (default: the project's default
and the candidates it was chosen from) and each ``--train-size`` (default: the default index's,
sized to the datastore) and each ``--opq-iterations`` (rounds of an OPQ rotation's training; default the
project's) trains it on that many evenly sampled vectors, adds every vector and
reports per line, per ``--search-params`` and per ``--rerank`` N (the index's top k x N
re-scored with the exact vectors, as kNN search does with the datastore's) ``train_size``,
``opq_iterations``, ``code_bytes`` (per token, token id not included), ``recall`` (mean share of the exact top-k,
brute force over the same vectors), ``train_s``, ``add_s`` and ``search_ms`` (per query vector,
all cores, re-scoring included). The last line is one JSON list.
"""

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "enwiki_sample"
CANDIDATES = ["PQ48np", "OPQ48,PQ48np", "PQ96x4fs", "OPQ96,PQ96x4fs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("factories", nargs="*", default=CANDIDATES)
    parser.add_argument("--shards", type=int, nargs="+", default=[2, 3], help="enwiki_sample file numbers")
    parser.add_argument("--datastore", help="an existing datastore snapshot URL instead of --shards")
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--queries", type=int, default=64, help="masked sentences (two vectors each)")
    parser.add_argument("--train-size", type=int, nargs="+", help="default: the default index's, sized to the data")
    parser.add_argument(
        "--rerank", type=int, nargs="+", default=[1], help="shortlists of k x N re-scored exactly (1: none)"
    )
    parser.add_argument(
        "--search-params", nargs="+", default=[""], help="FAISS search parameters, each measured: nprobe=16 nprobe=64"
    )
    parser.add_argument("--opq-iterations", type=int, nargs="+", help="OPQ training rounds (default: the project's)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "bench"))
    from index import masked_sentences
    from topk import overlap

    from npmcore.runtime import configure_environment

    configure_environment()
    import faiss
    import numpy as np

    from npmcore.answer.inference import NPM
    from npmcore.cluster import dask_client
    from npmcore.corpus.ingest import ingest
    from npmcore.index.datastore import build_datastore
    from npmcore.index.faiss_index import OPQ_ITERATIONS, rescore, set_search_params, train_index
    from npmcore.index.index_choice import default_train_size
    from npmcore.index.indexer import IndexConfig, build_index
    from npmcore.snapshots import iter_shards

    with tempfile.TemporaryDirectory(prefix="npm-bench-") as store:
        datastore = args.datastore
        if datastore is None:
            with dask_client() as client:
                corpus = ingest([str(DATA / f"wiki_{i:02d}") for i in args.shards], store, client=client)
                datastore = build_datastore(corpus, store, client=client)
        vectors = np.concatenate([np.asarray(a["vectors"], dtype=np.float32) for _, a in iter_shards(datastore)])
        npm = NPM(build_index(datastore, IndexConfig(factory="Flat", bm25=False)))
        queries = npm.encode_queries(masked_sentences(DATA / "wiki_63", args.queries), 2).reshape(
            -1, npm.retrieval.index.d
        )
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    truth = exact.search(queries, args.k)[1]
    del exact
    rows = []
    sizes, rounds = args.train_size or [default_train_size(len(vectors))], args.opq_iterations or [OPQ_ITERATIONS]
    runs = [(f, n, r) for f, n in itertools.product(args.factories, sizes) for r in (rounds if "OPQ" in f else [None])]
    for factory, train_size, opq_iterations in runs:
        rng = np.random.default_rng(0)
        sample = vectors[np.sort(rng.choice(len(vectors), min(train_size, len(vectors)), replace=False))]
        start = time.perf_counter()
        index = train_index(factory, sample, OPQ_ITERATIONS if opq_iterations is None else opq_iterations)
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        index.add(vectors)
        add_s = time.perf_counter() - start
        for params, rerank in itertools.product(args.search_params, args.rerank):
            set_search_params(index, params)
            start = time.perf_counter()
            found = index.search(queries, args.k * rerank)[1]
            if rerank > 1:
                found = rescore(queries, found, lambda ids: vectors[ids], args.k)[1]
            search_ms = 1000 * (time.perf_counter() - start) / len(queries)
            row = {
                "factory": factory,
                "search_params": params,
                "rerank": rerank,
                "train_size": len(sample),
                "opq_iterations": opq_iterations,
                "code_bytes": index.sa_code_size(),
                "recall": round(overlap(found, truth), 4),
                "train_s": round(train_s, 1),
                "add_s": round(add_s, 1),
                "search_ms": round(search_ms, 1),
            }
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    print(f"{len(vectors):,} tokens, {len(queries)} query vectors, k = {args.k}", file=sys.stderr)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
