"""Span and token masking on real news and Wikipedia batches and random batches, against a brute-force reference.

The reference enumerates every n-gram of a batch in pure Python (tuples in a dict): the
whole-word ones are the maskable spans, every occurrence in another sequence is a
positive, and the "{title}. " prefix of a block is neither. The word-boundary tables it
uses are pinned by hand-picked examples for both a WordPiece (BERT) and a byte-level BPE
(RoBERTa) tokenizer.
"""

from npmcore.runtime import configure_environment

configure_environment()

import copy
import itertools
import math
import random
from collections import Counter, defaultdict
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch

from npmcore.corpus.blocks import split_document
from npmcore.corpus.readers import Document, iter_wiki_pages, read_lines, wiki_documents
from npmcore.model.masking import MaskedBatch, MaskingConfig, mask_spans, mask_tokens
from npmcore.model.step_batches import StepBatch
from npmcore.model.step_stats import batch_stats
from npmcore.vocab import FUNCTION_WORDS, vocab_tables

MAX_TOKENS = 256
BATCH = 16


def _batches(docs: list[Document], tokenizer, n_batches: int) -> list[list[list[int]]]:
    """Blocks in document order, 16 per batch: blocks of one document share a batch."""
    blocks = [b.token_ids for doc in docs for b in split_document(doc, tokenizer, MAX_TOKENS)]
    return [blocks[i : i + BATCH] for i in range(0, BATCH * n_batches, BATCH)]


@pytest.fixture(scope="module")
def news_docs(news_path) -> list[Document]:
    return list(read_lines(open(news_path, encoding="utf-8").read(), "lee", 0))


@pytest.fixture(scope="module")
def news_batches(news_docs, tokenizer) -> list[list[list[int]]]:
    return _batches(news_docs[:160], tokenizer, 12)


# --- the brute-force reference ------------------------------------------------------------


def _word_starts(seq: list[int], tables) -> list[bool]:
    return [t == 0 or bool(tables.word_start[x]) or bool(tables.boundary[seq[t - 1]]) for t, x in enumerate(seq)]


def _is_stopword(tokenizer, word: list[int]) -> bool:
    """A word (its token ids) is one token spelling a function word or punctuation (read from its decoded text)."""
    text = tokenizer.decode(word).strip().lower()
    return len(word) == 1 and (text in FUNCTION_WORDS or not any(c.isalnum() for c in text))


def _content(seq: list[int], tables, title: int) -> list[bool]:
    """Non-special tokens after the first ``title`` of them (the "{title}. " prefix)."""
    flags, seen = [], 0
    for x in seq:
        seen += not tables.special[x]
        flags.append(not tables.special[x] and seen > title)
    return flags


def _every_ngram(
    batch: list[list[int]], tables, max_span: int, titles: list[int]
) -> dict[tuple[int, ...], list[tuple[int, int]]]:
    """Every n-gram of content tokens, inside words or not -> its (sequence, start) occurrences."""
    occ = defaultdict(list)
    for b, seq in enumerate(batch):
        content = _content(seq, tables, titles[b])
        for s in range(len(seq)):
            for e in range(s, min(s + max_span, len(seq))):
                if not content[e]:
                    break
                occ[tuple(seq[s : e + 1])].append((b, s))
    return occ


def _whole_word_ngrams(
    batch: list[list[int]], tables, max_span: int, titles: list[int], stopword=None
) -> dict[tuple[int, ...], list[tuple[int, int]]]:
    """Every whole-word n-gram of the batch -> its (sequence, start) occurrences; with ``stopword``
    (a predicate on a word's token ids) only those whose first and last words are not stopwords."""
    occ = defaultdict(list)
    for b, seq in enumerate(batch):
        content = _content(seq, tables, titles[b])
        starts = _word_starts(seq, tables)
        ends = [e + 1 == len(seq) or starts[e + 1] or not content[e + 1] for e in range(len(seq))]
        for s in range(len(seq)):
            if not (content[s] and starts[s]):
                continue
            first = seq[s : next(e for e in range(s, len(seq)) if ends[e]) + 1]  # the first word
            for e in range(s, min(s + max_span, len(seq))):
                if not content[e]:
                    break
                if ends[e]:
                    last = seq[max(t for t in range(s, e + 1) if starts[t]) : e + 1]  # the last word
                    if stopword is None or not (stopword(first) or stopword(last)):
                        occ[tuple(seq[s : e + 1])].append((b, s))
    return occ


