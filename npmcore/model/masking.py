"""In-batch span masking for NPM training, and token masking for NPM single.

A batch is B encoder sequences (special tokens included). A masked span must have a
positive: an occurrence of the same n-gram in *another* sequence of the batch, whose
first and last key vectors are the targets of the [MASKs] and [MASKe] queries.

1. Word boundaries come from the tokenizer's vocabulary tables (:mod:`npmcore.vocab`).
   A whole-word n-gram starts at a word start and ends right before a word start, a
   special token or padding. Only whole-word n-grams are masked; their positives are
   *every* occurrence of the same token ids in another sequence, inside a word or not,
   as the paper counts them. The "{title}. " prefix of each block (``title_tokens``) is
   never masked and never a positive: document-grouped batches repeat the title in every
   sequence, which would make title n-grams trivial positives at the start of every other
   sequence. It stays as context, and its keys stay negatives. The body of a block repeats
   its title too (an article names its subject all along): with ``title_ngrams=False`` an
   n-gram of the block's own title is never masked in its body either, so the model is not
   taught that a mask in a document about X is filled by X (which made a GPU-trained encoder
   answer "Shlomo Shriki was born in [MASK]." with "Shriki"). Each span says whether it is
   such a title n-gram (``span_title``), for the training statistics.
2. Exact n-gram ids, vectorised over the (B, T) batch: every 1-gram is its token id; the
   id of the (n+1)-gram at s is the rank of the pair (id of the n-gram at s, token at
   s+n) among all such pairs (one stable argsort per n). The ids are collision-free,
   so nothing needs re-checking. Only n-grams found in two or more sequences are
   extended, since a longer n-gram shared by two sequences has its prefix shared too.
   An n-gram found in two or more sequences with at least one whole-word occurrence is
   a candidate group; its occurrences are kept together, so its positives are a slice.
3. Sampling, per sequence, round robin over the batch (every draw from ``generator``):
   draw a length n ~ geometric(p) restricted to the lengths that still have candidates
   in the sequence, then take the next candidate of length n from a pre-shuffled queue,
   skipping (forever) those that overlap or touch an already masked span, whose n-gram
   was already masked more than ``max_ngram_masks`` times, or (``title_ngrams=False``)
   that are an n-gram of the sequence's title. Availability only shrinks, so
   the first usable candidate of a shuffled queue is a uniform draw among the usable
   ones; with ``rare_boost`` the queues are ordered by exponential clocks instead, so an
   n-gram holding a date, a number or a rare token (:mod:`npmcore.rarity`) is drawn
   ``rare_boost`` times as often as another usable one. A sequence stops when ``ratio``
   of its real tokens are masked (the last span may overshoot), after
   ``max_spans_per_seq`` spans, or when no candidate is left.
   Spans never touch: at least one unmasked token separates two spans, so two
   [MASKs][MASKe] pairs are never adjacent and each pair stands for exactly one span.
4. Each span becomes the two mask tokens [MASKs][MASKe] (one mask token for NPM single);
   keys and queries are right-padded to the same width T. A masked sequence grows by one
   token per 1-token span, so spans are chosen such that it never exceeds the tokenizer's
   ``model_max_length``.
"""

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedTokenizerFast

from npmcore.rarity import OTHER, TokenRarity, piece_kinds, span_kinds, token_kinds
from npmcore.vocab import vocab_tables


