"""Benchmark: the datastore's embedding (``npmcore.encoder.encode``) on real blocks, CPU or GPU.

Usage: python bench/embed.py --bundle FILE [--encoder DIR] [--tokens N] [--batch-tokens 2048 32768 ...]

Encodes the first whole blocks of a training bundle (``npmcore bundle``; its token ids are the
corpus blocks exactly as the datastore embeds them, special tokens included) holding about
``--tokens`` tokens, once per ``--batch-tokens`` (the padded tokens of a forward; the datastore's
setting), after one untimed warm-up pass on a small slice, in the precision the datastore's ``auto``
takes there without a probe: on a GPU bf16 autocast (the figure includes moving the vectors back to
host memory, as the datastore does), on a CPU f32 (``npmcore.index.precision`` is not imported: it needs
packages a lent GPU machine lacks).
Needs only torch, transformers, numpy and pyarrow (it runs on a lent GPU machine, infra/README.md).
Prints one line per setting and, last, one JSON object
``{"device", "precision", "tokens", "runs": [{"batch_tokens", "tokens_per_s", "seconds", "peak_memory_gib"}]}``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runs from a tree that is not installed

from npmcore.runtime import configure_environment  # noqa: E402

configure_environment()

import torch  # noqa: E402

from npmcore.corpus.bundle import read_bundle  # noqa: E402
from npmcore.encoder import cached_encoder, default_encoder_path, encode, fast_forward  # noqa: E402
from npmcore.forward import BATCH_TOKENS  # noqa: E402


def first_blocks(bundle: str, tokens: int) -> list[list[int]]:
    """The first whole blocks of ``bundle`` holding at most ``tokens`` tokens (at least one)."""
    out, total = [], 0
    for ids in read_bundle(bundle).column("token_ids").to_pylist():
        if out and total + len(ids) > tokens:
            break
        out.append(ids)
        total += len(ids)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--encoder", default=str(default_encoder_path()))
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[BATCH_TOKENS])
    args = parser.parse_args()
    tokenizer, model = cached_encoder(args.encoder)
    device = next(model.parameters()).device
    precision = "bf16" if device.type == "cuda" else "f32"
    forward = fast_forward(model, precision)
    sequences = first_blocks(args.bundle, args.tokens)
    total = sum(map(len, sequences))
    runs = []
    for batch_tokens in args.batch_tokens:
        encode(model, tokenizer, sequences[:64], batch_tokens, forward)  # kernel selection, the memory pool
        sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        encode(model, tokenizer, sequences, batch_tokens, forward)
        sync(device)
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
        runs.append(
            {"batch_tokens": batch_tokens, "tokens_per_s": total / seconds, "seconds": seconds, "peak_memory_gib": peak}
        )
        print(f"batch_tokens {batch_tokens:>7}: {total / seconds:>12,.0f} tokens/s, peak {peak:.2f} GiB", flush=True)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(json.dumps({"device": name, "precision": precision, "tokens": total, "runs": runs}))


if __name__ == "__main__":
    main()