def _title_ngrams(seq: list[int], tables, title: int, max_span: int) -> set[tuple[int, ...]]:
    """The n-grams of a sequence's "{title}. " prefix (its first ``title`` non-special tokens)."""
    prefix = [x for x in seq if not tables.special[x]][:title]
    return {tuple(prefix[i : i + n]) for n in range(1, max_span + 1) for i in range(len(prefix) - n + 1)}


def _need(ratio: float, seq: list[int], tables, title: int = 0) -> int:
    return math.ceil(Fraction(str(ratio)) * sum(_content(seq, tables, title)))


def _spans(mb: MaskedBatch) -> list[tuple[int, int, int]]:
    return list(zip(mb.span_seq.tolist(), mb.span_start.tolist(), mb.span_len.tolist(), strict=True))


def _positives(mb: MaskedBatch) -> dict[int, set[tuple[int, int, int]]]:
    pos = defaultdict(set)
    columns = (mb.pos_span, mb.pos_seq, mb.pos_start, mb.pos_end)
    for i, j, s, e in zip(*(c.tolist() for c in columns), strict=True):
        pos[i].add((j, s, e))
    return pos


def _check_layout(mb: MaskedBatch, batch: list[list[int]], tokenizer, n_masks: int) -> None:
    """Keys, masked queries and span_query against a per-sequence Python rebuild."""
    W = mb.input_ids.shape[1]
    assert mb.masked_input_ids.shape == mb.input_ids.shape == mb.attention_mask.shape == mb.masked_attention_mask.shape
    spans = _spans(mb)
    assert spans == sorted(spans)
    assert mb.pos_span.tolist() == sorted(mb.pos_span.tolist())
    pad, mask = tokenizer.pad_token_id, tokenizer.mask_token_id
    for b, seq in enumerate(batch):
        assert mb.input_ids[b].tolist() == seq + [pad] * (W - len(seq))
        assert mb.attention_mask[b].tolist() == [1] * len(seq) + [0] * (W - len(seq))
        out, queries, t = [], [], 0
        for _, s, n in (sp for sp in spans if sp[0] == b):
            out += seq[t:s]
            queries.append(len(out))
            out += [mask] * n_masks
            t = s + n
        out += seq[t:]
        assert mb.masked_input_ids[b].tolist() == out + [pad] * (W - len(out))
        assert mb.masked_attention_mask[b].tolist() == [1] * len(out) + [0] * (W - len(out))
        assert mb.span_query[mb.span_seq == b].tolist() == queries
    assert W == max(max(len(s) for s in batch), int(mb.masked_attention_mask.sum(1).max()))


def check_spans(
    mb: MaskedBatch, batch: list[list[int]], tokenizer, config: MaskingConfig, titles: list[int] | None = None
) -> None:
    """Every promise of mask_spans, against the brute-force reference."""
    tables = vocab_tables(tokenizer)
    titles = titles or [0] * len(batch)
    stopword = (lambda word: _is_stopword(tokenizer, word)) if config.content_words else None
    occ = _whole_word_ngrams(batch, tables, config.max_span, titles, stopword)
    every = _every_ngram(batch, tables, config.max_span, titles)
    _check_layout(mb, batch, tokenizer, 2)
    spans, positives = _spans(mb), _positives(mb)
    times = Counter(tuple(batch[b][s : s + n]) for b, s, n in spans)
    assert max(times.values(), default=0) <= config.max_ngram_masks + 1
    title_grams = [_title_ngrams(seq, tables, titles[b], config.max_span) for b, seq in enumerate(batch)]
    assert mb.span_title.tolist() == [tuple(batch[b][s : s + n]) in title_grams[b] for b, s, n in spans]
    assert config.title_ngrams or not mb.span_title.any()
    by_seq = defaultdict(list)
    for i, (b, s, n) in enumerate(spans):
        gram = tuple(batch[b][s : s + n])
        assert 1 <= n <= config.max_span and (b, s) in occ[gram], (b, s, n)  # whole words, no special token
        expected = {(j, t, t + n - 1) for j, t in every[gram] if j != b}
        assert expected and positives[i] == expected  # exact and complete
        by_seq[b].append((s, n))
    assert set(positives) == set(range(len(spans)))
    for b, seq in enumerate(batch):
        mine = by_seq[b]
        assert len(mine) <= config.max_spans_per_seq
        assert all(s2 >= s1 + n1 + 1 for (s1, n1), (s2, _) in itertools.pairwise(mine)), "spans overlap or touch"
        masked, need = sum(n for _, n in mine), _need(config.ratio, seq, tables, titles[b])
        if mine:
            assert masked - max(n for _, n in mine) < need, "budget exceeded by more than the last span"
        if masked < need and len(mine) < config.max_spans_per_seq:  # stopped early: nothing usable left
            blocked = {t for s, n in mine for t in range(s - 1, s + n + 1)}
            for gram, where in occ.items():
                usable = (config.p < 1 or len(gram) == 1) and times[gram] <= config.max_ngram_masks
                usable &= config.title_ngrams or gram not in title_grams[b]
                if usable and any(j != b for j, _ in every[gram]):
                    for j, s in where:
                        assert j != b or blocked & set(range(s, s + len(gram))), (b, s, gram)


