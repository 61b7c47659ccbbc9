"""What a training step reports: its statistics (:class:`StepStats`: loss, accuracies, throughput, masking), the
model FLOPs of a step (:func:`step_flops`, MFU's numerator, from the model's :class:`ModelSize`), the real tokens it
encoded (:func:`encoded_tokens`) and the masking statistics of its batch (:func:`batch_stats`), read from the batch's
host copy (no device sync).

Imports the shared modules, the config's objectives (:mod:`npmcore.model.train_config`) and the step's batch
(:mod:`npmcore.model.step_batches`).
"""

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from npmcore.encoder import mlm_head
from npmcore.model.step_batches import StepBatch
from npmcore.model.train_config import Objective
from npmcore.rarity import OTHER


@dataclass(frozen=True)
class StepStats:
    step: int
    loss: float
    lr: float
    tokens_per_s: float  # encoded tokens (keys, queries and MLM copies) per second
    flops_per_s: float  # model FLOPs per second (step_flops): MFU's numerator
    start_acc: float | None = None  # NPM: in-batch retrieval top-1 of start (or single-token) queries
    end_acc: float | None = None
    spans_per_seq: float | None = None
    masked_fraction: float | None = None
    title_spans: float | None = None  # NPM: share of masked spans that are n-grams of their block's own title
    title_positives: float | None = None  # and share of the positives that belong to such spans
    rare_spans: float | None = None  # NPM: share of masked spans holding a date, a number or a rare token
    rare_positives: float | None = None  # and share of the positives that belong to such spans
    other_document_positives: float | None = None  # NPM: share of the positives in another document than their span's
    mlm_acc: float | None = None  # MLM: top-1 accuracy of the masked-token predictions


@dataclass(frozen=True)
class ModelSize:
    """What a step's model FLOPs depend on, besides the batch (:func:`step_flops`)."""

    encoder: int  # weights of the encoder's linear layers (embeddings are lookups: no FLOPs)
    head: int  # weights of the MLM head's linear layers (its decoder is the tied embedding matrix)
    layers: int
    width: int  # hidden size d


def model_size(model: PreTrainedModel) -> ModelSize:
    """The encoder with its MLM head's sizes, from its linear layers and its config."""

    def linear(module: torch.nn.Module) -> int:
        return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))

    return ModelSize(
        linear(model.base_model), linear(mlm_head(model)), model.config.num_hidden_layers, model.config.hidden_size
    )


def step_flops(batch: StepBatch, size: ModelSize, objective: Objective) -> float:
    """Model FLOPs of one training step on ``batch``: MFU's numerator.

    The matrix multiplications the step needs on real (non-padding) tokens, at 2 FLOPs a
    multiply-add, forward and backward (3x the forward): per encoded sequence of n real tokens
    (keys, NPM queries, MLM copy) 6 P n for the encoder's P linear weights and 12 L d n^2 for
    attention (scores and weighted values, L layers of width d); per NPM query (two a span,
    one for npm-single) 6 d K against the batch's K real key tokens; per MLM target 6 H for the
    head's H linear weights. Padding, recomputation in the backward pass (the loss's chunks),
    embeddings, norms and softmax are not counted.
    """
    masks = [batch.npm.attention_mask, batch.npm.masked_attention_mask] if batch.npm is not None else []
    masks += [batch.mlm.attention_mask] if batch.mlm is not None else []
    n = torch.cat([m.sum(1) for m in masks]).double()  # real tokens of each encoded sequence
    flops = 6 * size.encoder * float(n.sum()) + 12 * size.layers * size.width * float((n**2).sum())
    if batch.npm is not None:
        queries = batch.npm.span_seq.numel() * (2 if objective == "npm" else 1)
        flops += 6 * size.width * queries * float(batch.npm.attention_mask.sum())
    if batch.mlm is not None:
        flops += 6 * size.head * batch.mlm.positions.numel()
    return flops


def encoded_tokens(batch: StepBatch) -> int:
    """Real tokens that went through the encoder: keys, NPM queries and MLM copies."""
    parts = [batch.npm.attention_mask, batch.npm.masked_attention_mask] if batch.npm is not None else []
    parts += [batch.mlm.attention_mask] if batch.mlm is not None else []
    return int(sum(int(p.sum()) for p in parts))


def batch_stats(batch: StepBatch) -> dict[str, float]:
    """NPM masking statistics of a batch: spans per sequence, the fraction of real tokens masked,
    the shares of spans and of positives that are title n-grams found in a block's body
    (the subject-copy shortcut; 0 when the masking leaves them out), and those that hold a
    date, a number or a rare token (what answers are made of; :mod:`npmcore.rarity`), and the share of
    positives in another document than their span's (cross-document batches raise it)."""
    if batch.npm is None:
        return {}
    npm = batch.npm
    B, S = npm.input_ids.shape[0], npm.span_seq.numel()
    real = int(npm.attention_mask.sum())
    return {
        "spans_per_seq": S / B,
        "masked_fraction": float(npm.span_len.sum()) / max(1, real),
        "title_spans": float(npm.span_title.sum()) / max(1, S),
        "title_positives": float(npm.span_title[npm.pos_span].sum()) / max(1, npm.pos_span.numel()),
        "rare_spans": float((npm.span_kind != OTHER).sum()) / max(1, S),
        "rare_positives": float((npm.span_kind[npm.pos_span] != OTHER).sum()) / max(1, npm.pos_span.numel()),
        "other_document_positives": float((batch.docs[npm.pos_seq] != batch.docs[npm.span_seq[npm.pos_span]]).sum())
        / max(1, npm.pos_span.numel()),
    }
