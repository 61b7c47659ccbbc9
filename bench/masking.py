"""Benchmark: NPM span masking of 16 x 256-token batches of real Wikipedia blocks.

Usage: python bench/masking.py [--data ../shared/data/enwiki_sample] [--batches 50]
Blocks (at most 256 default-encoder tokens) are taken in document order, so blocks of
one article share a batch, 16 to a batch. Only mask_spans is timed (one core, the
tokenizer's word tables built before the clock starts). Prints one line, then as its last
line one JSON object: {"ms_per_batch", "spans_per_batch", "masked_fraction"}.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import torch  # noqa: E402

from npmcore.corpus.blocks import split_document  # noqa: E402
from npmcore.corpus.readers import read_wikiextractor  # noqa: E402
from npmcore.encoder import load_tokenizer  # noqa: E402
from npmcore.model.masking import MaskingConfig, mask_spans  # noqa: E402
from npmcore.vocab import vocab_tables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH, MAX_TOKENS = 16, 256


def batches(data: Path, n_batches: int, tokenizer) -> list[list[list[int]]]:
    blocks = []
    for path in sorted(data.glob("wiki_*")):
        for doc in read_wikiextractor(path.read_text(encoding="utf-8"), path.name):
            if doc.text:
                blocks += [b.token_ids for b in split_document(doc, tokenizer, MAX_TOKENS)]
            if len(blocks) >= BATCH * n_batches:
                return [blocks[i : i + BATCH] for i in range(0, BATCH * n_batches, BATCH)]
    raise SystemExit(f"{data} holds only {len(blocks)} blocks, fewer than {BATCH * n_batches}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "enwiki_sample"))
    parser.add_argument("--batches", type=int, default=50, help="batches to time (>= 20)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    data = batches(Path(args.data), args.batches, tokenizer)
    vocab_tables(tokenizer)
    config, generator = MaskingConfig(), torch.Generator().manual_seed(0)
    seconds, spans, masked = [], 0, 0
    for batch in data:
        start = time.perf_counter()
        mb = mask_spans(batch, tokenizer, config, generator)
        seconds.append(time.perf_counter() - start)
        spans += len(mb.span_seq)
        masked += int(mb.span_len.sum())
    tables = vocab_tables(tokenizer)
    real = sum(int((~torch.from_numpy(tables.special[seq])).sum()) for batch in data for seq in batch)
    result = {
        "ms_per_batch": round(1000 * statistics.mean(seconds), 2),
        "spans_per_batch": round(spans / len(data), 1),
        "masked_fraction": round(masked / real, 4),
    }
    print(
        f"{len(data)} batches of {BATCH} x <= {MAX_TOKENS} tokens: mean {result['ms_per_batch']} ms, "
        f"median {1000 * statistics.median(seconds):.2f} ms, max {1000 * max(seconds):.2f} ms per batch; "
        f"{result['spans_per_batch']} spans, {100 * result['masked_fraction']:.1f} % of real tokens masked"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