@dataclass(frozen=True)
class MaskingConfig:
    ratio: float = 0.15  # masking budget: fraction of the real (non-special, non-pad) tokens of each sequence
    p: float = 0.5  # span lengths ~ geometric(p) truncated to max_span: P(n) ∝ p (1 - p)^(n - 1)
    max_span: int = 10  # longest masked n-gram, in tokens
    max_spans_per_seq: int = 128  # paper: 128 (its reference code: 64)
    max_ngram_masks: int = 10  # an n-gram masked more than this many times in the batch is not masked again
    # mask only spans whose first and last words are content words (not one token spelling a function word
    # or punctuation)
    content_words: bool = False
    # mask n-grams of a block's own title where its body repeats them; False: never (its title prefix never is)
    title_ngrams: bool = True
    # a candidate n-gram holding a date, a number or a rare token (npmcore.rarity) is this many times as likely
    # to be drawn as another of its length; 1: all alike
    rare_boost: float = 1.0

    def __post_init__(self):
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {self.ratio}")
        if not 0 < self.p <= 1:
            raise ValueError(f"p must be in (0, 1], got {self.p}")
        for name in ("max_span", "max_spans_per_seq"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_ngram_masks < 0:
            raise ValueError(f"max_ngram_masks must be >= 0, got {self.max_ngram_masks}")
        if not self.rare_boost > 0:
            raise ValueError(f"rare_boost must be > 0, got {self.rare_boost}")


@dataclass(frozen=True)
class MaskedBatch:
    input_ids: Tensor  # (B, T) long: unmasked key sequences, right-padded with the pad id to the queries' width
    attention_mask: Tensor  # (B, T) long
    masked_input_ids: Tensor  # (B, T) long: each span replaced by [MASKs][MASKe] (NPM single: one mask)
    masked_attention_mask: Tensor  # (B, T) long
    span_seq: Tensor  # (S,) long: sequence of each span; spans are sorted by (sequence, start)
    span_start: Tensor  # (S,) long: first token of the span in input_ids
    span_len: Tensor  # (S,) long
    span_query: Tensor  # (S,) long: position of [MASKs] in masked_input_ids (the end query is span_query + 1)
    pos_span: Tensor  # (P,) long: for every positive, the span it belongs to (sorted by span, then seq, start)
    pos_seq: Tensor  # (P,) long: sequence j != span_seq of an occurrence of the same n-gram
    pos_start: Tensor  # (P,) long: where that occurrence starts in input_ids[j] (start positive)
    pos_end: Tensor  # (P,) long: where it ends, inclusive (end positive)
    span_title: Tensor  # (S,) bool: the span is an n-gram of its sequence's title (for statistics)
    span_kind: Tensor  # (S,) int8: date, number, rare or other (npmcore.rarity.KINDS; for statistics)


def mask_spans(
    sequences: list[list[int]],
    tokenizer: PreTrainedTokenizerFast,
    config: MaskingConfig,
    generator: torch.Generator,
    title_tokens: list[int] | None = None,
    rarity: TokenRarity | None = None,
) -> MaskedBatch:
    """NPM span masking of one batch: whole-word n-grams that also occur in another sequence.

    Args:
        sequences: B lists of encoder input ids with special tokens, e.g. Block.token_ids;
            sequences of one document should share the batch so that n-grams repeat.
        tokenizer: the encoder's fast tokenizer (mask, pad and special ids, word pieces).
        config: masking budget, span lengths and caps.
        generator: the only source of randomness: same seed, same batch.
        title_tokens: per sequence, how many of its first non-special tokens are the
            block's "{title}. " prefix (never masked, never positives); None: no prefix.
        rarity: the corpus's token frequencies, which tell rare tokens (needed by
            ``config.rare_boost``); None: no token counts as rare.

    Returns:
        A MaskedBatch; every span has at least one positive and its positives are all
        occurrences of the span's n-gram in the other sequences, outside their prefixes.
    """
    if config.rare_boost != 1 and rarity is None:
        raise ValueError("rare_boost needs the corpus's token rarity (npmcore.rarity.corpus_rarity)")
    ids, lengths, content, limit = _prepare(sequences, tokenizer, title_tokens)
    tables = vocab_tables(tokenizer)
    kind = _token_kind(ids, tokenizer, rarity)
    titles = _title_ngrams(ids, lengths, content, tables.special, config.max_span)
    start = tables.word_start[ids]  # (B, T)
    start[:, 0] = True
    start[:, 1:] |= tables.boundary[ids[:, :-1]]
    end = np.ones_like(start)  # (B, T) an n-gram may end at t
    end[:, :-1] = start[:, 1:] | ~content[:, 1:]
    if config.content_words:  # a one-token word that is a stopword or punctuation neither opens nor closes a span
        stop_word = tables.stop[ids] & start & end  # (B, T)
        start, end = start & ~stop_word, end & ~stop_word
    occ_at, occ_len, occ_group, occ_whole, group_lo = _shared_ngrams(ids, content, start, end, config.max_span)
    occ_seq, occ_start = np.divmod(occ_at, ids.shape[1])
    w = occ_whole
    weights = None
    if config.rare_boost != 1:
        weights = np.where(span_kinds(kind, occ_seq[w], occ_start[w], occ_len[w]) != OTHER, config.rare_boost, 1.0)
    chosen, span_title = _sample_spans(
        occ_seq[w],
        occ_start[w],
        occ_len[w],
        occ_group[w],
        _budget(config.ratio, content),
        lengths,
        limit,
        config,
        generator,
        lambda b, s, n: tuple(ids[b, s : s + n].tolist()) in titles[b],
        weights,
    )
    span_kind = span_kinds(kind, *chosen[:3])
    return _assemble(ids, lengths, chosen, span_title, span_kind, occ_seq, occ_start, group_lo, 2, tokenizer)


def mask_tokens(
    sequences: list[list[int]],
    tokenizer: PreTrainedTokenizerFast,
    ratio: float,
    generator: torch.Generator,
    title_tokens: list[int] | None = None,
) -> MaskedBatch:
    """NPM-single masking: single tokens (word pieces too) that also occur in another sequence.

    Each sequence gets ceil(ratio * its real tokens) masked tokens, chosen uniformly among
    its candidates (fewer if it has fewer candidates); adjacent masks are allowed, as each
    mask token is its own query. Each masked token is replaced by ONE mask token, so
    span_len is 1, span_query is the token's own position, and pos_start == pos_end are
    all positions of the same token id in the other sequences. Args as in mask_spans.
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    ids, lengths, content, _ = _prepare(sequences, tokenizer, title_tokens)
    titles = _title_ngrams(ids, lengths, content, vocab_tables(tokenizer).special, 1)
    occ_at, _, occ_group, _, group_lo = _shared_ngrams(ids, content, content, content, 1)
    occ_seq, occ_start = np.divmod(occ_at, ids.shape[1])
    # a uniform draw of need[b] candidates per sequence: the smallest random keys
    keys = torch.rand(len(occ_at), generator=generator, dtype=torch.float64).numpy()
    order = np.lexsort((keys, occ_seq))  # (C,) by sequence, then key
    seq = occ_seq[order]
    rank = np.arange(len(order)) - np.searchsorted(seq, seq)  # rank of the key within its sequence
    take = order[rank < _budget(ratio, content)[seq]]
    take = take[np.argsort(occ_at[take])]  # by (seq, start)
    chosen = (occ_seq[take], occ_start[take], np.ones(len(take), dtype=np.int64), occ_group[take])
    span_title = np.array([(int(ids[b, s]),) in titles[b] for b, s in zip(*chosen[:2])], dtype=bool)
    span_kind = _token_kind(ids, tokenizer, None)[chosen[0], chosen[1]]
    return _assemble(ids, lengths, chosen, span_title, span_kind, occ_seq, occ_start, group_lo, 1, tokenizer)


def _prepare(
    sequences: list[list[int]], tokenizer: PreTrainedTokenizerFast, title_tokens: list[int] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Checked, right-padded ids (B, T), lengths (B,), content mask (B, T) and the length limit.
    Content tokens are the real non-special tokens after each sequence's title prefix."""
    if tokenizer.mask_token_id is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no mask token; NPM queries need one")
    if tokenizer.pad_token_id is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no pad token; batches are padded with it")
    if len(sequences) == 0:
        raise ValueError("empty batch: need at least one sequence (two for any span to have a positive)")
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))  # (B,)
    if (lengths == 0).any():
        raise ValueError(f"sequence {int(np.argmin(lengths))} of the batch is empty")
    limit = tokenizer.model_max_length
    if int(lengths.max()) > limit:
        b = int(np.argmax(lengths))
        raise ValueError(f"sequence {b} has {lengths[b]} tokens, more than the tokenizer's model_max_length={limit}")
    flat = np.array(list(itertools.chain.from_iterable(sequences)))
    if flat.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got values of dtype {flat.dtype}")
    vocab = len(tokenizer)
    if flat.min() < 0 or flat.max() >= vocab:
        bad = int(np.flatnonzero((flat < 0) | (flat >= vocab))[0])
        b = int(np.searchsorted(np.cumsum(lengths), bad, side="right"))
        raise ValueError(f"sequence {b} has token id {flat[bad]}, outside the tokenizer's vocabulary [0, {vocab})")
    B, T = len(lengths), int(lengths.max())
    real = np.arange(T) < lengths[:, None]  # (B, T)
    ids = np.full((B, T), tokenizer.pad_token_id, dtype=np.int64)
    ids[real] = flat
    content = real & ~vocab_tables(tokenizer).special[ids]  # (B, T) maskable, counted in the budget
    if title_tokens is not None:
        prefix = np.asarray(title_tokens, dtype=np.int64)
        if prefix.shape != (B,) or (prefix < 0).any():
            raise ValueError(f"title_tokens must hold one count >= 0 per sequence ({B}), got {list(title_tokens)[:8]}")
        content &= np.cumsum(content, axis=1) > prefix[:, None]  # the first prefix[b] content tokens are the title
    return ids, lengths, content, limit


