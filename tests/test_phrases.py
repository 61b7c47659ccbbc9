"""Candidate spans on the shared news index: whole words inside one block."""

import numpy as np

from npmcore.answer.inference import NPM
from npmcore.answer.phrases import candidate_spans, repeating_spans
from npmcore.vocab import content_words_of


def test_spans_are_whole_words_inside_one_block(news_store):
    npm = NPM(news_store.index)
    corpus = npm.corpus
    anchors = np.random.default_rng(0).choice(len(corpus.tokens), 500, replace=False)
    spans = candidate_spans(corpus, anchors, anchors[::-1].copy(), l_max=4)
    pieces = npm.tokenizer.convert_ids_to_tokens(np.asarray(corpus.tokens).tolist())
    assert len(spans) > 300
    for first, last in spans.tolist():
        assert 0 <= last - first < 4
        assert corpus.block_of(np.array([first]))[0] == corpus.block_of(np.array([last]))[0]
        assert not pieces[first].startswith("##")
        assert last + 1 == len(pieces) or last + 1 in corpus.offsets or not pieces[last + 1].startswith("##")
        assert first in anchors or last in anchors
    # a word piece never starts a span, and the word it belongs to is a candidate only whole
    piece = next(i for i in range(1, len(pieces)) if pieces[i].startswith("##") and i not in corpus.offsets)
    assert all(first != piece for first, _ in candidate_spans(corpus, np.array([piece]), np.array([-1]), 10).tolist())


def test_spans_repeating_words_equal_a_check_of_each_spans_decoded_text(news_store):
    npm = NPM(news_store.index)
    corpus, tokenizer = npm.corpus, npm.tokenizer
    anchors = np.random.default_rng(1).choice(len(corpus.tokens), 400, replace=False)
    spans = candidate_spans(corpus, anchors, anchors[::-1].copy(), l_max=10)
    words = content_words_of(tokenizer.decode(corpus.block_tokens(int(corpus.block_of(anchors[:1])[0]))))
    found = repeating_spans(corpus, spans, words, lambda ids: content_words_of(tokenizer.decode(list(ids))))
    reference = [
        not words.isdisjoint(content_words_of(tokenizer.decode(np.asarray(corpus.tokens[a : b + 1]).tolist())))
        for a, b in spans.tolist()
    ]
    assert found.tolist() == reference
    assert 0 < found.sum() < len(spans)
    assert not repeating_spans(corpus, spans, frozenset(), lambda ids: content_words_of(tokenizer.decode(ids))).any()
