"""Reading sets: queries with their answers, in the setting NPM answers in.

Query-side training (:mod:`npmcore.adapt.query_train`) teaches a query encoder to pick the answer out of
the passages BM25 brings for its query, passages it did not write. Its data are
:class:`QueryExample` s, from one of two sources:

* **cloze** (zero-shot: corpus text alone, never a task file): :func:`cloze_examples` draws
  sentences of a corpus snapshot and masks one name, date or number in each (the phrases of
  :func:`npmcore.evaluation.verbatim.maskable`); the answer is the phrase. Its own document is never
  searched: the answer must be read where another article writes it, in that article's words.
* **a query log** (adapted): :func:`read_examples`, a user's jsonl of ``{"query", "answers"}``.

:func:`reading_set` puts one example in the setting it answers in: its top BM25 passages of an
index (its own document left out), every content token of them a candidate, and the candidates
where a gold answer starts and ends as whole words (exact match after
:func:`npmcore.evaluation.metrics.normalize_answer`). An example whose answer none of its passages
writes cannot be learned from and gets None.
"""

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from npmcore.answer.inference import NPM
from npmcore.answer.phrases import content_spans
from npmcore.evaluation.metrics import exact_match
from npmcore.evaluation.verbatim import maskable, sentences
from npmcore.mask import MASK
from npmcore.snapshots import read_blocks

_ARTICLE = re.compile(r"^(?:the|an?)\s+", re.IGNORECASE)
KINDS = ("name", "date", "number")  # what cloze examples mask: the kinds knowledge questions ask for
Unseen = Literal["document", "block"]  # what of a cloze query's source is never searched
SEARCHED_EXTRA = 10  # BM25 passages asked for beyond ``passages``: those of the example's own source are dropped


@dataclass(frozen=True)
class QueryExample:
    query: str  # one [MASK]
    answers: tuple[str, ...]
    source: str | None = None  # the block the query was drawn from ("{doc_id}#{n}"); None: a user's query


@dataclass(frozen=True)
class ReadingSet:
    """One example's candidates: the content tokens of its top passages, in their order."""

    query: str
    blocks: tuple[int, ...]  # global block numbers of the passages searched
    ids: np.ndarray  # (n,) global token ids of the candidates
    starts: np.ndarray  # (n,) bool: a gold answer starts here (a whole word)
    ends: np.ndarray  # (n,) bool: a gold answer ends here


def cloze_examples(corpus: str, count: int, seed: int) -> list[QueryExample]:
    """A seeded draw of ``count`` cloze examples from a corpus snapshot: blocks in a seeded order, at most one
    example a sentence, masking a phrase that occurs once in its sentence and shares no content word with the
    rest of it (:func:`npmcore.evaluation.verbatim.maskable`). The kinds of :data:`KINDS` come in equal shares
    where the corpus has enough of each, the most wanted kind first; what one lacks, the others fill.

    Raises:
        ValueError: the corpus holds fewer maskable sentences than ``count``.
    """
    rows = [
        row
        for table in read_blocks(corpus, ["block_id", "text"])
        for row in zip(table.column("block_id").to_pylist(), table.column("text").to_pylist(), strict=True)
    ]
    rng = random.Random(seed)
    rng.shuffle(rows)
    wanted = {kind: count // len(KINDS) + (n < count % len(KINDS)) for n, kind in enumerate(KINDS)}
    drawn: list[QueryExample] = []
    used: set[str] = set()
    for shares in (True, False):  # the kinds in equal shares, then whatever is left
        for block_id, text in rows:
            for sentence in sentences(text):
                phrases = [p for p in maskable(sentence) if p[0] in KINDS and (wanted[p[0]] > 0 or not shares)]
                if not phrases or sentence in used:
                    continue
                most = max(wanted[kind] for kind, _, _ in phrases)
                kind, lo, hi = rng.choice([p for p in phrases if wanted[p[0]] == most])
                wanted[kind] -= 1
                used.add(sentence)
                drawn.append(QueryExample(sentence[:lo] + MASK + sentence[hi:], (sentence[lo:hi],), block_id))
                if len(drawn) == count:
                    return drawn
    raise ValueError(f"corpus {corpus} holds {len(drawn)} maskable sentences of the kinds asked for, {count} wanted")


def read_examples(path: str | Path) -> list[QueryExample]:
    """A user's queries with their answers: a jsonl file of ``{"query": "… [MASK] …", "answers": [...]}``.

    Raises:
        ValueError: a line that is not such an object (the message names the file and line).
    """
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                query, answers = row["query"], row["answers"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f'{path}:{n}: not a {{"query", "answers"}} object ({e})') from e
            if not isinstance(query, str) or query.count(MASK) != 1:
                raise ValueError(f"{path}:{n}: the query needs exactly one {MASK}")
            if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a for a in answers):
                raise ValueError(f"{path}:{n}: answers must be a non-empty list of strings")
            out.append(QueryExample(query, tuple(answers)))
    if not out:
        raise ValueError(f"{path}: no examples")
    return out


def reading_set(npm: NPM, example: QueryExample, passages: int, unseen: Unseen = "document") -> ReadingSet | None:
    """The example's top ``passages`` BM25 passages of ``npm``'s index (none of its own document, or with
    ``unseen="block"`` none of its own block: the rest of its article says other things in other words), their
    content tokens as candidates and, among them, where a gold answer starts and ends: the spans NPM could
    answer (whole words, a content word first and last: :func:`npmcore.answer.phrases.content_spans`) whose text is
    a gold answer (:func:`npmcore.evaluation.metrics.exact_match`). None when no passage writes one."""
    found = npm.retrieval.bm25_blocks(example.query, passages + (SEARCHED_EXTRA if example.source else 0))
    blocks = [b for b in found if example.source is None or not same(npm.evidence.block_id(b), example.source, unseen)]
    blocks = blocks[:passages]
    offsets = npm.corpus.offsets
    ids = np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in blocks] or [np.empty(0, dtype=np.int64)])
    spans = np.array([span for block in blocks for span in answer_spans(npm, block, example.answers)], dtype=np.int64)
    spans = content_spans(npm.corpus, spans.reshape(-1, 2))
    if len(spans) == 0:
        return None
    return ReadingSet(example.query, tuple(blocks), ids, np.isin(ids, spans[:, 0]), np.isin(ids, spans[:, 1]))


def answer_spans(npm: NPM, block: int, answers: tuple[str, ...]) -> Iterator[tuple[int, int]]:
    """(first, last) global token ids of every span of whole words in ``block`` whose text is a gold answer
    (found where an answer, or an answer without its leading article, is written)."""
    passage = npm.evidence.passage(block)
    text, lo = passage.text, int(npm.corpus.offsets[block])
    starts = {c[0]: n for n, c in enumerate(passage.token_chars) if passage.starts_word[n]}
    ends = {c[1]: n for n, c in enumerate(passage.token_chars) if passage.ends_word[n]}
    forms = {form for a in answers for form in (a.strip(), _ARTICLE.sub("", a.strip())) if form}
    for form in forms:
        for match in re.finditer(re.escape(form), text, flags=re.IGNORECASE):
            first, last = starts.get(match.start()), ends.get(match.end())
            if first is not None and last is not None and exact_match(match.group(), answers):
                yield lo + first, lo + last


def same(block_id: str, source: str, unseen: Unseen) -> bool:
    """Whether a block is the source's own (``unseen="block"``) or of its document (block ids ``{doc_id}#{n}``)."""
    return block_id == source if unseen == "block" else block_id.rsplit("#", 1)[0] == source.rsplit("#", 1)[0]
