"""Benchmark: training-step throughput vs a bare encoder forward+backward, on CPU or a GPU.

Usage: python bench/train_step.py [--device cpu|cuda] [--preset cpu-small] [--steps 6] [--batch-size 16]
                                  [--max-tokens 256] [--objective npm|npm-single|mlm] [--data FILE | --bundle FILE]
Ingests one shard of ../shared/data/enwiki_sample (or reads ``--bundle``), trains ``steps``
steps (batching, masking, loss, optimizer: everything a real step does) and, after each
step, times a bare forward+backward of a second copy of the encoder, set up the same way
(dropout), on the same masked batch: interleaved, so drift in the machine's speed does not
favour either side. Rates are total tokens over total time; the first step is warm-up.
On CUDA the preset's precision applies (bf16 autocast) and the peak GPU memory of the
training steps is reported (the bare copy's weights included). Prints a summary and, as its
last line, one JSON object {"tokens_per_s", "fwd_bwd_tokens_per_s", "overhead"} (CUDA:
also "peak_memory_gib") with overhead = 1 - tokens_per_s / fwd_bwd_tokens_per_s.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import torch  # noqa: E402

from npmcore.corpus.ingest import ingest  # noqa: E402
from npmcore.corpus.partitions import IngestConfig  # noqa: E402
from npmcore.model.step_batches import StepBatch, mask_batch, micro_batches  # noqa: E402
from npmcore.model.step_stats import StepStats, encoded_tokens  # noqa: E402
from npmcore.model.train import autocast, precision, train, training_model  # noqa: E402
from npmcore.model.train_config import PRESETS, TrainConfig, configure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def bare_fwd_bwd(model: torch.nn.Module, batch: StepBatch, config: TrainConfig, device: torch.device) -> float:
    """Seconds of the encoder's forward and backward alone on one masked batch (what a step encodes)."""
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
    return time.perf_counter() - start


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
        tokenizer, bare_model = training_model(config)  # a second copy, set up as the run's (dropout)
        bare_model.to(device).train()
        bare_batches = micro_batches(config, 0)
        tokens, step_seconds, bare_seconds = [], [], []

        def after_step(stats: StepStats) -> None:  # runs outside the step's own timing
            batch = mask_batch(next(bare_batches), tokenizer, config, stats.step - 1, 0)
            tokens.append(encoded_tokens(batch))
            step_seconds.append(tokens[-1] / stats.tokens_per_s)
            bare_seconds.append(bare_fwd_bwd(bare_model, batch, config, device))

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        train(config, str(Path(store, "run")), on_step=after_step)
    # step 1 of each is warm-up
    step_rate = sum(tokens[1:]) / sum(step_seconds[1:])
    bare_rate = sum(tokens[1:]) / sum(bare_seconds[1:])
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
