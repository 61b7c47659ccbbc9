"""Benchmark: the encoder's forward on CPU, runtime against runtime, on real blocks of the default corpus.

Usage: python bench/runtimes.py [--every 12] [--threads 1 2]
Needs the ``bench`` extra for the ONNX Runtime arm (``pip install -e '.[bench]'``: onnx, onnxruntime).

Ingests the embedded default corpus (as ``npmcore demo`` does), takes every ``--every``-th block
and sends them through the default encoder as the datastore does (``npmcore.encoder.encode``:
batches of 8,192 padded tokens, sorted by length) with each arm, for each thread count:

* ``torch``: PyTorch's eager forward (the reference);
* ``torch-compile``: ``torch.compile(model, dynamic=True)``;
* ``onnxruntime``: the encoder exported to ONNX, run by ONNX Runtime (float32);
* ``openvino``: the forward the datastore runs on a CPU in f32 (``npmcore.encoder.fast_forward``).

Per arm: tokens/s (best of two passes after a warm-up), the speed-up over torch at the same
threads, and ``max_abs_diff``, the largest difference of any vector component from torch's.
The last line is one JSON list.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runs from a tree that is not installed

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from npmcore.encoder import encode, fast_forward, load_encoder, torch_forward  # noqa: E402
from npmcore.forward import Forward  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8 import export_onnx, onnx_forward  # noqa: E402


def compiled_forward(model: torch.nn.Module) -> Forward:
    return torch_forward(torch.compile(model, dynamic=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=int, default=12, help="take every N-th block of the corpus")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, torch.get_num_threads()])
    args = parser.parse_args()
    from npmcore.corpus.ingest import ingest
    from npmcore.corpus.partitions import IngestConfig
    from npmcore.corpus.readers import default_corpus
    from npmcore.snapshots import read_blocks

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = ingest(default_corpus(), tmp, IngestConfig(pages_per_partition=25))
        blocks = [ids for t in read_blocks(corpus, ["token_ids"]) for ids in t.column("token_ids").to_pylist()]
        sample = blocks[:: args.every]
        tokens = sum(map(len, sample))
        tokenizer, model = load_encoder()
        for threads in args.threads:
            torch.set_num_threads(threads)
            arms = {
                "torch": lambda: torch_forward(model),
                "torch-compile": lambda: compiled_forward(model),
                "onnxruntime": lambda: onnx_forward(str(export_onnx(model, Path(tmp) / "fp32.onnx"))),
                "openvino": lambda: fast_forward(model, "f32"),
            }
            reference, base = None, None
            for name, make in arms.items():
                forward = make()
                encode(model, tokenizer, sample[:8], forward=forward)
                best = 0.0
                for _ in range(2):
                    started = time.perf_counter()
                    vectors = np.concatenate(encode(model, tokenizer, sample, forward=forward))
                    best = max(best, tokens / (time.perf_counter() - started))
                reference = vectors if reference is None else reference
                base = best if base is None else base
                row = {
                    "arm": name,
                    "threads": threads,
                    "tokens": tokens,
                    "tokens_per_s": round(best),
                    "speedup": round(best / base, 3),
                    "max_abs_diff": float(np.abs(vectors - reference).max()),
                }
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
