"""Evidence: the passages an answer comes from, read back from the corpus snapshot.

An index knows every token by its global id (``Corpus`` of :mod:`npmcore.answer.phrases`); the
block texts stay in the corpus snapshot. :class:`EvidenceReader` reads a block's title and
text (a shard at a time, cached), tokenizes the passage again with character offsets and
turns an :class:`Evidence` (global token ids) into an :class:`EvidenceSpan`: the passage
as the encoder saw it, the answer's character span in it, and where the passage comes from
(:class:`Citation`: its source, the dump's date, the article's title and address).
"""

import functools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedTokenizerFast

from npmcore.answer.phrases import Corpus
from npmcore.corpus.blocks import encoder_input
from npmcore.corpus.readers import page_url
from npmcore.encoder import special_frame
from npmcore.snapshots import IndexSnapshot, open_corpus, read_shard
from npmcore.sources import Citation


@dataclass(frozen=True)
class Evidence:
    block: int  # global block number
    first: int  # global id of the span's first token
    last: int  # and of its last token (inclusive)
    score: float  # the position's normalised share of the query's candidate scores


PASSAGE_CACHE = 4096  # passages kept tokenized (a few kB each)


@dataclass(frozen=True)
class Passage:
    block_id: str  # "{doc_id}#{block_index}"
    title: str
    citation: Citation
    text: str  # the passage as the encoder saw it: "{title}. {block text}"
    token_chars: list[tuple[int, int]]  # character span in ``text`` of each content token (combining marks after it in)
    starts_word: np.ndarray  # (tokens,) bool: the token starts a word of the text (:func:`word_edges`)
    ends_word: np.ndarray  # (tokens,) bool: the token ends one


# a word: a run of characters other than spaces and the marks that join two words without a space:
# a slash ("2005/6"), a colon ("8.4:1"), an en or em dash ("1942–1945")
_WORD = re.compile(r"[^\s/:\u2013\u2014]+")
_POSSESSIVE = re.compile(r"\w['\u2019]s$")


def _edge(char: str) -> bool:
    """A character a word's core does not start or end with: punctuation, a symbol, a format character
    (direction marks)."""
    category = unicodedata.category(char)
    return category[0] in "PS" or category == "Cf"


