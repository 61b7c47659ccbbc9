"""What in-batch masking masks: the share of dates, numbers and rare words among masked spans and their
positives, against their share of the text, at a CPU batch (16) and the paper's (512).

Usage: python bench/span_kinds.py [--corpus SNAPSHOT_OR_BUNDLE] [--files 4] [--sequences 2048]
                                  [--batch-sizes 16 512] [--rare-boost 1 4]
Batches are the training's own (document-grouped, 256-token blocks; default: the first ``--files``
files of ../shared/data/enwiki_sample, ingested), masked with the shipped recipe's masking (cpu-quality:
spans of content words, no title n-grams) and, for each ``--rare-boost``, spans holding a date, a
number or a rare token (in at most 1 in 100 blocks: npmcore.rarity) weighted by it. ``--sequences``
sequences at each batch size. A span (a word) is of the first kind among date, number, rare that one
of its tokens has. Last line: one JSON object {"text": {kind: share of words}, "masked": {"B=16,boost=1":
{"spans": {kind: share}, "positives": {kind: share}, "spans_per_seq"}}}.
"""

import argparse
import itertools
import json
import tempfile
from dataclasses import replace
from pathlib import Path

from npmcore.runtime import configure_environment

configure_environment()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from npmcore.corpus.ingest import ingest  # noqa: E402
from npmcore.corpus.partitions import IngestConfig  # noqa: E402
from npmcore.encoder import load_tokenizer  # noqa: E402
from npmcore.model.batching import iter_batches  # noqa: E402
from npmcore.model.masking import mask_spans  # noqa: E402
from npmcore.model.step_batches import training_rarity  # noqa: E402
from npmcore.model.train_config import PRESETS  # noqa: E402
from npmcore.rarity import KINDS, kind_shares, piece_kinds, token_kinds, word_kinds  # noqa: E402
from npmcore.vocab import vocab_tables  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "enwiki_sample"


def text_shares(batches: list, tokenizer, rarity) -> dict[str, float]:
    """Kinds of the content words (after each block's title prefix) of the batches."""
    tables, kinds = vocab_tables(tokenizer), []
    for batch in batches:
        for ids, title in zip(batch.token_ids, batch.title_tokens, strict=True):
            row = np.asarray(ids)[None, :]
            content = ~tables.special[row]
            content &= np.cumsum(content, axis=1) > title
            kind = piece_kinds(row, token_kinds(tokenizer), rarity.rare)
            kinds.append(word_kinds(kind, tables.word_start[row], content))
    return kind_shares(np.concatenate(kinds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=None, help="corpus snapshot or training bundle (default: --files ingested)")
    parser.add_argument("--files", type=int, default=4, help="enwiki_sample files ingested when no --corpus")
    parser.add_argument("--sequences", type=int, default=2048, help="sequences masked at each batch size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 512])
    parser.add_argument("--rare-boost", type=float, nargs="+", default=[1.0, 4.0])
    args = parser.parse_args()
    tokenizer = load_tokenizer()
    masking = PRESETS["cpu-quality"]["masking"]
    with tempfile.TemporaryDirectory() as tmp:
        files = [str(DATA / f"wiki_{i:02d}") for i in range(args.files)]
        corpus = args.corpus or ingest(files, tmp, IngestConfig(max_tokens=256))
        rarity = training_rarity(corpus, len(tokenizer))
        result = {"text": None, "masked": {}}
        for size in args.batch_sizes:
            batches = list(itertools.islice(iter_batches(corpus, size, seed=0), max(1, args.sequences // size)))
            if result["text"] is None:
                result["text"] = text_shares(batches, tokenizer, rarity)
            for boost in args.rare_boost:
                config = replace(masking, rare_boost=boost)
                spans, positives, n_spans = [], [], 0
                for i, batch in enumerate(batches):
                    mb = mask_spans(
                        batch.token_ids, tokenizer, config, torch.Generator().manual_seed(i), batch.title_tokens, rarity
                    )
                    spans.append(mb.span_kind.numpy())
                    positives.append(mb.span_kind[mb.pos_span].numpy())
                    n_spans += len(mb.span_seq)
                row = {
                    "spans": kind_shares(np.concatenate(spans)),
                    "positives": kind_shares(np.concatenate(positives)),
                    "spans_per_seq": n_spans / (len(batches) * size),
                }
                result["masked"][f"B={size},boost={boost:g}"] = row
                answer = 1 - row["spans"]["other"]
                print(
                    f"batch {size}, rare_boost {boost:g}: {len(batches)} batches, "
                    f"{row['spans_per_seq']:.1f} spans/seq; "
                    + ", ".join(f"{k} {100 * row['spans'][k]:.1f}%" for k in KINDS if k != "other")
                    + f" of spans (dates+numbers+rare {100 * answer:.1f}%, positives "
                    + f"{100 * (1 - row['positives']['other']):.1f}%)",
                    flush=True,
                )
        text = result["text"]
        print(
            "text: "
            + ", ".join(f"{k} {100 * text[k]:.1f}%" for k in KINDS if k != "other")
            + f" of content words (together {100 * (1 - text['other']):.1f}%)"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
