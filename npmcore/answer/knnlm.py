"""The kNN-LM in masked form, over an NPM index: parametric, nonparametric and interpolated
masked-token prediction (Khandelwal et al. 2020; Xu, Alon, Neubig 2023, "Why do kNN-LMs work?").

A query holds one ``[MASK]``; one encoder pass gives the mask's hidden state h, and
q = h / sqrt(d) is NPM single's query vector.

* ``mlm``: p_LM = softmax(head(h)), the encoder's masked-LM head (parametric).
* ``knn``: the top-k datastore tokens c_i of q (the index's search, approximate or exact),
  p_kNN(w) ∝ Σ_{c_i = w} exp(sim(q, E(c_i)) / τ), backed off to a uniform distribution with
  weight :data:`KNN_BACKOFF` so that a token never retrieved keeps a finite log probability.
* ``knn-lm``: p = λ p_kNN + (1 - λ) p_LM, mixed in log space; p_LM > 0 everywhere, so every
  λ < 1 gives finite perplexity without a floor.

Everything here works on arrays: (n, V) log probabilities, (n, k) retrieved tokens and
similarities. :class:`Searcher` searches the whole datastore or a seeded fraction of its
blocks, with the index's own (approximate) codes or exactly.
"""

from dataclasses import dataclass
from typing import Literal

import faiss
import numpy as np
import torch

from npmcore.encoder import EncoderError, encoder_fingerprint, load_masked_lm, mlm_head
from npmcore.index.faiss_index import search
from npmcore.snapshots import iter_shards

KNN_BACKOFF = 0.01  # weight of the uniform distribution under the kNN system's p_kNN
MaskedSystem = Literal["mlm", "knn", "knn-lm"]
MASKED_SYSTEMS: tuple[MaskedSystem, ...] = ("mlm", "knn", "knn-lm")


def knn_probs(tokens: np.ndarray, sims: np.ndarray, tau: float, vocab_size: int) -> np.ndarray:
    """(n, V) p_kNN: per query, the softmax of its retrieved similarities / τ summed per token.

    Args:
        tokens: (n, k) token id of each retrieved datastore entry; -1 where none was found.
        sims: (n, k) their similarities to the query.
        tau: the temperature, > 0.
        vocab_size: V.

    Returns:
        Rows that sum to 1, or to 0 where nothing was retrieved.
    """
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if tokens.shape != sims.shape or tokens.ndim != 2:
        raise ValueError(f"tokens {tokens.shape} and sims {sims.shape} must both be (n, k)")
    n = len(tokens)
    found = tokens >= 0
    logits = np.where(found, sims.astype(np.float64) / tau, -np.inf)
    top = logits.max(axis=1, keepdims=True) if tokens.shape[1] else np.zeros((n, 1))
    weights = np.where(found, np.exp(logits - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    flat = (np.arange(n)[:, None] * vocab_size + np.where(found, tokens, 0)).ravel()
    return np.bincount(flat, weights=weights.ravel(), minlength=n * vocab_size).reshape(n, vocab_size)


def log_mix(lm_log_probs: np.ndarray, knn: np.ndarray, lam: float) -> np.ndarray:
    """(n, V) log(λ p_kNN + (1 - λ) p_LM) for 0 <= λ <= 1 (λ = 1: log p_kNN, -inf where it is 0)."""
    if not 0 <= lam <= 1:
        raise ValueError(f"lambda must be in [0, 1], got {lam}")
    if lam == 0:
        return lm_log_probs.astype(np.float64)
    with np.errstate(divide="ignore"):
        log_knn = np.log(knn)
    if lam == 1:
        return log_knn
    return np.logaddexp(np.log(lam) + log_knn, np.log1p(-lam) + lm_log_probs)


def knn_log_probs(knn: np.ndarray) -> np.ndarray:
    """(n, V) log probabilities of the ``knn`` system: p_kNN backed off to uniform (:data:`KNN_BACKOFF`)."""
    return np.log((1 - KNN_BACKOFF) * knn + KNN_BACKOFF / knn.shape[1])


def gold_nll(log_probs: np.ndarray, gold: list[np.ndarray]) -> np.ndarray:
    """(n,) -log Σ_{g in gold[i]} p_i(g): the negative log-likelihood of each query's gold token(s)."""
    return np.array([-np.logaddexp.reduce(row[ids]) for row, ids in zip(log_probs, gold, strict=True)])


def perplexity(nll: np.ndarray) -> float:
    """exp of the mean negative log-likelihood."""
    return float(np.exp(np.mean(nll)))


def label_log_scores(log_probs: np.ndarray, labels: list[np.ndarray]) -> np.ndarray:
    """(n, labels) log Σ_{w in label} p(w): closed-set label scores from a token distribution."""
    return np.stack([np.logaddexp.reduce(log_probs[:, ids], axis=1) for ids in labels], axis=1)


class MaskedLMHead:
    """The masked-LM head of an encoder, refusing a head that was never trained.

    Args:
        source: the encoder (a folder or cached name), the one the index's queries use.
        fingerprint: that encoder's :func:`~npmcore.encoder.encoder_fingerprint`; the
            checkpoint's encoder must have the same weights.
    """

    def __init__(self, source: str, fingerprint: str):
        _, model = load_masked_lm(source, require_head=True)
        if encoder_fingerprint(model.base_model) != fingerprint:
            raise EncoderError(f"the masked LM of {source!r} is not the encoder of the index's queries")
        self.head = mlm_head(model).eval()

    @torch.inference_mode()
    def log_probs(self, hidden: np.ndarray) -> np.ndarray:
        """(n, V) log p_LM of the mask's hidden states (n, d)."""
        logits = self.head(torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32)))
        return torch.log_softmax(logits.double(), dim=-1).numpy()


