"""Documents to blocks: passages of at most ``max_tokens`` encoder tokens.

A block is a contiguous piece of a document's text, cut at sentence boundaries (which
include paragraph boundaries) where possible and inside a sentence, after whitespace,
only when one sentence alone is too long. The encoder sees ``"{title}. {text}"`` with
the tokenizer's special tokens; ``token_ids`` are exactly those ids, so
``len(token_ids) <= max_tokens`` always holds.
"""

import hashlib
from dataclasses import dataclass

import blingfire
import numpy as np
from transformers import PreTrainedTokenizerFast

from npmcore.corpus.readers import Document


@dataclass(frozen=True)
class Block:
    block_id: str  # "{doc_id}#{block_index}"
    doc_id: str  # the document's key: "{wiki}:{page id}" for a wiki's page (npmcore.corpus.readers.Document.key)
    block_index: int  # position of the block within its document
    title: str
    source: str
    text: str  # a contiguous slice of the document text (whitespace-trimmed)
    token_ids: list[int]  # encoder input ids of encoder_input(title, text), special tokens included
    content_hash: str  # sha256 of title and text: same hash, same token ids for a given tokenizer
    title_tokens: int  # how many of the first non-special token_ids spell the "{title}. " prefix


def encoder_input(title: str, text: str) -> str:
    """The string the encoder sees for a block."""
    return f"{title}. {text}" if title else text


def content_hash(title: str, text: str) -> str:
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()


def sentence_starts(text: str) -> list[int]:
    """Character offsets where sentences (and paragraphs) start, 0 included."""
    starts = {0}
    pos = 0
    for paragraph in text.split("\n"):
        if paragraph.strip():
            _, spans = blingfire.text_to_sentences_and_offsets(paragraph)
            starts.update(pos + s for s, _ in spans)
        pos += len(paragraph) + 1
    return sorted(s for s in starts if s < len(text))


def _units(text: str, tokenizer: PreTrainedTokenizerFast, budget: int) -> list[tuple[int, int, int]]:
    """Cut ``text`` into (char_start, char_end, n_tokens) units of at most ``budget`` tokens.

    Units are sentences; a sentence longer than ``budget`` is cut before a token that
    follows whitespace (at any token if there is none within ``budget``).
    """
    # The backend (Rust) tokenizer gives offsets without the max-length warning of the wrapper.
    enc = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    token_starts = np.array([s for s, _ in enc.offsets], dtype=np.int64)
    after_space = np.array([s > 0 and text[s - 1].isspace() for s in token_starts.tolist()], dtype=bool)
    cuts = np.searchsorted(token_starts, sentence_starts(text))  # token index of each sentence start
    bounds = [int(c) for c in cuts] + [len(token_starts)]
    units = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        while hi - lo > budget:
            words = np.flatnonzero(after_space[lo + 1 : lo + budget + 1]) + lo + 1
            cut = int(words[-1]) if len(words) else lo + budget
            units.append((lo, cut))
            lo = cut
        if hi > lo:
            units.append((lo, hi))
    char_bounds = [int(token_starts[lo]) for lo, _ in units] + [len(text)]
    return [(char_bounds[i], char_bounds[i + 1], hi - lo) for i, (lo, hi) in enumerate(units)]


def _pack(units: list[tuple[int, int, int]], budget: int) -> list[tuple[int, int]]:
    """Greedily join consecutive units into char ranges of at most ``budget`` tokens."""
    ranges, start, used = [], None, 0
    for cs, ce, n in units:
        if start is not None and used + n > budget:
            ranges.append((start, cs))
            start, used = None, 0
        if start is None:
            start = cs
        used += n
        end = ce
    if start is not None:
        ranges.append((start, end))
    return ranges


def _split(
    text: str, title: str, tokenizer: PreTrainedTokenizerFast, max_tokens: int, budget: int
) -> list[tuple[str, list[int]]]:
    """(piece, token ids) in order. A piece whose tokenization overflows (BPE merges can
    differ by a token at a cut) is split again with a budget smaller by the overflow."""
    pieces = []
    for rs, re_ in _pack(_units(text, tokenizer, budget), budget):
        piece = text[rs:re_].strip()
        if not piece:
            continue
        ids = tokenizer(encoder_input(title, piece))["input_ids"]
        if len(ids) <= max_tokens:
            pieces.append((piece, ids))
        else:
            pieces.extend(_split(piece, title, tokenizer, max_tokens, max(1, budget - (len(ids) - max_tokens))))
    return pieces


def split_document(doc: Document, tokenizer: PreTrainedTokenizerFast, max_tokens: int) -> list[Block]:
    """Blocks of one document, in order; their texts concatenate back to ``doc.text``."""
    overhead = len(tokenizer(encoder_input(doc.title, "x"))["input_ids"]) - len(
        tokenizer("x", add_special_tokens=False)["input_ids"]
    )
    if max_tokens - overhead < 16:
        raise ValueError(
            f"document {doc.key!r} of {doc.source}: title {doc.title[:60]!r} leaves "
            f"{max_tokens - overhead} of max_tokens={max_tokens} tokens for text (need >= 16)"
        )
    pieces = _split(doc.text, doc.title, tokenizer, max_tokens, max_tokens - overhead)
    # the prefix's tokens do not depend on the text after it: pre-tokenizers split at the space
    title_tokens = len(tokenizer(f"{doc.title}.", add_special_tokens=False)["input_ids"]) if doc.title else 0
    return [
        Block(
            f"{doc.key}#{i}",
            doc.key,
            i,
            doc.title,
            doc.source,
            piece,
            ids,
            content_hash(doc.title, piece),
            title_tokens,
        )
        for i, (piece, ids) in enumerate(pieces)
    ]
