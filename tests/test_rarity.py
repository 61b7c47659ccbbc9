"""Token kinds and rarity (npmcore.rarity) against brute-force references, and span masking that favours
rare spans (``rare_boost``) on real news batches."""

import numpy as np
import pytest
import torch

from npmcore.corpus.blocks import split_document
from npmcore.corpus.readers import read_lines
from npmcore.model.masking import MaskingConfig, _sample_spans, mask_spans
from npmcore.rarity import (
    DATE,
    KINDS,
    NUMBER,
    OTHER,
    RARE,
    block_frequency,
    corpus_rarity,
    kind_shares,
    piece_kinds,
    span_kinds,
    token_kinds,
    word_kinds,
)
from npmcore.vocab import vocab_tables


@pytest.fixture(scope="module")
def news_blocks(news_path, tokenizer) -> list[list[int]]:
    docs = list(read_lines(open(news_path, encoding="utf-8").read(), "lee", 0))
    return [b.token_ids for doc in docs for b in split_document(doc, tokenizer, 256)]


@pytest.fixture(scope="module")
def news_rarity(news_blocks, tokenizer):
    return corpus_rarity(news_blocks, len(tokenizer))


def test_document_frequency_counts_each_block_once(news_blocks, news_rarity, tokenizer):
    counted = np.zeros(len(tokenizer), dtype=np.int64)
    for block in news_blocks:
        for token in set(block):
            counted[token] += 1
    assert np.array_equal(news_rarity.df, counted) and news_rarity.blocks == len(news_blocks)
    assert news_rarity.rare[tokenizer.convert_tokens_to_ids("kangaroo")]
    assert not news_rarity.rare[tokenizer.convert_tokens_to_ids("the")]
    with pytest.raises(ValueError, match="no blocks"):
        corpus_rarity([], 10)


@pytest.mark.parametrize("chunk", [1, 700, 1 << 24])  # a block longer than a chunk, several blocks per chunk, all
def test_block_frequency_of_a_flat_token_array_equals_counting_block_by_block(news_blocks, news_rarity, chunk):
    tokens = np.concatenate([np.asarray(b, dtype=np.uint16) for b in news_blocks])
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in news_blocks])])
    counted = block_frequency(tokens, offsets, len(news_rarity.df), chunk=chunk)
    assert np.array_equal(counted.df, news_rarity.df) and counted.blocks == news_rarity.blocks
    with pytest.raises(ValueError, match="no blocks"):
        block_frequency(tokens[:0], offsets[:1], 10)


def test_token_kinds_from_spelling(tokenizer, roberta_tokenizer):
    kinds = token_kinds(tokenizer)
    expected = {"january": DATE, "1861": DATE, "2004": DATE, "42": NUMBER, "##5": NUMBER, "3000": NUMBER}
    expected |= {"the": OTHER, "kangaroo": OTHER, "##ing": OTHER}
    assert {t: int(kinds[tokenizer.convert_tokens_to_ids(t)]) for t in expected} == expected
    bpe = token_kinds(roberta_tokenizer)  # byte-level pieces ("Ġ2001") of a small BPE vocabulary
    pieces = roberta_tokenizer.tokenize("He said on 12 March 2001 that the 45 sheep")
    for piece, i in zip(pieces, roberta_tokenizer.convert_tokens_to_ids(pieces)):
        assert (bpe[i] != OTHER) == any(c.isdigit() for c in piece) or piece.lstrip("Ġ").lower() == "march"


def test_span_and_word_kinds_match_a_loop(news_blocks, news_rarity, tokenizer):
    batch = news_blocks[:16]
    T = max(map(len, batch))
    ids = np.array([b + [0] * (T - len(b)) for b in batch])
    kind = piece_kinds(ids, token_kinds(tokenizer), news_rarity.rare)
    rng = np.random.default_rng(0)
    seq = rng.integers(0, 16, 500)
    length = rng.integers(1, 6, 500)
    start = np.array([rng.integers(0, len(batch[b]) - n + 1) for b, n in zip(seq, length)])
    looped = [min(kind[b, s : s + n]) for b, s, n in zip(seq, start, length)]
    assert span_kinds(kind, seq, start, length).tolist() == looped
    tables = vocab_tables(tokenizer)
    content = (ids != 0) & ~tables.special[ids]
    word_start = tables.word_start[ids]
    words = []
    for b in range(16):
        for t in range(T):
            if content[b, t]:
                if word_start[b, t] or not words or not content[b, t - 1]:
                    words.append(OTHER)
                words[-1] = min(words[-1], int(kind[b, t]))
    assert word_kinds(kind, word_start, content).tolist() == words
    shares = kind_shares(np.array(words))
    assert set(shares) == set(KINDS) and abs(sum(shares.values()) - 1) < 1e-9 and shares["rare"] > 0


def test_weighted_queues_draw_in_proportion_to_the_weights(tokenizer):
    """One sequence, one length, five candidates: the first draw's frequencies follow the weights."""
    weights = np.array([1.0, 1.0, 4.0, 2.0, 8.0])
    firsts = np.zeros(5)
    config = MaskingConfig(ratio=0.01, max_span=1)
    for seed in range(4000):
        (_, start, _, _), _ = _sample_spans(
            np.zeros(5, dtype=np.int64),
            np.arange(0, 10, 2),
            np.ones(5, dtype=np.int64),
            np.arange(5),
            np.array([1]),
            np.array([12]),
            512,
            config,
            torch.Generator().manual_seed(seed),
            lambda b, s, n: False,
            weights,
        )
        firsts[start[0] // 2] += 1
    expected = 4000 * weights / weights.sum()
    chi2 = float(((firsts - expected) ** 2 / expected).sum())
    assert chi2 < 18.5  # 4 degrees of freedom: p = 0.001


def test_rare_boost_masks_more_rare_spans_and_one_changes_nothing(news_blocks, news_rarity, tokenizer):
    batches = [news_blocks[i : i + 16] for i in range(0, 16 * 8, 16)]

    def shares(config: MaskingConfig, rarity) -> tuple[float, list]:
        masked = [
            mask_spans(b, tokenizer, config, torch.Generator().manual_seed(i), None, rarity)
            for i, b in enumerate(batches)
        ]
        kinds = torch.cat([m.span_kind for m in masked])
        return float((kinds != OTHER).float().mean()), masked

    plain, without = shares(MaskingConfig(), None)
    uniform, with_rarity = shares(MaskingConfig(), news_rarity)
    boosted, _ = shares(MaskingConfig(rare_boost=8.0), news_rarity)
    for a, b in zip(without, with_rarity):  # the rarity table alone changes no draw
        assert torch.equal(a.span_start, b.span_start) and torch.equal(a.pos_start, b.pos_start)
    assert boosted > 2 * uniform > 0
    assert all(int(k) != RARE for m in without for k in m.span_kind)  # no table: nothing is rare
    with pytest.raises(ValueError, match="rare_boost needs"):
        mask_spans(batches[0], tokenizer, MaskingConfig(rare_boost=2.0), torch.Generator())
    with pytest.raises(ValueError, match="rare_boost must be > 0"):
        MaskingConfig(rare_boost=0.0)