@dataclass
class Searcher:
    """Top-k search over a datastore's vectors, or a seeded fraction of its blocks."""

    index: faiss.Index
    ids: np.ndarray | None  # global token id of each row of ``index``; None: row = global id
    name: str  # "approximate" or "exact"
    fraction: float

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(sims, global ids), each (n, k); ids -1 where fewer than k were found."""
        sims, rows = search(self.index, queries, k)
        if self.ids is None:
            return sims, rows
        return sims, np.where(rows >= 0, self.ids[np.maximum(rows, 0)], -1)


def block_sample(offsets: np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """Sorted global token ids of a seeded sample of ``fraction`` of the blocks (at least one)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"a datastore fraction must be in (0, 1], got {fraction}")
    blocks = len(offsets) - 1
    chosen = np.sort(np.random.default_rng(seed).permutation(blocks)[: max(1, round(fraction * blocks))])
    return np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in chosen])


def searchers(
    index: faiss.Index, datastore: str, offsets: np.ndarray, fractions: list[float], exact: bool
) -> list[Searcher]:
    """Per fraction of the datastore's blocks: the index's approximate search (its trained codes,
    refilled with the sample's vectors below 1) and, with ``exact``, a Flat index of the same rows."""
    out = [Searcher(index, None, "approximate", 1.0)] if 1.0 in fractions else []
    partial = [f for f in fractions if f < 1]
    if not (partial or exact):
        return out
    vectors = np.concatenate([arrays["vectors"] for _, arrays in iter_shards(datastore)])
    for fraction in sorted(set(fractions), reverse=True):
        ids = None if fraction == 1 else block_sample(offsets, fraction)
        rows = vectors if ids is None else vectors[ids]
        if fraction < 1:
            approximate = faiss.clone_index(index)
            approximate.reset()
            approximate.add(np.ascontiguousarray(rows, dtype=np.float32))
            out.append(Searcher(approximate, ids, "approximate", fraction))
        if exact:
            flat = faiss.IndexFlatIP(index.d)
            flat.add(np.ascontiguousarray(rows, dtype=np.float32))
            out.append(Searcher(flat, ids, "exact", fraction))
    return out