def word_edges(text: str, token_chars: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per token, whether it starts and whether it ends the core of a word of ``text``: a run of
    characters between spaces, slashes, colons and en or em dashes, less the punctuation, symbols and
    format characters at its ends ("(Paris," has the core "Paris"), and ending before a possessive too
    ("Haraway" of "Haraway's"). An answer starts and ends at such edges: it never cuts "13,000",
    "U-boats" or "阿難" (but "1942" of "1942–1945" is a word)."""
    starts, ends = set(), set()
    for word in _WORD.finditer(text):
        lo, hi = word.start(), word.end()
        while lo < hi and _edge(text[lo]):
            lo += 1
        while hi > lo and _edge(text[hi - 1]):
            hi -= 1
        if _POSSESSIVE.search(text, lo, hi):  # "Haraway's": the name ends before its possessive
            ends.add(hi - 2)
        if lo < hi:
            starts.add(lo)
            ends.add(hi)
    return (
        np.array([a in starts for a, _ in token_chars], dtype=bool),
        np.array([b in ends for _, b in token_chars], dtype=bool),
    )


def _with_marks(text: str, end: int) -> int:
    """``end`` moved past the combining marks that follow it (a tokenizer that strips accents leaves them
    out of the token before: the virama of "अग्नि", the stress marks of "Анато́лий")."""
    while end < len(text) and unicodedata.category(text[end])[0] == "M":
        end += 1
    return end


@dataclass(frozen=True)
class EvidenceSpan:
    """Where an answer stands: ``text[start:end]`` is its occurrence."""

    block_id: str
    title: str
    text: str  # the passage as the encoder saw it
    start: int
    end: int
    score: float  # the occurrence's normalised share of the query's candidate scores
    source: Citation  # where the passage comes from


class EvidenceReader:
    """Passages of an index snapshot's blocks, read from its corpus snapshot."""

    def __init__(self, index: IndexSnapshot, tokenizer: PreTrainedTokenizerFast, corpus: Corpus):
        self.corpus_url = index.corpus
        snapshot = open_corpus(index.corpus)
        self.shards = snapshot.shards
        holder = {path: source for source in snapshot.sources for path in source.shards}
        self.sources = [holder.get(path) for path, _ in self.shards]  # each shard's source (None: not recorded)
        self.bounds = np.cumsum([0, *index.manifest.config["shard_blocks"]])  # first global block of each shard
        self.tokenizer = tokenizer
        self.corpus = corpus
        self._frame = special_frame(tokenizer)
        self._rows: dict[int, list[tuple[str, str, str, str, str | None]]] = {}
        # answers of a query share passages, and a service sees the same ones again: tokenized once
        self.passage = functools.lru_cache(maxsize=PASSAGE_CACHE)(self._passage)

    def _passage(self, block: int) -> Passage:
        """The block's id, title, source and text, with the character span of each content token."""
        block_id, title, text, _, _ = self._row(block)
        passage = encoder_input(title, text)
        enc = self.tokenizer(passage, return_offsets_mapping=True)
        before, after = self._frame
        chars = [(a, _with_marks(passage, b)) for a, b in enc["offset_mapping"][before : len(enc["input_ids"]) - after]]
        n = int(self.corpus.offsets[block + 1] - self.corpus.offsets[block])
        if len(chars) != n:
            raise ValueError(f"block {block_id}: {len(chars)} tokens when tokenized again, {n} in the index")
        return Passage(block_id, title, self.citation(block), passage, chars, *word_edges(passage, chars))

    def span(self, evidence: Evidence) -> EvidenceSpan:
        """The passage of an evidence and the characters of its span."""
        p = self.passage(evidence.block)
        lo = int(self.corpus.offsets[evidence.block])
        start, end = p.token_chars[evidence.first - lo][0], p.token_chars[evidence.last - lo][1]
        return EvidenceSpan(p.block_id, p.title, p.text, start, end, evidence.score, p.citation)

    def whole_words(self, spans: np.ndarray) -> np.ndarray:
        """(n,) bool: the candidate spans (global first, last) that start and end at the edges of their
        passage's words (:func:`word_edges`)."""
        keep = np.zeros(len(spans), dtype=bool)
        if len(spans) == 0:
            return keep
        blocks = self.corpus.block_of(spans[:, 0])
        for block in np.unique(blocks):
            rows = np.flatnonzero(blocks == block)
            passage, lo = self.passage(int(block)), int(self.corpus.offsets[block])
            keep[rows] = passage.starts_word[spans[rows, 0] - lo] & passage.ends_word[spans[rows, 1] - lo]
        return keep

    def surface(self, evidence: Evidence) -> str:
        """The passage's own characters of an evidence span (not word pieces decoded again:
        "left-wing" and "São Paulo" stay as written)."""
        span = self.span(evidence)
        return span.text[span.start : span.end]

    def block_id(self, block: int) -> str:
        """The block id (``{doc_id}#{n}``) of a global block number."""
        return self._row(block)[0]

    def citation(self, block: int) -> Citation:
        """Where a global block number's passage comes from: its source's name, wiki and dump date (of the
        corpus manifest), the article's title and address (a wiki's page of that title; a crawled article's
        URL)."""
        _, title, _, file, url = self._row(block)
        source = self.sources[self._shard(block)]
        if source is None:  # a corpus made before sources were recorded: the block's file
            return Citation(file, None, None, title, url)
        return Citation(
            source.name,
            source.wiki,
            source.dump_date,
            title,
            url or (page_url(source.wiki, title) if source.wiki else None),
        )

    def _shard(self, block: int) -> int:
        return int(np.searchsorted(self.bounds, block, side="right") - 1)

    def _row(self, block: int) -> tuple[str, str, str, str, str | None]:
        """(block_id, title, text, source file, url or None) of a global block number (its shard read once, then
        cached)."""
        shard = self._shard(block)
        if shard not in self._rows:
            path, entry = self.shards[shard]
            columns = ["block_id", "title", "text", "source"]
            table = read_shard(self.corpus_url, path, entry, columns, optional=("url",))
            urls = table.column("url").to_pylist() if "url" in table.column_names else [None] * table.num_rows
            self._rows[shard] = list(zip(*(table.column(c).to_pylist() for c in columns), urls, strict=True))
        return self._rows[shard][block - int(self.bounds[shard])]