def check_tokens(
    mb: MaskedBatch, batch: list[list[int]], tokenizer, ratio: float, titles: list[int] | None = None
) -> None:
    """Every promise of mask_tokens, against the brute-force reference."""
    tables = vocab_tables(tokenizer)
    titles = titles or [0] * len(batch)
    _check_layout(mb, batch, tokenizer, 1)
    assert mb.span_len.tolist() == [1] * len(mb.span_len)
    assert torch.equal(mb.span_query, mb.span_start) and torch.equal(mb.pos_start, mb.pos_end)
    where = defaultdict(list)
    for b, seq in enumerate(batch):
        for t, (x, content) in enumerate(zip(seq, _content(seq, tables, titles[b]), strict=True)):
            if content:
                where[x].append((b, t))
    positives = _positives(mb)
    titled = [_title_ngrams(seq, tables, titles[b], 1) for b, seq in enumerate(batch)]
    assert mb.span_title.tolist() == [(batch[b][s],) in titled[b] for b, s, _ in _spans(mb)]
    for i, (b, s, _) in enumerate(_spans(mb)):
        expected = {(j, t, t) for j, t in where[batch[b][s]] if j != b}
        assert expected and positives[i] == expected
    for b, seq in enumerate(batch):
        content = _content(seq, tables, titles[b])
        candidates = sum(any(j != b for j, _ in where[x]) for x, c in zip(seq, content, strict=True) if c)
        assert int((mb.span_seq == b).sum()) == min(_need(ratio, seq, tables, titles[b]), candidates)


# --- word boundaries ----------------------------------------------------------------------


def test_word_boundaries_of_wordpiece(tokenizer):
    tables = vocab_tables(tokenizer)
    assert vocab_tables(tokenizer) is tables  # cached
    ids = tokenizer("The unaffordable cat's (hello) world, bushfires")["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[2:6] == ["una", "##ff", "##ord", "##able"] and pieces[-3:-1] == ["bush", "##fires"]
    starts = dict(zip(pieces, _word_starts(ids, tables), strict=True))
    assert starts["[CLS]"] and starts["the"] and starts["una"] and starts[","] and starts["hello"] and starts["bush"]
    assert not any(starts[p] for p in pieces if p.startswith("##"))
    assert tables.special[tokenizer.sep_token_id] and tables.boundary[tokenizer.convert_tokens_to_ids("(")]
    assert not tables.boundary[tokenizer.convert_tokens_to_ids("cat")]
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if not tables.special[i] and any(c.isalnum() for c in piece):
            assert tables.word_start[i] == (not piece.startswith("##")) and not tables.boundary[i], piece


def test_word_boundaries_of_byte_level_bpe(roberta_tokenizer):
    tables = vocab_tables(roberta_tokenizer)
    ids = roberta_tokenizer("The cat's (hello) world\n\nNew café")["input_ids"]
    pieces = roberta_tokenizer.convert_ids_to_tokens(ids)
    starts = _word_starts(ids, tables)
    assert pieces[:2] == ["<s>", "The"] and starts[0] and starts[1]  # first word: after <s>
    for i, p in enumerate(pieces):
        if p.startswith("Ġ") or p in ("(", ")", "Ċ", "ĊĊ", "'", "</s>"):
            assert starts[i], p
    after_paren = pieces.index("Ġ(") + 1
    assert starts[after_paren]  # "(hello": "hello" has no "Ġ" but follows punctuation
    after_newline = max(i for i, p in enumerate(pieces) if "Ċ" in p) + 1
    assert starts[after_newline]  # "\n\nNew"
    assert not starts[pieces.index("'s")]  # "cat's": "'s" continues the word
    assert not tables.word_start[roberta_tokenizer.convert_tokens_to_ids("Ã")]  # a byte of "é", inside a word


# --- span masking -------------------------------------------------------------------------


def test_spans_on_news_batches_match_the_reference(news_batches, tokenizer):
    config = MaskingConfig()
    fractions = []
    for i, batch in enumerate(news_batches):
        mb = mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(i))
        check_spans(mb, batch, tokenizer, config)
        fractions.append(int(mb.span_len.sum()) / sum(len(s) - 2 for s in batch))
        assert mb.span_len.max() >= 3  # real multi-token spans
    assert 0.12 <= sum(fractions) / len(fractions) <= 0.17  # near the 15 % budget


