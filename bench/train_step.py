"""Benchmark: training-step throughput vs a bare encoder forward+backward, on CPU or a GPU.

Usage: python bench/train_step.py [--device cpu|cuda] [--preset cpu-small] [--steps 6] [--batch-size 16]
                                  [--max-tokens 256] [--objective npm|npm-single|mlm] [--data FILE | --bundle FILE]
Ingests one shard of ../shared/data/enwiki_sample (or reads ``--bundle``), trains ``steps``
steps (batching, masking, loss, optimizer: everything a real step does) between two runs
of a bare forward+backward of the same encoder on the same masked batches (before and
after, so drift in the machine's speed does not favour either side). The first step of
each is warm-up and not counted. On CUDA the preset's precision applies (bf16 autocast)
and the peak GPU memory of the training steps is reported. Prints a summary and, as its
last line, one JSON object {"tokens_per_s", "fwd_bwd_tokens_per_s", "overhead"} (CUDA:
also "peak_memory_gib") with overhead = 1 - tokens_per_s / fwd_bwd_tokens_per_s.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import torch  # noqa: E402

from npmcore.encoder import load_masked_lm  # noqa: E402
from npmcore.ingest import IngestConfig, ingest  # noqa: E402
from npmcore.train import PRESETS, TrainConfig, autocast, configure, mask_batch, micro_batches, precision, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def bare_fwd_bwd_rates(config: TrainConfig, device: torch.device) -> list[float]:
    """Tokens/s of the encoder's forward and backward alone on the config's masked batches."""
    tokenizer, model = load_masked_lm(config.encoder)
    model.to(device).train()
    batches = micro_batches(config, 0)
    rates = []
    for step in range(config.steps):
        batch = mask_batch(next(batches), tokenizer, config, step, 0)
        parts = [batch.npm.input_ids, batch.npm.masked_input_ids] if batch.npm is not None else [batch.mlm.input_ids]
        masks = (
            [batch.npm.attention_mask, batch.npm.masked_attention_mask]
            if batch.npm is not None
            else [batch.mlm.attention_mask]
        )
        ids, mask = torch.cat(parts).to(device), torch.cat(masks).to(device)
        sync(device)
        start = time.perf_counter()
        with autocast(precision(config, device), device):
            model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state.float().sum().backward()
        model.zero_grad(set_to_none=True)
        sync(device)
        rates.append(int(mask.sum()) / (time.perf_counter() - start))
    return rates[1:]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu-small")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "enwiki_sample" / "wiki_00"))
    parser.add_argument("--bundle", default=None, help="a training bundle instead of --data")
    parser.add_argument(
        "--encoder", default=None, help="initial encoder (default: the preset's; MiniLM-L6 as published)"
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--objective", default=None, choices=["npm", "npm-single", "mlm"])
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    with tempfile.TemporaryDirectory() as store:
        corpus = args.bundle or ingest([args.data], store, IngestConfig(max_tokens=args.max_tokens))
        config = configure(
            corpus,
            args.preset,
            objective=args.objective,
            encoder=args.encoder,
            steps=args.steps,
            batch_size=args.batch_size,
            warmup_steps=1,
            checkpoint_every=10**9,
        )
        bare = bare_fwd_bwd_rates(config, device)
        rates: list[float] = []
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        train(config, str(Path(store, "run")), on_step=lambda s: rates.append(s.tokens_per_s))
        step_rate = statistics.median(rates[1:])
        bare_rate = statistics.median(bare + bare_fwd_bwd_rates(config, device))
    result = {
        "tokens_per_s": round(step_rate, 1),
        "fwd_bwd_tokens_per_s": round(bare_rate, 1),
        "overhead": round(1 - step_rate / bare_rate, 4),
    }
    if device.type == "cuda":
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(
        f"{args.steps} steps of {config.batch_size} x <= {args.max_tokens} tokens ({config.objective}, {args.device}): "
        f"training step {step_rate:,.0f} tokens/s, bare forward+backward {bare_rate:,.0f} tokens/s"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
