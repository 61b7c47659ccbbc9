"""Datastore + index benchmark on real Wikipedia text (../shared/data/enwiki_sample).

Ingests the first ``--shards`` extract files (6 give about 1.2M corpus tokens), then in
one run measures:

* ``encoder_fwd_tokens_per_s``: a bare forward of the encoder (all cores, batches of
  similar length, no I/O) over ``--fwd-tokens`` tokens of the same blocks;
* ``int8_speedup`` and ``int8_overlap``: the same forward with the encoder's Linear layers
  in int8 (PyTorch dynamic quantization, ``bench/int8.py``), its speed over the fp32
  forward's and the share of the exact fp32 top-k (over those tokens, for ``--queries``
  random tokens' vectors) that its vectors keep;
* ``embed_tokens_per_s``: the datastore build on a local Dask cluster (one
  single-threaded worker per core), reading shards and writing vectors;
* ``bytes_per_token``: every file of the index snapshot except the BM25 index (the
  FAISS index with its direct map, token ids, block offsets) per corpus token;
  ``bm25_bytes_per_token`` is printed beside it;
* ``recall_at_k``: overlap of the index's top-k with the exact top-k (brute force over
  the datastore's vectors) for the q_start / q_end vectors of real masked sentences from
  a held-out extract file;
* ``qps_closed`` (closed-set label scoring, k tokens from the index) and ``qps_open``
  (phrase prediction restricted to the top-3 BM25 passages), batches of 16 queries;
* ``p50_open_ms``, ``p95_open_ms``, ``p50_closed_ms``, ``p95_closed_ms``: latency of one
  query at a time in this warm process (encoder loaded, JVM started);
* ``cold_query_s``: one ``npmcore query`` command from start to exit (interpreter, encoder,
  index and JVM start-up included);
* ``build_s``: embedding plus index building.

The last line is one JSON object.
"""

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def masked_sentences(path: Path, n: int, seed: int = 0) -> list[str]:
    """Real sentences of a held-out extract file, one word replaced by [MASK]."""
    text = re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8"))
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 60 < len(s.strip()) < 250]
    rng = random.Random(seed)
    out = []
    for sentence in rng.sample(sentences, n):
        words = sentence.split()
        i = rng.randrange(1, len(words) - 1)
        out.append(" ".join([*words[:i], "[MASK]", *words[i + 1 :]]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=6, help="enwiki_sample files to index (6: about 1.2M tokens)")
    parser.add_argument("--factory", default=None, help="FAISS factory string (default: the project's default)")
    parser.add_argument("--k", type=int, default=4096, help="k of recall_at_k and of closed-set retrieval")
    parser.add_argument("--queries", type=int, default=64, help="masked sentences for recall and speed")
    parser.add_argument("--fwd-tokens", type=int, default=150_000, help="tokens in the bare forward measurement")
    parser.add_argument("--store", default=None, help="a new or empty store folder to keep (default: a temporary one)")
    args = parser.parse_args()
    if args.store and Path(args.store).exists() and any(Path(args.store).iterdir()):
        parser.error(f"--store {args.store} is not empty: its snapshots would be reused and the build not measured")

    sys.path.insert(0, str(ROOT))
    from npmcore.runtime import configure_environment

    configure_environment()
    import faiss
    import numpy as np
    import torch

    from npmcore.answer.inference import NPM, InferenceConfig
    from npmcore.answer.tokens import classify
    from npmcore.cluster import dask_client
    from npmcore.corpus.ingest import ingest
    from npmcore.encoder import load_encoder, torch_forward
    from npmcore.index.datastore import build_datastore
    from npmcore.index.faiss_index import search
    from npmcore.index.indexer import IndexConfig, build_index
    from npmcore.snapshots import iter_shards, read_blocks
    from npmcore.storage import read_manifest

    sys.path.insert(0, str(ROOT / "bench"))
    from int8 import rate, torch_dynamic_int8
    from topk import overlap, top_k

    files = [str(DATA / "enwiki_sample" / f"wiki_{i:02d}") for i in range(args.shards)]
    held_out = DATA / "enwiki_sample" / "wiki_63"
    with tempfile.TemporaryDirectory(prefix="npm-bench-") as tmp:
        store = args.store or tmp
        with dask_client() as client:
            corpus = ingest(files, store, client=client)
            sequences = [ids for t in read_blocks(corpus, ["token_ids"]) for ids in t.column("token_ids").to_pylist()]
            sample, total = [], 0
            for ids in sequences:
                if total >= args.fwd_tokens:
                    break
                sample.append(ids)
                total += len(ids)
            tokenizer, model = load_encoder()
            fwd, fp32_vectors = rate(model, tokenizer, sample, torch_forward(model))
            int8_rate, int8_vectors = rate(model, tokenizer, sample, torch_forward(torch_dynamic_int8(model)))
            picked = np.random.default_rng(0).choice(len(fp32_vectors), args.queries, replace=False)
            int8_overlap = overlap(top_k(int8_vectors, picked, args.k), top_k(fp32_vectors, picked, args.k))
            del model, fp32_vectors, int8_vectors
            print(
                f"bare forward: {fwd:,.0f} tokens/s with {torch.get_num_threads()} threads; "
                f"int8 (PyTorch dynamic): {int8_rate:,.0f} tokens/s, top-{args.k} overlap {int8_overlap:.3f}",
                file=sys.stderr,
            )

            start = time.perf_counter()
            datastore = build_datastore(corpus, store, client=client)
            embed_s = time.perf_counter() - start
            tokens = read_manifest(datastore).counts["tokens"]
            block_tokens = sum(len(s) for s in sequences)
            print(f"datastore: {tokens:,} content tokens in {embed_s:.1f} s", file=sys.stderr)

            start = time.perf_counter()
            index_url = build_index(datastore, IndexConfig(factory=args.factory), client)
            index_s = time.perf_counter() - start
        manifest = read_manifest(index_url)
        query_bytes = sum(e.bytes for p, e in manifest.files.items() if not p.startswith("bm25/"))
        bm25_bytes = sum(e.bytes for p, e in manifest.files.items() if p.startswith("bm25/"))
        print(
            f"index {manifest.config['factory']} ({manifest.config['search_params']}) built in {index_s:.1f} s",
            file=sys.stderr,
        )

        npm = NPM(index_url)
        queries = masked_sentences(held_out, args.queries)
        q = (
            npm.encode_queries(queries, 2).reshape(-1, npm.retrieval.index.d) * npm.scale
        )  # q_start and q_end of each query
        exact = faiss.IndexFlatIP(npm.retrieval.index.d)
        for _, arrays in iter_shards(datastore):
            exact.add(np.asarray(arrays["vectors"], dtype=np.float32))
        _, truth = search(exact, q, args.k)
        _, found = npm.retrieval.search(q, args.k)
        recall = overlap(found, truth)
        del exact

        labels = [np.array(npm.tokenizer.convert_tokens_to_ids(w)) for w in (["great", "good"], ["terrible", "bad"])]
        batches = [queries[i : i + 16] for i in range(0, len(queries), 16)]
        start = time.perf_counter()
        for batch in batches:
            classify(npm, batch, labels, config=InferenceConfig(k=args.k, tau=5.0))
        qps_closed = len(queries) / (time.perf_counter() - start)
        npm.predict(queries[:2], InferenceConfig(restrict=True))  # start the JVM
        start = time.perf_counter()
        for batch in batches:
            npm.predict(batch, InferenceConfig(restrict=True))
        qps_open = len(queries) / (time.perf_counter() - start)
        latency = {"open": [], "closed": []}
        for query in queries:
            start = time.perf_counter()
            npm.predict([query], InferenceConfig(restrict=True))
            latency["open"].append(1000 * (time.perf_counter() - start))
            start = time.perf_counter()
            classify(npm, [query], labels, config=InferenceConfig(k=args.k, tau=5.0))
            latency["closed"].append(1000 * (time.perf_counter() - start))
        start = time.perf_counter()
        cli = str(Path(sys.executable).parent / "npmcore")
        subprocess.run([cli, "query", "--index", index_url, queries[0]], check=True, capture_output=True)
        cold_s = time.perf_counter() - start

    print(
        json.dumps(
            {
                "tokens": tokens,
                "embed_tokens_per_s": round(block_tokens / embed_s, 1),
                "encoder_fwd_tokens_per_s": round(fwd, 1),
                "int8_speedup": round(int8_rate / fwd, 3),
                "int8_overlap": round(int8_overlap, 4),
                "bytes_per_token": round(query_bytes / tokens, 2),
                "bm25_bytes_per_token": round(bm25_bytes / tokens, 2),
                "recall_at_k": round(recall, 4),
                "k": args.k,
                "factory": manifest.config["factory"],
                "search_params": manifest.config["search_params"],
                "qps_closed": round(qps_closed, 2),
                "qps_open": round(qps_open, 2),
                **{
                    f"p{p}_{kind}_ms": round(float(np.percentile(ms, p)), 1)
                    for kind, ms in latency.items()
                    for p in (50, 95)
                },
                "cold_query_s": round(cold_s, 1),
                "build_s": round(embed_s + index_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