def test_content_word_spans_match_the_reference(news_batches, tokenizer, roberta_tokenizer, news_docs):
    config = MaskingConfig(content_words=True)
    for i, batch in enumerate(news_batches[:4]):
        mb = mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(i))
        check_spans(mb, batch, tokenizer, config)
        words = [tokenizer.decode(batch[b][s : s + n]).split() for b, s, n in _spans(mb)]
        assert words and not any(w[0] in FUNCTION_WORDS or w[-1] in FUNCTION_WORDS for w in words)
    for i, batch in enumerate(_batches(news_docs[:30], roberta_tokenizer, 2)):
        check_spans(
            mask_spans(batch, roberta_tokenizer, config, torch.Generator().manual_seed(i)),
            batch,
            roberta_tokenizer,
            config,
        )


@pytest.fixture(scope="module")
def wiki_batches(dump_path, tokenizer) -> list[tuple[list[list[int]], list[int]]]:
    """(token ids, title_tokens) of batches of Wikipedia blocks, a document's blocks together:
    every sequence of a batch starts with the same "{title}. " prefix."""
    pages, prefixes = [], None
    for page, prefixes, _ in itertools.islice(iter_wiki_pages(dump_path), 12):
        pages.append(page)
    blocks = [b for doc in wiki_documents(pages, prefixes, "dump") for b in split_document(doc, tokenizer, MAX_TOKENS)]
    return [
        ([b.token_ids for b in blocks[i : i + BATCH]], [b.title_tokens for b in blocks[i : i + BATCH]])
        for i in range(0, 4 * BATCH, BATCH)
    ]


def test_titles_are_never_masked_nor_positives(wiki_batches, tokenizer):
    for i, (batch, titles) in enumerate(wiki_batches):
        assert min(titles) > 0
        for config in (MaskingConfig(), MaskingConfig(content_words=True)):
            mb = mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(i), titles)
            check_spans(mb, batch, tokenizer, config, titles)
            first_text = torch.tensor([1 + t for t in titles])  # [CLS] then the prefix
            assert (mb.span_start >= first_text[mb.span_seq]).all() and (mb.pos_start >= first_text[mb.pos_seq]).all()
            untitled = mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(i))
            assert (untitled.span_start < first_text[untitled.span_seq]).any()  # without titles, titles are masked
        mb = mask_tokens(batch, tokenizer, 0.15, torch.Generator().manual_seed(i), titles)
        check_tokens(mb, batch, tokenizer, 0.15, titles)


def test_title_ngrams_in_the_body_are_masked_only_when_allowed(wiki_batches, tokenizer):
    allowed, shares = 0, []
    for i, (batch, titles) in enumerate(wiki_batches):
        for title_ngrams in (True, False):
            config = MaskingConfig(content_words=True, title_ngrams=title_ngrams)
            mb = mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(i), titles)
            check_spans(mb, batch, tokenizer, config, titles)  # span_title against the reference; none when not allowed
            stats = batch_stats(StepBatch(mb, None, torch.zeros(len(batch), dtype=torch.long)))  # one document
            assert stats["title_spans"] == pytest.approx(float(mb.span_title.float().mean()))
            assert stats["title_positives"] == pytest.approx(float(mb.span_title[mb.pos_span].float().mean()))
            assert stats["other_document_positives"] == 0
            if title_ngrams:
                allowed += int(mb.span_title.sum())
                shares.append(stats["title_spans"])
            else:
                assert stats["title_spans"] == stats["title_positives"] == 0
    assert allowed > 0 and max(shares) < 0.5  # the article's body names its subject; most spans are other words


