"""Benchmark: NPM training-step throughput vs a bare encoder forward+backward.

Usage: python bench/train_step.py [--steps 6] [--batch-size 16] [--max-tokens 256] [--objective npm]
Ingests one shard of ../shared/data/enwiki_sample, trains `steps` steps (batching, masking,
loss, optimizer: everything a real step does) between two runs of a bare forward+backward of
the same encoder on the same masked batches (before and after, so drift in the machine's
speed does not favour either side). Prints a summary and, as its last line, one JSON object
{"tokens_per_s", "fwd_bwd_tokens_per_s", "overhead"} with overhead = 1 - tokens_per_s / fwd_bwd_tokens_per_s.
The first step of each is warm-up and not counted.
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

from npmcore.encoder import load_encoder  # noqa: E402
from npmcore.ingest import IngestConfig, ingest  # noqa: E402
from npmcore.train import TrainConfig, mask_batch, micro_batches, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def bare_fwd_bwd_rates(config: TrainConfig) -> list[float]:
    tokenizer, model = load_encoder(config.encoder)
    model.train()
    batches = micro_batches(config, 0)
    rates = []
    for step in range(config.steps):
        batch = mask_batch(next(batches), tokenizer, config, step, 0)
        ids = torch.cat([batch.input_ids, batch.masked_input_ids])
        mask = torch.cat([batch.attention_mask, batch.masked_attention_mask])
        start = time.perf_counter()
        model(input_ids=ids, attention_mask=mask).last_hidden_state.sum().backward()
        model.zero_grad(set_to_none=True)
        rates.append(int(mask.sum()) / (time.perf_counter() - start))
    return rates[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "enwiki_sample" / "wiki_00"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--objective", default="npm", choices=["npm", "npm-single"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store:
        corpus = ingest([args.data], store, IngestConfig(max_tokens=args.max_tokens))
        config = TrainConfig(corpus=corpus, steps=args.steps, batch_size=args.batch_size, objective=args.objective,
                             warmup_steps=1, checkpoint_every=10**9)
        bare = bare_fwd_bwd_rates(config)
        rates: list[float] = []
        train(config, str(Path(store, "run")), on_step=lambda s: rates.append(s.tokens_per_s))
        step_rate = statistics.median(rates[1:])
        bare_rate = statistics.median(bare + bare_fwd_bwd_rates(config))
    result = {"tokens_per_s": round(step_rate, 1), "fwd_bwd_tokens_per_s": round(bare_rate, 1),
              "overhead": round(1 - step_rate / bare_rate, 4)}
    print(f"{args.steps} steps of {args.batch_size} x <= {args.max_tokens} tokens ({args.objective}): "
          f"training step {step_rate:,.0f} tokens/s, bare forward+backward {bare_rate:,.0f} tokens/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
