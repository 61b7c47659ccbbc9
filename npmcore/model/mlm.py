"""The masked-language-model stage: BERT-style token masking and a loss on masked positions only.

NPM (Min et al. 2023) starts from RoBERTa, an encoder already trained to fill in masks.
The default MiniLM-L6 is a sentence-embedding model whose ``[MASK]`` outputs are nearly
one vector in every context, so :mod:`npmcore.model.train` can first train it as a masked LM
(``objective="mlm"``) and then continue with NPM, or add this loss to NPM's as an
auxiliary term (``mlm_weight``).

* :func:`mask_mlm`: in each sequence, ``ratio`` of the real non-special tokens (at least
  one) are chosen uniformly; 80% of them become the mask token, 10% a random ordinary
  token, 10% stay as they are (Devlin et al. 2019). The targets are the original tokens.
* :func:`mlm_loss`: the encoder's hidden states at the chosen positions only go through
  the MLM head (transform, LayerNorm, decoder tied to the input embeddings): projecting
  every position onto a 30k vocabulary would cost as much as the encoder itself.
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedTokenizerFast

from npmcore.vocab import vocab_tables


@dataclass(frozen=True)
class MLMBatch:
    input_ids: Tensor  # (B, T) long: sequences with the chosen tokens replaced (80/10/10), right-padded
    attention_mask: Tensor  # (B, T) long
    positions: Tensor  # (M,) long: flat positions b * T + t of the chosen tokens, ascending
    labels: Tensor  # (M,) long: the original token at each chosen position


def mask_mlm(
    sequences: list[list[int]], tokenizer: PreTrainedTokenizerFast, ratio: float, generator: torch.Generator
) -> MLMBatch:
    """BERT masking of one batch.

    Args:
        sequences: B lists of encoder input ids with special tokens.
        tokenizer: the encoder's tokenizer (mask, pad and special ids; vocabulary size).
        ratio: fraction of each sequence's real non-special tokens to predict, in (0, 1].
        generator: the only source of randomness.

    Returns:
        An :class:`MLMBatch`; every sequence with a non-special token has at least one target.
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    if len(sequences) == 0 or any(len(s) == 0 for s in sequences):
        raise ValueError("empty batch or empty sequence: nothing to mask")
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} needs a mask and a pad token")
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
    B, T = len(sequences), int(lengths.max())
    ids = np.full((B, T), tokenizer.pad_token_id, dtype=np.int64)
    for b, seq in enumerate(sequences):
        ids[b, : len(seq)] = seq
    special = vocab_tables(tokenizer).special
    if ids.max() >= len(special) or ids.min() < 0:
        raise ValueError(f"token ids must lie in the tokenizer's vocabulary [0, {len(special)})")
    real = np.arange(T) < lengths[:, None]
    content = real & ~special[ids]  # (B, T)
    need = np.maximum(1, np.ceil(np.round(ratio * content.sum(1), 6))).astype(np.int64) * (content.sum(1) > 0)
    keys = torch.rand((B, T), generator=generator, dtype=torch.float64).numpy()
    keys[~content] = np.inf
    rank = np.argsort(
        np.argsort(keys, axis=1, kind="stable"), axis=1, kind="stable"
    )  # (B, T) rank of each key in its row
    chosen = rank < need[:, None]  # (B, T) the need[b] smallest keys of each row
    positions = np.flatnonzero(chosen)
    labels = ids.ravel()[positions]
    action = torch.rand(len(positions), generator=generator, dtype=torch.float64).numpy()
    ordinary = np.flatnonzero(~special)
    random_ids = ordinary[torch.randint(len(ordinary), (len(positions),), generator=generator).numpy()]
    masked = ids.ravel().copy()
    masked[positions] = np.where(action < 0.8, tokenizer.mask_token_id, np.where(action < 0.9, random_ids, labels))
    return MLMBatch(
        input_ids=torch.from_numpy(masked.reshape(B, T)),
        attention_mask=torch.from_numpy(real.astype(np.int64)),
        positions=torch.from_numpy(positions),
        labels=torch.from_numpy(labels),
    )


def mlm_loss(
    hidden: Tensor, head: torch.nn.Module, positions: Tensor, labels: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """Mean cross-entropy of the MLM head's predictions at ``positions``.

    Args:
        hidden: (B, T, d) the encoder's last hidden states of the masked batch.
        head: maps (M, d) hidden states to (M, V) vocabulary logits (e.g. BERT's ``cls``).
        positions: (M,) flat positions b * T + t of the targets.
        labels: (M,) their token ids.

    Returns:
        loss (scalar) and detached stats: ``acc`` (top-1 accuracy) and ``tokens`` (M).
    """
    if positions.shape != labels.shape or positions.dim() != 1:
        raise ValueError(f"positions {tuple(positions.shape)} and labels {tuple(labels.shape)} must both be (M,)")
    if positions.numel() == 0:
        raise ValueError("no masked position to predict")
    logits = head(hidden.reshape(-1, hidden.shape[-1])[positions])  # (M, V)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    loss = F.cross_entropy(logits, labels)
    acc = (logits.detach().argmax(-1) == labels).float().mean()
    return loss, {"acc": acc, "tokens": torch.tensor(positions.numel())}
