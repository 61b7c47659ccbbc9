"""Brute-force references: NPM inference (the paper's formulas with Python loops) and duplicate articles."""

import math
import re
import unicodedata
from collections import defaultdict

import numpy as np

from npmcore.snapshots import read_blocks
from npmcore.vocab import FUNCTION_WORDS, content_words_of

QUERIES = [  # real sentences of the shared news articles with one word masked
    "The Prime Minister, John [MASK], has revealed he will go to Indonesia for a summit meeting.",
    "The Federal Government says it is considering [MASK] from the Australian Council of Trade Unions.",
    "Firefighters are battling a bushfire near [MASK].",
    "Police say the man was [MASK] after the incident.",
]


def corpus_blocks(corpus_url: str) -> list[list[int]]:
    """Content token ids of every block (the special tokens around each block dropped)."""
    rows = [ids for t in read_blocks(corpus_url, ["token_ids"]) for ids in t.column("token_ids").to_pylist()]
    return [ids[1:-1] for ids in rows]  # MiniLM: [CLS] … [SEP]


def is_stopword(tokenizer, word: list[int]) -> bool:
    """A word (its token ids) is a function word or punctuation, read from its decoded text."""
    text = tokenizer.decode(word).strip().lower()
    return text in FUNCTION_WORDS or not any(c.isalnum() for c in text)


def corpus_texts(corpus_url: str) -> list[str]:
    """Every block's passage as the encoder reads it ("{title}. {text}")."""
    from npmcore.corpus.blocks import encoder_input

    return [
        encoder_input(title, text)
        for t in read_blocks(corpus_url, ["title", "text"])
        for title, text in zip(t.column("title").to_pylist(), t.column("text").to_pylist(), strict=True)
    ]


