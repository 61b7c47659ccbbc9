"""Quality check for NPM training: held-out in-batch retrieval accuracy, init vs trained.

Usage: python bench/train_quality.py [--steps 200] [--batch-size 8] [--max-tokens 128] [--eval-batches 20]
Trains on the embedded default corpus (Wikipedia dump sample + Lee news) and evaluates on
held-out articles (../shared/data/enwiki_sample/wiki_01, never trained on): the start/end
in-batch retrieval top-1 accuracy of the masked-span queries, with the same masked batches
for both encoders. Last line: one JSON object
{"steps", "batch_size", "train_s", "init_start_acc", "init_end_acc", "trained_start_acc", "trained_end_acc",
 "init_loss", "trained_loss"}.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

from npmcore.corpus import default_corpus  # noqa: E402
from npmcore.encoder import load_encoder  # noqa: E402
from npmcore.ingest import IngestConfig, ingest  # noqa: E402
from npmcore.train import TrainConfig, retrieval_accuracy, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--held-out", default=str(ROOT.parent / "shared" / "data" / "enwiki_sample" / "wiki_01"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--eval-batches", type=int, default=20)
    parser.add_argument("--store", default=None, help="keep the corpora and the run here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or tmp
        ingest_config = IngestConfig(max_tokens=args.max_tokens)
        corpus = ingest(default_corpus(), store, ingest_config)
        held_out = ingest([args.held_out], store, ingest_config)
        config = TrainConfig(corpus=corpus, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                             warmup_steps=max(1, args.steps // 10), checkpoint_every=max(1, args.steps // 4))
        tokenizer, init = load_encoder(config.encoder)
        before = retrieval_accuracy(init, tokenizer, config, held_out, args.eval_batches)
        print(f"init encoder on held-out batches: {before}", flush=True)
        start = time.perf_counter()
        last = {}
        def report(stats):
            last.update(vars(stats))
            if stats.step % 10 == 0:
                print(f"step {stats.step}: loss {stats.loss:.3f} start-acc {stats.start_acc:.3f} "
                      f"end-acc {stats.end_acc:.3f} {stats.tokens_per_s:.0f} tokens/s", flush=True)
        _, trained = train(config, f"{store}/runs/quality", on_step=report)
        seconds = time.perf_counter() - start
        after = retrieval_accuracy(trained, tokenizer, config, held_out, args.eval_batches)
        print(f"trained encoder on held-out batches: {after}")
    result = {"steps": args.steps, "batch_size": args.batch_size, "train_s": round(seconds, 1),
              **{f"init_{k}": round(v, 4) for k, v in before.items()},
              **{f"trained_{k}": round(v, 4) for k, v in after.items()}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
