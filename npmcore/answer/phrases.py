"""NPM phrase scoring on a flat corpus of tokens: pure, vectorised functions.

The corpus is the datastore's content tokens in one global order (``tokens`` (N,)),
cut into blocks by ``offsets`` (blocks + 1,): block b is ``tokens[offsets[b]:offsets[b+1]]``.
A span is a pair (first, last) of global token ids, inclusive.

NPM inference (Min et al. 2023, Sec. 3.1; ../shared/docs/npm-method.md):

* candidates: from every retrieved start token s, the spans (s, s + j - 1), j = 1..l_max;
  from every retrieved end token e, the spans (e - j + 1, e). A span stays inside its
  block, holds no special token, and covers whole words: it starts at a word start and
  the token after it starts a word (or the block ends);
* every distinct candidate position counts once, with score
  ``exp(sim(q_start, E(first)) / tau) + exp(sim(q_end, E(last)) / tau)``;
* the score of a phrase (a distinct token-id sequence) is the sum over its positions.

Word starts use the tokenizer's vocabulary tables (:func:`npmcore.vocab.vocab_tables`),
the same rule training uses to pick whole-word spans.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npmcore.vocab import VocabTables


@dataclass(frozen=True)
class Corpus:
    """The flat token view of an index: memory-mapped arrays, no per-token objects."""

    tokens: np.ndarray  # (N,) token id of every content token, in global order
    offsets: np.ndarray  # (blocks + 1,) int64: block b holds global ids offsets[b]:offsets[b+1]
    tables: VocabTables  # word-boundary tables of the tokenizer

    def block_of(self, ids: np.ndarray) -> np.ndarray:
        """Block number of each global token id."""
        return np.searchsorted(self.offsets, ids, side="right") - 1

    def starts_word(self, ids: np.ndarray) -> np.ndarray:
        """Whether each token starts a word: the first of its block, a word-start piece, or after punctuation."""
        ids = np.asarray(ids, dtype=np.int64)
        tok = self.tokens[ids]
        first = self.offsets[self.block_of(ids)] == ids
        after_boundary = self.tables.boundary[self.tokens[np.maximum(ids - 1, 0)]]
        return first | self.tables.word_start[tok] | after_boundary

    def block_tokens(self, block: int) -> np.ndarray:
        return np.asarray(self.tokens[self.offsets[block] : self.offsets[block + 1]])


def candidate_spans(corpus: Corpus, starts: np.ndarray, ends: np.ndarray, l_max: int) -> np.ndarray:
    """Distinct whole-word spans (n, 2) [first, last] from retrieved start and end tokens, sorted.

    Args:
        corpus: the flat token view.
        starts, ends: global ids of the tokens retrieved for q_start and q_end (any shape; -1 ignored).
        l_max: longest span in tokens.
    """
    spans = [
        _spans_from(corpus, np.unique(starts[starts >= 0]), l_max, +1),
        _spans_from(corpus, np.unique(ends[ends >= 0]), l_max, -1),
    ]
    both = np.concatenate(spans)
    # one int64 key per span, ordered as (first, last): unique on it is a plain sort, not a row-wise one
    keys = np.unique(both[:, 0] * l_max + (both[:, 1] - both[:, 0]))
    first = keys // l_max
    return np.stack([first, first + keys % l_max], axis=1)


def content_spans(corpus: Corpus, spans: np.ndarray) -> np.ndarray:
    """The spans (n, 2) whose first and last words are content words: neither a stopword
    nor punctuation (``tables.stop``), as the paper's open-set evaluation requires of answers."""
    if len(spans) == 0:
        return spans
    first, last = spans[:, 0], spans[:, 1]
    after_first = np.minimum(first + 1, len(corpus.tokens) - 1)
    first_is_word = (first == last) | corpus.starts_word(after_first)  # the first word is its first token alone
    stop = corpus.tables.stop
    first_stop = stop[corpus.tokens[first]] & first_is_word
    last_stop = stop[corpus.tokens[last]] & corpus.starts_word(last)  # spans end at word ends
    return spans[~(first_stop | last_stop)]


