"""Quality check for training: held-out accuracy of the objective, initial vs trained encoder.

Usage: python bench/train_quality.py [--objective npm|mlm] [--encoder PATH] [--steps 200] [--batch-size 8]
                                     [--max-tokens 128] [--eval-batches 20] [--corpus SNAPSHOT]
Trains on the embedded default corpus (or ``--corpus``) and evaluates on held-out articles
(../shared/data/enwiki_sample/wiki_01, never trained on), with the same masked batches for
both encoders: NPM's in-batch start/end retrieval top-1 of the masked-span queries, or the
masked-LM stage's masked-token top-1 (``mlm_acc``). ``--steps 0`` evaluates the initial
encoder only (``--encoder``: any checkpoint folder, e.g. an exported MLM stage). Last line:
one JSON object {"objective", "steps", "batch_size", "train_s", "init_<metric>", "trained_<metric>"}.
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
from npmcore.corpus.readers import default_corpus  # noqa: E402
from npmcore.encoder import load_masked_lm  # noqa: E402
from npmcore.model.train import held_out_metrics, train  # noqa: E402
from npmcore.model.train_config import configure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--held-out", default=str(ROOT.parent / "shared" / "data" / "enwiki_sample" / "wiki_01"))
    parser.add_argument("--objective", choices=["npm", "npm-single", "mlm"], default="npm")
    parser.add_argument("--encoder", default=None, help="initial encoder (default: MiniLM-L6 as published)")
    parser.add_argument(
        "--corpus", default=None, help="corpus snapshot to train on (default: the embedded corpus, ingested)"
    )
    parser.add_argument("--steps", type=int, default=200, help="0: evaluate the initial encoder only")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--eval-batches", type=int, default=20)
    parser.add_argument("--store", default=None, help="keep the corpora and the run here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or tmp
        ingest_config = IngestConfig(max_tokens=args.max_tokens)
        corpus = args.corpus or ingest(default_corpus(), store, ingest_config)
        held_out = ingest([args.held_out], store, ingest_config)
        config = configure(
            corpus,
            objective=args.objective,
            encoder=args.encoder,
            steps=max(1, args.steps),
            batch_size=args.batch_size,
            lr=args.lr,
            warmup_steps=args.steps // 10,
            checkpoint_every=max(1, args.steps // 4),
        )
        torch.manual_seed(config.seed)  # the fresh MLM head a run starts with
        tokenizer, init = load_masked_lm(config.encoder)
        before = held_out_metrics(init, tokenizer, config, held_out, args.eval_batches)
        print(f"initial encoder on held-out batches: {before}", flush=True)
        start, after = time.perf_counter(), {}
        if args.steps:

            def report(stats):
                if stats.step % 10 == 0:
                    print(f"step {stats.step}: {stats}", flush=True)

            _, trained = train(config, f"{store}/runs/quality", on_step=report)
            after = held_out_metrics(trained, tokenizer, config, held_out, args.eval_batches)
            print(f"trained encoder on held-out batches: {after}")
        seconds = time.perf_counter() - start
    result = {
        "objective": args.objective,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "train_s": round(seconds, 1),
        **{f"init_{k}": round(v, 4) for k, v in before.items()},
        **{f"trained_{k}": round(v, 4) for k, v in after.items()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
