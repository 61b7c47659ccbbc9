"""What a span is made of: dates, numbers, rare words, or common words.

NPM's answers are mostly names, numbers and dates, yet in-batch masking draws among the
n-grams that recur in a batch, and in a small batch those are mostly frequent words. These
tables say which spans are of the answer kinds, so that training can measure the share it
masks (:func:`kind_shares`) and give those spans more of the draws (``rare_boost`` of
:class:`npmcore.model.masking.MaskingConfig`).

* A token's *kind* comes from its spelling (:func:`token_kinds`): a date (a month name, or a
  four-digit number from 1000 to 2099, as years are written), a number (any other token
  with a digit), or neither.
* A token is *rare* when at most 1 in 100 of a corpus's blocks hold it
  (:func:`corpus_rarity`): with an uncased vocabulary, names are recognised by their rarity.
* A span (or a word) is a date if one of its tokens is, else a number, else rare, else other.
"""

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerFast

KINDS = ("date", "number", "rare", "other")  # the kind of a span: its first applicable entry
DATE, NUMBER, RARE, OTHER = range(len(KINDS))
RARE_DF = 1e-2  # a token held by at most 1 in 100 of a corpus's blocks is rare (28% of Wikipedia's tokens)
MONTHS = frozenset("january february march april may june july august september october november december".split())
_YEAR = re.compile(r"1\d\d\d|20\d\d")


@dataclass(frozen=True)
class TokenRarity:
    df: np.ndarray  # (V,) int64: blocks holding each token id
    blocks: int  # blocks counted

    @property
    def rare(self) -> np.ndarray:
        """(V,) bool: tokens in at most RARE_DF of the blocks."""
        return self.df <= RARE_DF * self.blocks


def corpus_rarity(blocks: Iterable[Sequence[int]], vocab_size: int) -> TokenRarity:
    """Document frequency of every token id over ``blocks`` (each block counts a token once)."""
    arrays = [np.asarray(ids, dtype=np.int64) for ids in blocks]
    offsets = np.cumsum([0, *map(len, arrays)])
    tokens = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64)
    return block_frequency(tokens, offsets, vocab_size)


def block_frequency(tokens: np.ndarray, offsets: np.ndarray, vocab_size: int, chunk: int = 1 << 24) -> TokenRarity:
    """Document frequency of every token id over the blocks of a flat token array (block b is
    ``tokens[offsets[b]:offsets[b + 1]]``), vectorised, about ``chunk`` tokens at a time."""
    blocks = len(offsets) - 1
    if blocks < 1:
        raise ValueError("no blocks to count token frequencies over")
    df = np.zeros(vocab_size, dtype=np.int64)
    first = 0
    while first < blocks:
        last = int(np.searchsorted(offsets, offsets[first] + chunk, side="right")) - 1
        last = min(blocks, max(last, first + 1))  # at least one block, however long
        lo, hi = int(offsets[first]), int(offsets[last])
        block = np.repeat(np.arange(last - first, dtype=np.int64), np.diff(offsets[first : last + 1]))
        pairs = np.unique(block * vocab_size + np.asarray(tokens[lo:hi], dtype=np.int64))
        df += np.bincount(pairs % vocab_size, minlength=vocab_size)
        first = last
    return TokenRarity(df, blocks)


def token_kinds(tokenizer: PreTrainedTokenizerFast) -> np.ndarray:
    """(V,) int8: DATE, NUMBER or OTHER for every token id, from its spelling."""
    return _token_kinds(tokenizer, len(tokenizer))


@functools.lru_cache(maxsize=8)
def _token_kinds(tokenizer: PreTrainedTokenizerFast, size: int) -> np.ndarray:
    kinds = np.full(size, OTHER, dtype=np.int8)
    for token, i in tokenizer.get_vocab().items():
        if i >= size:
            continue
        piece = token.removeprefix("##").lstrip("Ġ▁").lower()
        if piece in MONTHS or _YEAR.fullmatch(piece):
            kinds[i] = DATE
        elif any(c.isdigit() for c in piece):
            kinds[i] = NUMBER
    return kinds


def piece_kinds(ids: np.ndarray, kinds: np.ndarray, rare: np.ndarray) -> np.ndarray:
    """The kind of each token of ``ids`` (any shape): its spelling's, else RARE if rare, else OTHER."""
    out = kinds[ids].copy()
    out[(out == OTHER) & rare[ids]] = RARE
    return out


def span_kinds(token_kind: np.ndarray, seq: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """(S,) kind of each span (seq, start, length) of a (B, T) array of token kinds: the first
    kind of :data:`KINDS` that one of its tokens has."""
    out = np.full(len(seq), OTHER, dtype=np.int8)
    for k in range(int(length.max(initial=0))):
        inside = k < length
        out[inside] = np.minimum(out[inside], token_kind[seq[inside], start[inside] + k])
    return out


def word_kinds(token_kind: np.ndarray, word_start: np.ndarray, content: np.ndarray) -> np.ndarray:
    """The kind of every content word of a (B, T) batch (a word runs from a word start to the next
    one, or to the end of the content), as for spans."""
    first = content & ~np.pad(content[:, :-1], ((0, 0), (1, 0)))  # a row's content opens a word
    starts = (word_start & content) | first
    word = np.cumsum(starts.ravel()) - 1  # (B*T,) the word each token belongs to
    keep = content.ravel()
    out = np.full(int(starts.sum()), OTHER, dtype=np.int8)
    np.minimum.at(out, word[keep], token_kind.ravel()[keep])
    return out


def kind_shares(kinds: np.ndarray) -> dict[str, float]:
    """Share of each kind (by name) among ``kinds``."""
    counts = np.bincount(kinds.astype(np.int64), minlength=len(KINDS))
    return {name: float(c) / max(1, len(kinds)) for name, c in zip(KINDS, counts, strict=True)}