def test_positives_include_occurrences_inside_words(tokenizer):
    """ "cat" masked as a whole word has its positive inside "cat ##s" of another sequence (the paper
    counts any occurrence); "cat" inside "cats" is not a whole word, so it is never masked itself."""
    cat, s = tokenizer.convert_tokens_to_ids(["cat", "##s"])
    batch = [[101, cat, 102], [101, cat, s, 102]]
    mb = mask_spans(batch, tokenizer, MaskingConfig(), torch.Generator().manual_seed(0))
    check_spans(mb, batch, tokenizer, MaskingConfig())
    assert _spans(mb) == [(0, 1, 1)] and _positives(mb) == {0: {(1, 1, 1)}}


def test_spans_with_binding_caps(news_batches, tokenizer):
    for config in (
        MaskingConfig(max_ngram_masks=0, ratio=0.3),
        MaskingConfig(max_spans_per_seq=3, p=0.2, max_span=4),
        MaskingConfig(ratio=1.0, p=1.0),
    ):
        mb = mask_spans(news_batches[0], tokenizer, config, torch.Generator().manual_seed(1))
        check_spans(mb, news_batches[0], tokenizer, config)
    assert mb.span_len.max() == 1  # p = 1: single-word spans only
    capped = mask_spans(news_batches[0], tokenizer, MaskingConfig(max_ngram_masks=0), torch.Generator().manual_seed(1))
    assert max(Counter(tuple(news_batches[0][b][s : s + n]) for b, s, n in _spans(capped)).values()) == 1


def test_spans_are_deterministic_for_a_seed(news_batches, tokenizer):
    batch, config = news_batches[1], MaskingConfig()
    a, b, c = (mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(s)) for s in (7, 7, 8))
    for field in MaskedBatch.__dataclass_fields__:
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert not torch.equal(a.masked_input_ids, c.masked_input_ids)


def test_span_lengths_follow_the_geometric_law(news_batches, tokenizer):
    """With every n-gram repeated (each block twice), lengths are close to geometric(p)."""
    lengths = Counter()
    for i, batch in enumerate(news_batches[:3]):
        doubled = [seq for seq in batch[:8] for _ in range(2)]
        mb = mask_spans(doubled, tokenizer, MaskingConfig(), torch.Generator().manual_seed(i))
        check_spans(mb, doubled, tokenizer, MaskingConfig())
        lengths.update(mb.span_len.tolist())
    total = sum(lengths.values())
    assert 0.45 <= lengths[1] / total <= 0.6 and 0.18 <= lengths[2] / total <= 0.32, lengths


def test_spans_on_random_batches(tokenizer):
    """Few distinct tokens, so n-grams repeat a lot; pieces, punctuation and specials mixed in."""
    vocab = tokenizer.convert_tokens_to_ids(["the", "cat", "sat", "on", "mat", "##s", "##ing", ",", ".", "(", "a"])
    special = [tokenizer.unk_token_id, tokenizer.mask_token_id]
    rng = random.Random(0)
    for trial in range(12):
        batch = [
            [tokenizer.cls_token_id]
            + [rng.choice(vocab) if rng.random() > 0.03 else rng.choice(special) for _ in range(rng.randint(1, 70))]
            + [tokenizer.sep_token_id]
            for _ in range(rng.randint(2, 10))
        ]
        config = MaskingConfig(
            ratio=rng.choice([0.15, 0.4]),
            p=rng.choice([0.3, 0.5]),
            max_span=rng.randint(1, 6),
            max_spans_per_seq=rng.randint(1, 20),
            max_ngram_masks=rng.randint(0, 4),
        )
        mb = mask_spans(batch, tokenizer, config, torch.Generator().manual_seed(trial))
        check_spans(mb, batch, tokenizer, config)


def test_spans_with_a_roberta_tokenizer(news_docs, roberta_tokenizer):
    config = MaskingConfig()
    for i, batch in enumerate(_batches(news_docs[:30], roberta_tokenizer, 2)):
        assert batch[0][0] == roberta_tokenizer.bos_token_id
        mb = mask_spans(batch, roberta_tokenizer, config, torch.Generator().manual_seed(i))
        check_spans(mb, batch, roberta_tokenizer, config)
        assert mb.span_len.max() >= 2 and (mb.masked_input_ids == roberta_tokenizer.mask_token_id).sum() == 2 * len(
            mb.span_len
        )