def _token_kind(ids: np.ndarray, tokenizer: PreTrainedTokenizerFast, rarity: TokenRarity | None) -> np.ndarray:
    """(B, T) kind of every token (npmcore.rarity): date, number, rare (with ``rarity``) or other."""
    kinds = token_kinds(tokenizer)
    rare = rarity.rare if rarity is not None else np.zeros(len(kinds), dtype=bool)
    if len(rare) != len(kinds):
        raise ValueError(f"token rarity covers {len(rare)} token ids, the tokenizer has {len(kinds)}")
    return piece_kinds(ids, kinds, rare)


def _budget(ratio: float, content: np.ndarray) -> np.ndarray:
    """(B,) tokens to mask per sequence: the least count >= ratio * real tokens."""
    # round first: 0.15 * 200 is 30.000000000000004, which must give 30, not 31
    return np.ceil(np.round(ratio * content.sum(1), 6)).astype(np.int64)


def _title_ngrams(
    ids: np.ndarray, lengths: np.ndarray, content: np.ndarray, special: np.ndarray, max_span: int
) -> list[frozenset[tuple[int, ...]]]:
    """Per sequence, the n-grams (n <= max_span) of its title prefix: the real, non-special tokens
    before its content (:func:`_prepare`)."""
    real = np.arange(ids.shape[1]) < lengths[:, None]
    prefix = real & ~special[ids] & ~content  # (B, T)
    out = []
    for row, keep in zip(ids.tolist(), prefix):
        title = [t for t, k in zip(row, keep.tolist()) if k]
        out.append(
            frozenset(tuple(title[i : i + n]) for n in range(1, max_span + 1) for i in range(len(title) - n + 1))
        )
    return out


