"""Block splitting on real documents, checked against brute-force references."""

import itertools

import pytest

from npmcore.corpus.blocks import Block, encoder_input, sentence_starts, split_document
from npmcore.corpus.readers import Document, iter_wiki_pages, read_lines, read_wikiextractor, wiki_documents

MAX_TOKENS = 256


@pytest.fixture(scope="module")
def documents(dump_path, news_path, enwiki_shard) -> list[Document]:
    pages, prefixes = [], None
    for page, prefixes, _ in itertools.islice(iter_wiki_pages(dump_path), 30):
        pages.append(page)
    docs = list(wiki_documents(pages, prefixes, "dump"))
    docs += list(read_lines(open(news_path).read(), "lee", 0))[:100]
    docs += [d for d in read_wikiextractor(open(enwiki_shard).read(), "wiki_00") if d.text][:300]
    return docs


@pytest.fixture(scope="module")
def split(documents, tokenizer) -> list[list[Block]]:
    """Each document's blocks for the MiniLM tokenizer, cut once for the tests that check them."""
    return [split_document(doc, tokenizer, MAX_TOKENS) for doc in documents]


def test_blocks_fit_and_are_exactly_the_encoder_input(documents, split, tokenizer):
    lengths = []
    for doc, blocks in zip(documents, split, strict=True):
        assert [b.block_index for b in blocks] == list(range(len(blocks)))
        assert [b.block_id for b in blocks] == [f"{doc.key}#{i}" for i in range(len(blocks))]
        for b in blocks:
            assert b.token_ids == tokenizer(encoder_input(doc.title, b.text))["input_ids"]
            assert b.token_ids[0] == tokenizer.cls_token_id and b.token_ids[-1] == tokenizer.sep_token_id
            lengths.append(len(b.token_ids))
    assert max(lengths) <= MAX_TOKENS
    assert max(lengths) >= MAX_TOKENS - 8  # long articles fill their blocks


def test_title_tokens_are_the_prefix_before_the_text(documents, split, tokenizer, roberta_tokenizer):
    """title_tokens counts the tokens whose characters lie in "{title}. ", read from the offsets."""
    titled = 0
    for tok, split in ((tokenizer, split), (roberta_tokenizer, None)):
        for i, doc in enumerate(documents[:60]):
            for b in split[i] if split else split_document(doc, tok, MAX_TOKENS):
                enc = tok(encoder_input(doc.title, b.text), return_offsets_mapping=True)
                prefix = len(doc.title) + 2 if doc.title else 0  # "{title}. "
                special = set(tok.all_special_ids)
                expected = sum(
                    s < prefix for (s, _), t in zip(enc["offset_mapping"], enc["input_ids"]) if t not in special
                )
                assert b.title_tokens == expected, (doc.title, b.block_id)
                titled += b.title_tokens > 0
    assert titled > 100


def test_blocks_concatenate_back_to_the_document(documents, split):
    for doc, blocks in zip(documents, split, strict=True):
        assert " ".join(" ".join(b.text for b in blocks).split()) == " ".join(doc.text.split()), doc.title


def test_cuts_fall_on_sentence_starts_unless_a_sentence_is_too_long(documents, split, tokenizer):
    budget = MAX_TOKENS - 2  # special tokens; the title makes real budgets smaller still
    checked = 0
    for doc, blocks in zip(documents, split, strict=True):
        starts = sentence_starts(doc.text)
        cursor = 0
        for block in blocks[1:]:
            offset = doc.text.index(block.text, cursor)
            cursor = offset + 1
            if offset in starts:
                checked += 1
                continue
            # Brute force: the sentence the cut falls in must be longer than any block could hold.
            sentence_start = max(s for s in starts if s <= offset)
            sentence_end = min([s for s in starts if s > offset] + [len(doc.text)])
            n = len(tokenizer(doc.text[sentence_start:sentence_end], add_special_tokens=False)["input_ids"])
            assert n > budget - len(tokenizer(doc.title + ".", add_special_tokens=False)["input_ids"]), (
                doc.title,
                offset,
            )
    assert checked > 100


def test_long_sentence_is_cut_after_whitespace(tokenizer, news_path):
    text = " ".join(open(news_path).read().split()[:2000]).replace(".", ",")  # one ~2,500-token "sentence"
    blocks = split_document(Document("x", "Lee news", text, "lee"), tokenizer, 64)
    assert len(blocks) > 30 and all(len(b.token_ids) <= 64 for b in blocks)
    cursor = 0
    for block in blocks[1:]:
        offset = text.index(block.text, cursor)
        assert text[offset - 1] == " "
        cursor = offset + 1


def test_title_leaving_no_room_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="leaves"):
        split_document(Document("7", "word " * 40, "text", "src"), tokenizer, 32)