def test_masked_sequences_stay_within_model_max_length(news_batches, tokenizer):
    short = copy.copy(tokenizer)
    short.model_max_length = max(len(s) for s in news_batches[0])
    config = MaskingConfig(p=1.0)  # single-token spans only: each grows the masked sequence by one
    mb = mask_spans(news_batches[0], short, config, torch.Generator().manual_seed(0))
    assert mb.masked_input_ids.shape[1] == short.model_max_length
    full = max(range(BATCH), key=lambda b: len(news_batches[0][b]))
    assert int(mb.masked_attention_mask[full].sum()) <= short.model_max_length
    with pytest.raises(ValueError, match="model_max_length=511"):
        short.model_max_length = 511
        mask_spans([[101] + [1996] * 600 + [102]] * 2, short, config, torch.Generator())


def test_degenerate_batches_mask_nothing(tokenizer):
    g = torch.Generator().manual_seed(0)
    for batch in ([[101, 1996, 4937, 102]], [[101, 102], [101, 102]], [[101, 1996, 102], [101, 4937, 102]]):
        mb = mask_spans(batch, tokenizer, MaskingConfig(), g)
        assert len(mb.span_seq) == len(mb.pos_span) == 0
        assert torch.equal(mb.masked_input_ids, mb.input_ids)


def test_bad_inputs_are_rejected(tokenizer):
    g, config = torch.Generator(), MaskingConfig()
    cases = [
        ([], tokenizer, "empty batch"),
        ([[101, 102], []], tokenizer, "sequence 1 of the batch is empty"),
        ([[101, 102], [101, len(tokenizer), 102]], tokenizer, f"sequence 1 has token id {len(tokenizer)}"),
        ([[101, -1, 102]], tokenizer, "token id -1"),
        ([[101, 102]], SimpleNamespace(mask_token_id=None, pad_token_id=0), "no mask token"),
    ]
    for batch, tok, message in cases:
        with pytest.raises(ValueError, match=message):
            mask_spans(batch, tok, config, g)
        with pytest.raises(ValueError, match=message):
            mask_tokens(batch, tok, 0.15, g)
    with pytest.raises(TypeError, match="must be integers"):
        mask_spans([[101, 1.5, 102]], tokenizer, config, g)
    for name, value in (("ratio", 0.0), ("p", 1.5), ("max_span", 0), ("max_spans_per_seq", 0), ("max_ngram_masks", -1)):
        with pytest.raises(ValueError, match=name):
            MaskingConfig(**{name: value})
    with pytest.raises(ValueError, match="ratio"):
        mask_tokens([[101, 102]], tokenizer, 1.5, g)


# --- token masking (NPM single) -----------------------------------------------------------


def test_tokens_on_news_batches_match_the_reference(news_batches, tokenizer):
    for i, batch in enumerate(news_batches[:3]):
        mb = mask_tokens(batch, tokenizer, 0.15, torch.Generator().manual_seed(i))
        check_tokens(mb, batch, tokenizer, 0.15)
        assert mb.masked_input_ids.shape == (BATCH, max(len(s) for s in batch))
    a, b = (mask_tokens(news_batches[0], tokenizer, 0.15, torch.Generator().manual_seed(3)) for _ in range(2))
    assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in MaskedBatch.__dataclass_fields__)


def test_tokens_on_random_and_roberta_batches(tokenizer, roberta_tokenizer, news_docs):
    rng = random.Random(1)
    for trial in range(8):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(2, 8))]
        batch = [[101] + [rng.randint(1000, 1040) for _ in range(n)] + [102] for n in lengths]
        ratio = rng.choice([0.15, 0.5, 1.0])
        mb = mask_tokens(batch, tokenizer, ratio, torch.Generator().manual_seed(trial))
        check_tokens(mb, batch, tokenizer, ratio)
    batch = _batches(news_docs[:10], roberta_tokenizer, 1)[0]
    check_tokens(
        mask_tokens(batch, roberta_tokenizer, 0.15, torch.Generator().manual_seed(0)), batch, roberta_tokenizer, 0.15
    )
