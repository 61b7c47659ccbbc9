"""What a training step trains on: a run's global micro-batches in training order (:func:`masked_batches`), each
masked for the config's objective(s) into a :class:`StepBatch`, the same on every rank.

Batches are a function of (seed, epoch) and masking is seeded by (seed, step, micro) alone, so a resumed run, another
rank or a background thread masks exactly the same batches. MLM batches are re-batched by block length; NPM span
masking reads which tokens of the corpus are rare (:func:`training_rarity`).

Imports the shared modules and the training stage's batches (:mod:`npmcore.model.batching`,
:mod:`npmcore.model.neighbours`), masking (:mod:`npmcore.model.masking`, :mod:`npmcore.model.mlm`) and config
(:mod:`npmcore.model.train_config`).
"""

import functools
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerFast

from npmcore.model.batching import Batch, by_length, iter_batches
from npmcore.model.masking import MaskedBatch, mask_spans, mask_tokens
from npmcore.model.mlm import MLMBatch, mask_mlm
from npmcore.model.neighbours import neighbour_batches
from npmcore.model.train_config import TrainConfig
from npmcore.rarity import TokenRarity, corpus_rarity

LENGTH_POOL = 16  # MLM: batches re-batched together by block length (npmcore.model.batching.by_length)


@dataclass(frozen=True)
class StepBatch:
    """One global micro-batch, masked for the config's objective(s)."""

    npm: MaskedBatch | None  # span (npm) or token (npm-single) masking; None for the mlm objective
    mlm: MLMBatch | None  # BERT masking: the mlm objective, or an npm objective with mlm_weight > 0
    docs: Tensor  # (B,) long: each sequence's document, numbered within the batch


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, the same in every process (unlike ``hash`` of strings)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


def to_device(batch: StepBatch, device: torch.device) -> StepBatch:
    def move(part):
        return None if part is None else type(part)(**{f.name: getattr(part, f.name).to(device) for f in fields(part)})

    return StepBatch(move(batch.npm), move(batch.mlm), batch.docs.to(device))


RARITY_BLOCKS = 100_000  # blocks whose tokens are counted for the token rarity of a corpus (its first ones)


@functools.lru_cache(maxsize=2)
def training_rarity(corpus: str, vocab_size: int) -> TokenRarity:
    """Token document frequencies over (the first :data:`RARITY_BLOCKS` blocks of) a corpus or
    bundle: which tokens are rare, for span selection and the masking statistics."""
    blocks = (ids for batch in iter_batches(corpus, 2, seed=0, drop_last=False) for ids in batch.token_ids)
    return corpus_rarity(itertools.islice(blocks, RARITY_BLOCKS), vocab_size)


def mask_batch(
    batch: Batch, tokenizer: PreTrainedTokenizerFast, config: TrainConfig, step: int, micro: int
) -> StepBatch:
    """Mask one (global) micro-batch; seeded by (seed, step, micro) so every rank agrees."""
    npm = mlm = None
    if config.objective != "mlm":
        generator = torch.Generator().manual_seed(derive_seed(config.seed, step, micro))
        if config.objective == "npm":
            rarity = training_rarity(config.corpus, len(tokenizer))
            npm = mask_spans(batch.token_ids, tokenizer, config.masking, generator, batch.title_tokens, rarity)
        else:
            npm = mask_tokens(batch.token_ids, tokenizer, config.masking.ratio, generator, batch.title_tokens)
    if config.objective == "mlm" or config.mlm_weight > 0:
        generator = torch.Generator().manual_seed(derive_seed(config.seed, step, micro, 1))
        mlm = mask_mlm(batch.token_ids, tokenizer, config.masking.ratio, generator)
    numbers = {doc: n for n, doc in enumerate(dict.fromkeys(batch.doc_ids))}
    return StepBatch(npm, mlm, torch.tensor([numbers[doc] for doc in batch.doc_ids]))


def micro_batches(config: TrainConfig, start_step: int) -> Iterator[Batch]:
    """Global micro-batches from ``start_step`` on, epoch after epoch (skipping done ones)."""
    micro = config.batch_size // config.grad_accum
    skip, epoch = start_step * config.grad_accum, 0
    while True:
        produced = 0
        if config.batches == "bm25":
            batches = neighbour_batches(config.corpus, config.neighbours, micro, config.seed, epoch)
        else:
            batches = iter_batches(config.corpus, micro, config.seed, epoch)
        if config.objective == "mlm":  # no in-batch positives needed: batch blocks of similar length
            batches = by_length(batches, LENGTH_POOL, config.seed, epoch)
        for batch in batches:
            produced += 1
            if skip:
                skip -= 1
                continue
            yield batch
        if produced == 0:
            raise ValueError(f"corpus {config.corpus} has fewer blocks than one micro-batch of {micro}")
        epoch += 1


def masked_batches(config: TrainConfig, tokenizer: PreTrainedTokenizerFast, start_step: int) -> Iterator[StepBatch]:
    """The global micro-batches of every step from ``start_step`` on, masked, in training order."""
    batches = micro_batches(config, start_step)
    step = start_step
    while True:
        for micro in range(config.grad_accum):
            yield mask_batch(next(batches), tokenizer, config, step, micro)
        step += 1
