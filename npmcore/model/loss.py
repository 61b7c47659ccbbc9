"""The NPM training objective: multi-positive in-batch contrastive losses.

Every masked span g of sequence i has two query vectors (its ``[MASKs]`` and
``[MASKe]`` outputs in the masked batch). Keys are the token vectors of the unmasked
batch. The candidates of a query are all real (non-padding) key tokens of the other
sequences j != i; its positives are the candidates where an occurrence of g starts
(for the start query) or ends (for the end query). With sim(a, b) = a·b / sqrt(d):

    L_start(g) = -log( Σ_{y ∈ positives} exp(sim(q_start, y)) / Σ_{y ∈ candidates} exp(sim(q_start, y)) )

and likewise L_end(g). The paper sums over spans; here the loss is the *mean* over
spans (or over queries for NPM single), so its scale does not depend on how many spans
a batch happens to have and the learning rate transfers between batch sizes.

Positives are given as flat index arrays (one entry per positive token, P in all), as
the span masker produces them. A positive listed twice counts once (positives are a
set). Queries are scored in chunks of ``chunk`` against all B*T keys: dense (chunk, B*T)
similarities with ``-inf`` masking and ``logsumexp``, no Python loops over spans. With
more than one chunk, each chunk's similarities are recomputed in the backward pass
instead of kept (activation checkpointing): at the paper's 512 x 256-token batches, ~10k
spans against 131k keys would otherwise hold tens of GB of logits. Logits are computed
in at least float32, so bf16/fp16 encoder outputs do not lose precision in the softmax.

Pre-batch negatives (Lee et al. 2021, DensePhrases): the keys of a few earlier batches,
detached, join every span query's candidates, never as positives. A key of the token that
starts (for the start query) or ends (for the end query) the span is left out, since it may
be another occurrence of the span. They multiply a small batch's negatives at the cost of a
similarity matrix, not of encoding.
"""

import math
from collections import deque
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

QUERY_CHUNK = 2048  # queries scored at once: a (2048, B*T) float32 block is 1 GB at B*T = 131k


@dataclass(frozen=True)
class Negatives:
    """Extra candidates of every query (pre-batch negatives): never positives."""

    keys: Tensor  # (M, d), detached
    tokens: Tensor  # (M,) token id of each key


class PreBatch:
    """The keys of the last ``batches`` batches (detached): the next batches' :class:`Negatives`."""

    def __init__(self, batches: int):
        self.queue: deque[tuple[Tensor, Tensor]] = deque(maxlen=batches)

    def negatives(self) -> Negatives | None:
        if not self.queue:
            return None
        keys, tokens = zip(*self.queue, strict=True)
        return Negatives(torch.cat(keys), torch.cat(tokens))

    def push(self, keys: Tensor, tokens: Tensor) -> None:
        """Keep a batch's real keys (M, d) and their token ids (M,)."""
        if self.queue.maxlen:
            self.queue.append((keys.detach(), tokens))