def repeating_spans(
    corpus: Corpus, spans: np.ndarray, words: frozenset[str], word_words: Callable[[tuple[int, ...]], frozenset[str]]
) -> np.ndarray:
    """(n,) bool: the spans that hold a word whose content words (:func:`npmcore.vocab.content_words_of`)
    meet ``words`` (a query's): answers that copy the query.

    Args:
        spans: (n, 2) whole-word spans (:func:`candidate_spans`), so every word inside one is whole.
        words: the content words to avoid.
        word_words: a word's token ids -> the content words of its text (:func:`npmcore.vocab.content_words_of`
            of the tokenizer's decoding; the caller may cache it).
    """
    if len(spans) == 0 or not words:
        return np.zeros(len(spans), dtype=bool)
    lengths = spans[:, 1] - spans[:, 0] + 1
    offsets = np.arange(int(lengths.sum())) - np.repeat(lengths.cumsum() - lengths, lengths)
    pos = np.unique(np.repeat(spans[:, 0], lengths) + offsets)  # every token inside a span, sorted
    is_start = corpus.starts_word(pos) | (np.diff(pos, prepend=-2) != 1)  # a gap starts a word too
    word = np.cumsum(is_start) - 1  # (len(pos),) the word of each position
    bounds = [*np.flatnonzero(is_start).tolist(), len(pos)]
    tokens = np.asarray(corpus.tokens[pos]).tolist()
    known: dict[tuple[int, ...], bool] = {}
    copies = np.zeros(len(bounds) - 1, dtype=bool)  # per word: it spells one of ``words``
    for w, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        key = tuple(tokens[lo:hi])
        if key not in known:
            known[key] = not words.isdisjoint(word_words(key))
        copies[w] = known[key]
    copied = np.r_[0, np.cumsum(copies[word])]  # (len(pos) + 1,) copied positions before each position
    first, last = np.searchsorted(pos, spans[:, 0]), np.searchsorted(pos, spans[:, 1])
    return copied[last + 1] > copied[first]


def _spans_from(corpus: Corpus, anchors: np.ndarray, l_max: int, direction: int) -> np.ndarray:
    """Spans that start (direction +1) or end (-1) at each anchor, up to l_max tokens."""
    if len(anchors) == 0:
        return np.empty((0, 2), dtype=np.int64)
    block = corpus.block_of(anchors)
    lo, hi = corpus.offsets[block], corpus.offsets[block + 1]  # (n,) the anchors' block bounds
    other = anchors[:, None] + direction * np.arange(l_max)  # (n, l_max) the other end of each span
    inside = (other >= lo[:, None]) & (other < hi[:, None])
    safe = np.where(inside, other, anchors[:, None])
    special = corpus.tables.special[corpus.tokens[safe]] | ~inside
    clean = ~np.logical_or.accumulate(special, axis=1)  # no special token between anchor and other end
    first = anchors[:, None] if direction > 0 else safe
    last = safe if direction > 0 else anchors[:, None]
    ok = clean & _whole_words(
        corpus, np.broadcast_to(first, safe.shape), np.broadcast_to(last, safe.shape), hi[:, None]
    )
    return np.stack([np.broadcast_to(first, safe.shape)[ok], np.broadcast_to(last, safe.shape)[ok]], axis=1)


def _whole_words(corpus: Corpus, first: np.ndarray, last: np.ndarray, block_end: np.ndarray) -> np.ndarray:
    """Span [first, last] starts at a word start and ends where a word ends."""
    after = np.minimum(last + 1, len(corpus.tokens) - 1)
    ends_word = (last + 1 >= block_end) | corpus.starts_word(after.ravel()).reshape(after.shape)
    return corpus.starts_word(first.ravel()).reshape(first.shape) & ends_word