def _shared_ngrams(
    ids: np.ndarray, content: np.ndarray, start: np.ndarray, end: np.ndarray, max_span: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Occurrences of the n-grams (n <= max_span) of content tokens found in two or more
    sequences that have at least one whole-word occurrence.

    An occurrence at flat position b * T + s of length n lies in content tokens; it is
    whole (maskable) when start[b, s] and end[b, s + n - 1]. Returns (occ_at, occ_len,
    occ_group, occ_whole, group_lo): occ_* (C,) sorted by n-gram group, then position;
    group g is occ_*[group_lo[g]:group_lo[g + 1]].
    """
    B, T = ids.shape
    tok, content, start, end = ids.ravel(), content.ravel(), start.ravel(), end.ravel()
    col = np.tile(np.arange(T), B)  # (B * T,)
    at = np.flatnonzero(content)  # starts of the n-grams still extended, in (b, s) order
    key = tok[at]  # exact id of the n-gram at each start (1-grams: the token id)
    radix = int(tok.max()) + 1
    found, n_groups = [], 0
    for n in range(1, max_span + 1):
        order = np.argsort(key, kind="stable")  # stable: within an n-gram, positions stay in (b, s) order
        s_at = at[order]
        s_group = _dense(key[order])  # (A,) n-gram id, sorted
        shared = _two_sequences(s_group, s_at // T)  # (n-grams,) occurs in two or more sequences
        whole = start[s_at] & end[s_at + n - 1]  # (A,)
        useful = shared & (np.bincount(s_group[whole], minlength=len(shared)) > 0)  # and can be masked somewhere
        keep = useful[s_group]
        new_id = np.cumsum(useful) - 1 + n_groups
        found.append((s_at[keep], np.full(int(keep.sum()), n), new_id[s_group[keep]], whole[keep]))
        n_groups += int(useful.sum())
        # extend only n-grams in two sequences: a longer n-gram shared by two has its prefix shared too
        prev = np.empty_like(s_group)
        prev[order] = s_group
        extend = shared[prev]
        at, prev = at[extend], prev[extend]
        ok = col[at] + n < T
        ok[ok] = content[at[ok] + n]
        at, key = at[ok], prev[ok] * radix + tok[at[ok] + n]  # the (n+1)-grams; < B * T * radix: no overflow
        if len(at) == 0:
            break
    occ_at, occ_len, occ_group, occ_whole = (np.concatenate(x) for x in zip(*found, strict=True))
    group_lo = np.r_[0, np.cumsum(np.bincount(occ_group, minlength=n_groups))]
    return occ_at, occ_len, occ_group, occ_whole, group_lo


def _dense(sorted_keys: np.ndarray) -> np.ndarray:
    """Ids 0, 1, ... of the distinct values of a sorted array, per element."""
    return np.cumsum(np.diff(sorted_keys, prepend=sorted_keys[:1]) != 0)


def _two_sequences(group: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """(groups,) bool: the group's elements lie in two or more sequences.

    ``group`` is sorted and ``seq`` is sorted within each group, so comparing the first
    and the last element of a group is enough.
    """
    first = np.flatnonzero(np.diff(group, prepend=-1))
    last = np.flatnonzero(np.diff(group, append=group[-1:] + 1))
    return seq[first] != seq[last]


def _sample_spans(
    occ_seq: np.ndarray,
    occ_start: np.ndarray,
    occ_len: np.ndarray,
    occ_group: np.ndarray,
    need: np.ndarray,
    lengths: np.ndarray,
    limit: int,
    config: MaskingConfig,
    generator: torch.Generator,
    is_title: Callable[[int, int, int], bool],
    weights: np.ndarray | None = None,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """Spans (seq, start, len, group) sorted by (seq, start), drawn as in step 3 of the module
    docstring, and whether each is a title n-gram (``is_title(seq, start, len)``). ``weights``
    (one per occurrence): a queue is ordered by exponential clocks of these rates instead of
    uniform keys, so its first usable candidate is drawn with probability proportional to its weight."""
    B, M = len(need), config.max_span
    keys = torch.rand(len(occ_seq), generator=generator, dtype=torch.float64).numpy()
    if weights is not None:
        keys = -np.log1p(-keys) / weights  # Exp(weight): the smallest comes first with P ∝ weight
    order = np.lexsort((keys, occ_len, occ_seq))  # one shuffled queue per (sequence, length)
    queue_lo = np.r_[0, np.cumsum(np.bincount(occ_seq[order] * M + occ_len[order] - 1, minlength=B * M))]
    head, tail = queue_lo[:-1].tolist(), queue_lo[1:].tolist()  # queue q = b * M + n - 1 is [head[q], tail[q])
    starts, groups = occ_start[order].tolist(), occ_group[order].tolist()
    weight = [(1 - config.p) ** k for k in range(M)]  # P(n = k + 1), unnormalised
    open_lengths = [[k for k in range(M) if tail[b * M + k] > head[b * M + k] and weight[k] > 0] for b in range(B)]
    # each draw either masks a span or closes a (sequence, length) queue
    draws = iter(torch.rand(B * (config.max_spans_per_seq + M), generator=generator, dtype=torch.float64).tolist())
    need, width = need.tolist(), lengths.tolist()  # width: length of the masked sequence so far
    masked, n_spans, occupied = [0] * B, [0] * B, [0] * B  # occupied: bit t + 1 set <=> token t masked
    times_masked = [0] * (max(groups, default=-1) + 1)
    chosen = []

    def mask_one(b: int) -> None:
        while open_lengths[b]:
            x = next(draws) * sum(weight[k] for k in open_lengths[b])
            for k in open_lengths[b]:
                x -= weight[k]
                if x < 0:
                    break
            n, q = k + 1, b * M + k
            if n == 1 and width[b] >= limit:  # a 1-token span grows the masked sequence by one
                open_lengths[b].remove(k)
                continue
            while head[q] < tail[q]:
                i = head[q]
                head[q] += 1
                s, g = starts[i], groups[i]
                # bits s .. s + n + 1: tokens s - 1 .. s + n, the span and one token either side
                if times_masked[g] > config.max_ngram_masks or occupied[b] & (((1 << (n + 2)) - 1) << s):
                    continue
                title = is_title(b, s, n)
                if title and not config.title_ngrams:
                    continue
                times_masked[g] += 1
                occupied[b] |= ((1 << n) - 1) << (s + 1)
                masked[b] += n
                n_spans[b] += 1
                width[b] += 2 - n
                chosen.append((b, s, n, g, title))
                return
            open_lengths[b].remove(k)

    active = [b for b in torch.randperm(B, generator=generator).tolist() if need[b] > 0]
    while active:  # round robin, so that no sequence takes the capped n-grams first
        for b in active:
            mask_one(b)
        active = [
            b for b in active if masked[b] < need[b] and n_spans[b] < config.max_spans_per_seq and open_lengths[b]
        ]
    span_seq, span_start, span_len, span_group, title = np.array(sorted(chosen), dtype=np.int64).reshape(-1, 5).T.copy()
    return (span_seq, span_start, span_len, span_group), title.astype(bool)


def _assemble(
    ids: np.ndarray,
    lengths: np.ndarray,
    chosen: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    span_title: np.ndarray,
    span_kind: np.ndarray,
    occ_seq: np.ndarray,
    occ_start: np.ndarray,
    group_lo: np.ndarray,
    n_masks: int,
    tokenizer: PreTrainedTokenizerFast,
) -> MaskedBatch:
    """Masked sequences (each span -> ``n_masks`` mask tokens) and the positives of every span."""
    span_seq, span_start, span_len, span_group = chosen
    B, T = ids.shape
    S = len(span_seq)
    # tokens each input position contributes to the masked sequence: 1 kept, n_masks at a span start, 0 inside
    contrib = (np.arange(T) < lengths[:, None]).astype(np.int64)  # (B, T)
    covered = np.repeat(span_seq * T + span_start, span_len) + _ranges(span_len)  # flat positions of span tokens
    contrib.ravel()[covered] = 0
    contrib[span_seq, span_start] = n_masks
    new_pos = np.cumsum(contrib, axis=1) - contrib  # (B, T) where each position goes in the masked sequence
    new_len = contrib.sum(1)  # (B,)
    W = max(T, int(new_len.max()))
    input_ids = np.full((B, W), tokenizer.pad_token_id, dtype=np.int64)
    input_ids[:, :T] = ids
    masked = np.full((B, W), tokenizer.pad_token_id, dtype=np.int64)
    kept = contrib == 1
    masked[np.nonzero(kept)[0], new_pos[kept]] = ids[kept]
    span_query = new_pos[span_seq, span_start]  # (S,)
    for m in range(n_masks):
        masked[span_seq, span_query + m] = tokenizer.mask_token_id
    # positives: the other-sequence occurrences in the span's n-gram group
    count = group_lo[span_group + 1] - group_lo[span_group]  # (S,)
    pos_span = np.repeat(np.arange(S), count)
    occ = np.repeat(group_lo[span_group], count) + _ranges(count)
    other = occ_seq[occ] != span_seq[pos_span]
    pos_span, occ = pos_span[other], occ[other]
    assert np.all(np.bincount(pos_span, minlength=S) > 0), "a masked span without a positive"
    pos_start = occ_start[occ]
    return MaskedBatch(
        input_ids=torch.from_numpy(input_ids),
        attention_mask=torch.from_numpy((np.arange(W) < lengths[:, None]).astype(np.int64)),
        masked_input_ids=torch.from_numpy(masked),
        masked_attention_mask=torch.from_numpy((np.arange(W) < new_len[:, None]).astype(np.int64)),
        span_seq=torch.from_numpy(span_seq),
        span_start=torch.from_numpy(span_start),
        span_len=torch.from_numpy(span_len),
        span_query=torch.from_numpy(span_query),
        pos_span=torch.from_numpy(pos_span),
        pos_seq=torch.from_numpy(occ_seq[occ]),
        pos_start=torch.from_numpy(pos_start),
        pos_end=torch.from_numpy(pos_start + span_len[pos_span] - 1),
        span_title=torch.from_numpy(span_title),
        span_kind=torch.from_numpy(span_kind.astype(np.int8)),
    )


def _ranges(counts: np.ndarray) -> np.ndarray:
    """0, 1, .., c - 1 for every c in counts, concatenated."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