def _is_edge(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS" or unicodedata.category(char) == "Cf"


def cuts_a_word(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` starts or ends inside a word of the text: the characters right before
    it, or right after it (combining marks and a possessive "'s" aside), up to a space, slash, colon or en
    or em dash, are not all punctuation or symbols."""
    while end < len(text) and unicodedata.category(text[end])[0] == "M":
        end += 1
    before = re.search(r"[^\s/:–—]*$", text[:start]).group()
    after = re.match(r"[^\s/:–—]*", text[end:]).group()
    if re.match(r"['’]s", after) and all(_is_edge(c) for c in after[2:]) and text[end - 1].isalnum():
        after = after[2:]  # a possessive ends the word before it: "Haraway's"
    return not all(_is_edge(c) for c in before + after)


def brute_force(
    blocks, vectors, block_numbers, q_start, q_end, tables, k, l_max, tau, tokenizer, avoid=frozenset(), texts=None
):
    """Phrase -> normalised score, by enumerating spans around the exact top-k tokens of
    ``block_numbers`` whose first and last words are content words (and whose decoded text holds
    none of the content words ``avoid``) and that cut no word of their passage (``texts``: every
    block's passage, :func:`corpus_texts`)."""
    chars = {b: tokenizer(texts[b], return_offsets_mapping=True)["offset_mapping"][1:-1] for b in block_numbers}
    where = [(b, p) for b in block_numbers for p in range(len(blocks[b]))]
    V = np.concatenate([vectors[b] for b in block_numbers]).astype(np.float64)
    d = V.shape[1]
    s_sim, e_sim = V @ q_start / math.sqrt(d), V @ q_end / math.sqrt(d)
    starts, ends = np.argsort(-s_sim)[:k], np.argsort(-e_sim)[:k]
    index_of = {bp: i for i, bp in enumerate(where)}

    def word_start(b, p):
        toks = blocks[b]
        return p == 0 or tables.word_start[toks[p]] or tables.boundary[toks[p - 1]]

    def whole(b, first, last):
        toks = blocks[b]
        if any(tables.special[toks[i]] for i in range(first, last + 1)):
            return False
        return word_start(b, first) and (last + 1 == len(toks) or word_start(b, last + 1))

    def surface(b, first, last):
        return not cuts_a_word(texts[b], chars[b][first][0], chars[b][last][1])

    def content(b, first, last):
        toks = blocks[b]
        starts = [p for p in range(first, last + 1) if word_start(b, p)] + [last + 1]
        return not is_stopword(tokenizer, toks[first : starts[1]]) and not is_stopword(
            tokenizer, toks[starts[-2] : last + 1]
        )

    positions = set()
    for i in starts:
        b, p = where[i]
        for j in range(l_max):
            if p + j < len(blocks[b]) and whole(b, p, p + j) and content(b, p, p + j) and surface(b, p, p + j):
                positions.add((b, p, p + j))
    for i in ends:
        b, p = where[i]
        for j in range(l_max):
            if p - j >= 0 and whole(b, p - j, p) and content(b, p - j, p) and surface(b, p - j, p):
                positions.add((b, p - j, p))
    scores = defaultdict(float)
    for b, first, last in positions:
        phrase = tuple(blocks[b][first : last + 1])
        if not avoid.isdisjoint(content_words_of(tokenizer.decode(phrase))):
            continue
        scores[phrase] += math.exp(s_sim[index_of[(b, first)]] / tau) + math.exp(e_sim[index_of[(b, last)]] / tau)
    total = sum(scores.values())
    return sorted(((p, s / total) for p, s in scores.items()), key=lambda item: -item[1])


def assert_same_answers(answers, reference, n=5):
    assert [a.token_ids for a in answers[:n]] == [p for p, _ in reference[:n]]
    np.testing.assert_allclose([a.score for a in answers[:n]], [s for _, s in reference[:n]], atol=1e-4)


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def unique_articles(pages: list, kept: list | None = None) -> list:
    """The pages (with ``url`` and ``text``) a first-seen-wins pass keeps after ``kept``: not those with
    the URL or the text (whitespace collapsed) of a page kept before, nor those whose exact Jaccard
    similarity to one is at least the threshold (word shingles of :mod:`npmcore.corpus.dedup`)."""
    from npmcore.corpus.dedup import THRESHOLD, shingles

    kept = list(kept or [])
    new = []
    for page in pages:
        if any(
            page.url == k.url
            or " ".join(page.text.split()) == " ".join(k.text.split())
            or jaccard(shingles(page.text), shingles(k.text)) >= THRESHOLD
            for k in kept
        ):
            continue
        kept.append(page)
        new.append(page)
    return new


def evidence_features(blocks, offsets, span, query_ids, mask_id, tables, idf, run, window, near, numeric):
    """The position features of evidence scoring but NPM's similarities (left_share, right_share, near,
    sentence, window; cuts_number) of one span (global first, last), by walking the passage token by
    token (npmcore.answer.ranking's rules); ``numeric``: (V,) bool, the token is a date or a number."""
    first, last = span
    b = int(np.searchsorted(offsets, first, side="right") - 1)
    toks = blocks[b]
    p0, p1 = first - offsets[b], last - offsets[b]
    masks = [i for i, t in enumerate(query_ids) if t == mask_id]
    before = [t for t in query_ids[: masks[0]] if not tables.special[t]]
    after = [t for t in query_ids[masks[-1] + 1 :] if not tables.special[t]]

    def share(passage_side, query_side):
        query_side = query_side[:run]
        matched = 0.0
        for seen, wanted in zip(passage_side, query_side):
            if seen != wanted:
                break
            matched += idf[wanted]
        return matched / (sum(idf[t] for t in query_side) + 1.0)

    left = [toks[p0 - d] for d in range(1, run + 1) if p0 - d >= 0]
    right = [toks[p1 + d] for d in range(1, run + 1) if p1 + d < len(toks)]

    def continued(end, side):  # the date or number at the span's last token goes on after it
        after = side[:2]
        return bool(numeric[end]) and bool(
            after and (numeric[after[0]] or (tables.boundary[after[0]] and len(after) > 1 and numeric[after[1]]))
        )

    cuts = float(continued(toks[p1], right))
    words = {t for t in before + after if not tables.stop[t]}
    total = sum(idf[t] for t in words)
    out = [share(left, before[::-1]), share(right, after), 0.0, 0.0, 0.0]
    if not words or total <= 0:
        return out + [cuts]
    for t in words:
        distances, in_sentence = [], False
        for d in range(1, window + 1):
            for pos, inside in ((p0 - d, range(1, d + 1)), (p1 + d, range(1, d))):
                if not 0 <= pos < len(toks) or toks[pos] != t:
                    continue
                distances.append(d)
                step = -1 if pos < p0 else 1
                base = p0 if pos < p0 else p1
                if not any(tables.sentence_end[toks[base + step * k]] for k in inside):
                    in_sentence = True
        if distances:
            out[2] += idf[t] * math.exp(-(min(distances) - 1) / near) / total
            out[3] += idf[t] * in_sentence / total
            out[4] += idf[t] / total
    return out + [cuts]