def span_token_ids(corpus: Corpus, spans: np.ndarray, l_max: int) -> np.ndarray:
    """(n, l_max) token ids of each span, padded with -1."""
    width = np.arange(l_max)
    pos = spans[:, :1] + width  # (n, l_max)
    inside = pos <= spans[:, 1:]
    return np.where(inside, corpus.tokens[np.where(inside, pos, spans[:, :1])].astype(np.int64), -1)


@dataclass(frozen=True)
class Phrases:
    """Candidate phrases of one query, best first."""

    token_ids: np.ndarray  # (m, l_max) token ids of each distinct phrase, -1 padded
    scores: np.ndarray  # (m,) normalised: sum of exp scores of its positions / sum over all candidates
    spans: np.ndarray  # (n, 2) every candidate position
    span_scores: np.ndarray  # (n,) its normalised score
    phrase_of_span: np.ndarray  # (n,) the phrase (row of token_ids) each position spells
    # (m, features) each phrase's score parts under evidence scoring (npmcore.answer.ranking); None under NPM's
    parts: np.ndarray | None = None


def score_phrases(
    corpus: Corpus, spans: np.ndarray, sim_first: np.ndarray, sim_last: np.ndarray, tau: float, l_max: int
) -> Phrases:
    """Aggregate ``exp(sim_first / tau) + exp(sim_last / tau)`` over the positions of each distinct phrase.

    Args:
        spans: (n, 2) distinct candidate positions.
        sim_first, sim_last: (n,) sim(q_start, E(first token)) and sim(q_end, E(last token)).
    """
    if tau <= 0:
        raise ValueError(f"temperature must be > 0, got {tau}")
    if len(spans) == 0:
        empty = np.empty(0)
        return Phrases(np.empty((0, l_max), dtype=np.int64), empty, spans, empty, np.empty(0, dtype=np.int64))
    a, b = sim_first.astype(np.float64) / tau, sim_last.astype(np.float64) / tau
    top = max(a.max(), b.max())  # exp(x - top): the same ratios without overflow
    span_scores = np.exp(a - top) + np.exp(b - top)
    span_scores /= span_scores.sum()
    ids = span_token_ids(corpus, spans, l_max)
    phrases, phrase_of_span = np.unique(ids, axis=0, return_inverse=True)
    scores = np.bincount(phrase_of_span.ravel(), weights=span_scores, minlength=len(phrases))
    order = np.argsort(-scores, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return Phrases(phrases[order], scores[order], spans, span_scores, rank[phrase_of_span.ravel()])


def score_tokens(token_ids: np.ndarray, sims: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """NPM single: sum of ``exp(sim / tau)`` per distinct token id of the retrieved tokens.

    Returns:
        (distinct token ids, normalised scores), best first.
    """
    if len(token_ids) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    x = sims.astype(np.float64) / tau
    weights = np.exp(x - x.max())
    vocab, inverse = np.unique(token_ids, return_inverse=True)
    scores = np.bincount(inverse, weights=weights) / weights.sum()
    order = np.argsort(-scores, kind="stable")
    return vocab[order], scores[order]


def label_scores(token_ids: np.ndarray, sims: np.ndarray, label_words: list[np.ndarray], tau: float) -> np.ndarray:
    """Closed-set scores: log of the sum of ``exp(sim / tau)`` over the retrieved tokens that are
    one of each label's words (-inf for a label none of whose words was retrieved).

    Args:
        token_ids, sims: (k,) the retrieved tokens' ids and similarities.
        label_words: per label, the token ids of its verbalizer words.
    """
    x = sims.astype(np.float64) / tau
    out = np.full(len(label_words), -np.inf)
    for y, words in enumerate(label_words):
        hit = x[np.isin(token_ids, words)]
        if len(hit):
            out[y] = hit.max() + np.log(np.exp(hit - hit.max()).sum())
    return out