def span_loss(
    q_start: Tensor,
    q_end: Tensor,
    keys: Tensor,
    key_mask: Tensor,
    span_seq: Tensor,
    pos_span: Tensor,
    pos_seq: Tensor,
    pos_start: Tensor,
    pos_end: Tensor,
    chunk: int = QUERY_CHUNK,
    negatives: Negatives | None = None,
    span_tokens: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """NPM span loss: mean over spans of L_start + L_end.

    Args:
        q_start: (S, d) float, query vectors of the spans' ``[MASKs]`` tokens.
        q_end: (S, d) float, query vectors of the spans' ``[MASKe]`` tokens.
        keys: (B, T, d) float, token vectors of the unmasked batch.
        key_mask: (B, T) bool or integer, nonzero for real tokens, 0 for padding.
        span_seq: (S,) integer, the sequence (batch row) of each span.
        pos_span: (P,) integer, the span each positive belongs to.
        pos_seq: (P,) integer, the sequence of each positive occurrence (!= its span's).
        pos_start: (P,) integer, position of the occurrence's first token in ``pos_seq``.
        pos_end: (P,) integer, position of the occurrence's last token in ``pos_seq``.
        chunk: queries scored at once (memory, not results, depends on it).
        negatives: keys of earlier batches, extra candidates of every query (pre-batch negatives).
        span_tokens: with ``negatives``, the (S,) first and (S,) last token id of each span:
            negatives of the span's first (last) token are left out of its start (end) query's.

    Returns:
        loss: scalar tensor (differentiable w.r.t. queries and keys).
        stats: detached scalars: ``start_acc`` and ``end_acc`` (fraction of spans whose
            top-1 candidate is a positive) and ``spans`` (S).

    Raises:
        ValueError: inconsistent shapes or indices, a positive in the span's own
            sequence or in padding, or a span without a positive.
        TypeError: queries and keys of different dtypes.
    """
    if q_end.shape != q_start.shape:
        raise ValueError(f"q_start {tuple(q_start.shape)} and q_end {tuple(q_end.shape)} must have the same shape")
    _check_queries(q_start, keys, span_seq, "q_start")
    _check_queries(q_end, keys, span_seq, "q_end")
    key_valid, key_seq = _keys(keys, key_mask)
    flat_s = _positives(key_valid, key_seq, keys.shape[1], span_seq, pos_span, pos_seq, pos_start, "pos_start")
    flat_e = _positives(key_valid, key_seq, keys.shape[1], span_seq, pos_span, pos_seq, pos_end, "pos_end")
    flat_keys = keys.reshape(-1, keys.shape[-1])  # (B*T, d)
    extra_s = extra_e = None
    if negatives is not None:
        if span_tokens is None or any(t.shape != span_seq.shape for t in span_tokens):
            raise ValueError("negatives need span_tokens: the (S,) first and last token id of each span")
        if negatives.keys.dtype != keys.dtype or negatives.keys.shape[1:] != keys.shape[2:]:
            raise ValueError(f"negatives {tuple(negatives.keys.shape)} {negatives.keys.dtype} do not match the keys")
        extra_s = (negatives.keys, negatives.tokens, span_tokens[0])
        extra_e = (negatives.keys, negatives.tokens, span_tokens[1])
    loss_s, hit_s = _multi_positive(q_start, flat_keys, key_valid, key_seq, span_seq, pos_span, flat_s, chunk, extra_s)
    loss_e, hit_e = _multi_positive(q_end, flat_keys, key_valid, key_seq, span_seq, pos_span, flat_e, chunk, extra_e)
    stats = {
        "start_acc": hit_s.float().mean(),
        "end_acc": hit_e.float().mean(),
        "spans": torch.tensor(q_start.shape[0], device=q_start.device),
    }
    return (loss_s + loss_e).mean(), stats


def token_loss(
    q: Tensor,
    keys: Tensor,
    key_mask: Tensor,
    span_seq: Tensor,
    pos_span: Tensor,
    pos_seq: Tensor,
    pos_start: Tensor,
    chunk: int = QUERY_CHUNK,
) -> tuple[Tensor, dict[str, Tensor]]:
    """NPM single loss: one query per masked token, mean over queries.

    Args:
        q: (S, d) float, query vectors of the masked tokens.
        keys, key_mask: as in :func:`span_loss`.
        span_seq: (S,) integer, the sequence of each masked token.
        pos_span: (P,) integer, the query each positive belongs to.
        pos_seq: (P,) integer, the sequence of each positive (same token id, != its query's).
        pos_start: (P,) integer, the position of each positive in ``pos_seq``.
        chunk: queries scored at once.

    Returns:
        loss: scalar tensor.
        stats: detached scalars ``acc`` (top-1 in-batch retrieval accuracy) and ``tokens`` (S).

    Raises:
        ValueError, TypeError: as :func:`span_loss`.
    """
    _check_queries(q, keys, span_seq, "q")
    key_valid, key_seq = _keys(keys, key_mask)
    flat = _positives(key_valid, key_seq, keys.shape[1], span_seq, pos_span, pos_seq, pos_start, "pos_start")
    loss, hit = _multi_positive(
        q, keys.reshape(-1, keys.shape[-1]), key_valid, key_seq, span_seq, pos_span, flat, chunk
    )
    return loss.mean(), {"acc": hit.float().mean(), "tokens": torch.tensor(q.shape[0], device=q.device)}


def _multi_positive(
    q: Tensor,
    flat_keys: Tensor,
    key_valid: Tensor,
    key_seq: Tensor,
    span_seq: Tensor,
    pos_span: Tensor,
    pos_flat: Tensor,
    chunk: int,
    extra: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-query loss -log(Σ_pos exp(sim) / Σ_cand exp(sim)) (S,) and top-1 hit (S,) bool, chunk by chunk.
    ``extra``: negative keys (M, d), their token ids (M,) and each query's excluded token id (S,)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    S = q.shape[0]
    recompute = S > chunk and torch.is_grad_enabled()
    losses, hits = [], []
    for lo in range(0, S, chunk):
        hi = min(S, lo + chunk)
        mine = (pos_span >= lo) & (pos_span < hi)
        more = (extra[0], extra[1], extra[2][lo:hi]) if extra is not None else (None, None, None)
        args = (q[lo:hi], flat_keys, key_valid, key_seq, span_seq[lo:hi], pos_span[mine] - lo, pos_flat[mine], *more)
        loss, hit = checkpoint(_chunk_loss, *args, use_reentrant=False) if recompute else _chunk_loss(*args)
        losses.append(loss)
        hits.append(hit)
    return torch.cat(losses), torch.cat(hits)


def _chunk_loss(
    q: Tensor,
    flat_keys: Tensor,
    key_valid: Tensor,
    key_seq: Tensor,
    span_seq: Tensor,
    pos_span: Tensor,
    pos_flat: Tensor,
    extra_keys: Tensor | None = None,
    extra_tokens: Tensor | None = None,
    excluded: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The loss and top-1 hit (in the batch) of a chunk of s queries against every key and the extra ones."""
    logits = q @ flat_keys.T  # (s, B*T)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / math.sqrt(q.shape[-1])
    cand = key_valid[None, :] & (key_seq[None, :] != span_seq[:, None])  # (s, B*T): own sequence and padding out
    masked = logits.masked_fill(~cand, -math.inf)
    pos = torch.zeros_like(cand)
    pos[pos_span, pos_flat] = True  # a positive listed twice counts once
    every = masked
    if extra_keys is not None:
        extra = (q @ extra_keys.T).to(logits.dtype) / math.sqrt(q.shape[-1])  # (s, M)
        every = torch.cat([masked, extra.masked_fill(extra_tokens[None, :] == excluded[:, None], -math.inf)], dim=1)
    loss = torch.logsumexp(every, dim=1) - torch.logsumexp(masked.masked_fill(~pos, -math.inf), dim=1)  # (s,)
    hit = pos.gather(1, masked.detach().argmax(dim=1, keepdim=True)).squeeze(1)  # (s,)
    return loss, hit


def _keys(keys: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(B*T,) bool: real key tokens, and (B*T,) long: the sequence of each key."""
    B, T, _ = keys.shape
    if key_mask.shape != (B, T):
        raise ValueError(f"key_mask has shape {tuple(key_mask.shape)}, expected (B, T) = {(B, T)} from keys")
    return key_mask.reshape(B * T).bool(), torch.arange(B, device=keys.device).repeat_interleave(T)


def _positives(
    key_valid: Tensor,
    key_seq: Tensor,
    T: int,
    span_seq: Tensor,
    pos_span: Tensor,
    pos_seq: Tensor,
    pos_tok: Tensor,
    name: str,
) -> Tensor:
    """(P,) flat key index of each positive; checks they are candidates and that no span lacks one."""
    S, N = span_seq.shape[0], key_valid.shape[0]
    P = pos_span.shape[0]
    _check_index(pos_span, "pos_span", S)
    _check_index(pos_seq, "pos_seq", N // T)
    _check_index(pos_tok, name, T)
    if not (pos_seq.shape == pos_tok.shape == (P,)):
        raise ValueError(
            f"positive index arrays must all have shape (P,) = ({P},) like pos_span; "
            f"got pos_seq {tuple(pos_seq.shape)}, {name} {tuple(pos_tok.shape)}"
        )
    flat = pos_seq * T + pos_tok  # (P,)
    bad = ~(key_valid[flat] & (key_seq[flat] != span_seq[pos_span]))  # (P,) not a candidate of its query
    if bad.any():
        p = int(bad.nonzero()[0, 0])
        g = int(pos_span[p])
        raise ValueError(
            f"positive {p} of span {g} (sequence {int(span_seq[g])}) is at sequence {int(pos_seq[p])}, "
            f"{name} {int(pos_tok[p])}: that is padding or the span's own sequence"
        )
    empty = torch.bincount(pos_span, minlength=S) == 0  # (S,)
    if empty.any():
        g = int(empty.nonzero()[0, 0])
        raise ValueError(
            f"span {g} (sequence {int(span_seq[g])}) has no positive; {int(empty.sum())} of {S} spans have none"
        )
    return flat


def _check_queries(q: Tensor, keys: Tensor, span_seq: Tensor, name: str) -> None:
    if keys.dim() != 3:
        raise ValueError(f"keys must be (B, T, d), got shape {tuple(keys.shape)}")
    if q.dim() != 2 or q.shape[1] != keys.shape[2]:
        raise ValueError(f"{name} must be (S, d) with d = {keys.shape[2]} from keys, got shape {tuple(q.shape)}")
    if q.dtype != keys.dtype:
        raise TypeError(f"{name} is {q.dtype} but keys are {keys.dtype}: encode queries and keys alike")
    if q.shape[0] == 0:
        raise ValueError(f"{name} has no queries (S = 0): skip batches without masked spans")
    if span_seq.shape != (q.shape[0],):
        raise ValueError(f"span_seq has shape {tuple(span_seq.shape)}, expected (S,) = ({q.shape[0]},) from {name}")
    _check_index(span_seq, "span_seq", keys.shape[0])


def _check_index(arr: Tensor, name: str, high: int) -> None:
    """Integer 1-D index tensor with values in [0, high)."""
    if arr.dim() != 1 or arr.dtype.is_floating_point or arr.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D integer tensor, got shape {tuple(arr.shape)} dtype {arr.dtype}")
    if arr.numel() and (int(arr.min()) < 0 or int(arr.max()) >= high):
        raise ValueError(f"{name} values must lie in [0, {high}), got min {int(arr.min())} max {int(arr.max())}")
