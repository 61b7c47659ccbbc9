"""Duplicate articles of a crawl: the same URL, the same text, or nearly the same text.

The first article seen wins: a later one is dropped when its URL or its text (whitespace
collapsed) is that of an article kept before, or when its estimated Jaccard similarity to
one is at least ``THRESHOLD`` (word 5-gram shingles, MinHash signatures of ``NUM_PERM``
permutations and LSH candidates from ``datasketch``; each candidate is checked on the
signatures). Only kept articles are remembered, so ingesting two months at once keeps the
same articles as ingesting the first and then extending its corpus with the second.

The driver holds the state: about 6 KB per kept article (its URL, text hash and signature, and
datasketch's LSH tables: 5.4 KB of them measured with tracemalloc), 6 GB for a million articles.

datasketch is imported where it is used: a second of every ingest's import (each Dask worker's too) that only
crawls need.
"""

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import fsspec
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from npmcore.snapshots import open_corpus, read_shard
from npmcore.storage import join

SHINGLE_WORDS = 5  # words per shingle
NUM_PERM = 128  # MinHash permutations (signature length)
SEED = 1  # of the permutations: stored signatures are compared only with signatures of the same seed and scheme
SCHEME = "affine32"  # datasketch's hashing scheme: 32-bit hash values
THRESHOLD = 0.8  # estimated Jaccard similarity from which two texts are near-duplicates
BANDS = (16, 8)  # LSH bands x rows: a pair at 0.8 is a candidate with p = 0.95, at 0.9 with p > 0.9999
CONFIG = {"shingle_words": SHINGLE_WORDS, "num_perm": NUM_PERM, "seed": SEED, "scheme": SCHEME, "threshold": THRESHOLD}

Verdict = Literal["kept", "duplicate_url", "duplicate_text", "near_duplicate"]
VERDICTS: tuple[Verdict, ...] = ("kept", "duplicate_url", "duplicate_text", "near_duplicate")


def text_hash(text: str) -> str:
    """sha256 of ``text`` with its whitespace collapsed: the exact-duplicate key."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


def shingles(text: str) -> set[bytes]:
    """The word ``SHINGLE_WORDS``-grams of ``text`` (lower case); a shorter text is one shingle."""
    words = text.lower().split()
    n = max(1, len(words) - SHINGLE_WORDS + 1)
    return {" ".join(words[i : i + SHINGLE_WORDS]).encode() for i in range(n)}


def signature(text: str) -> np.ndarray:
    """MinHash signature of ``text``'s shingles: uint32 (NUM_PERM,)."""
    from datasketch import MinHash

    minhash = MinHash(num_perm=NUM_PERM, seed=SEED, scheme=SCHEME)
    minhash.update_batch(list(shingles(text)))
    return minhash.hashvalues.astype(np.uint32)


@dataclass(frozen=True)
class ArticleKey:
    """What deduplication needs of an article."""

    doc_id: str
    url: str
    text_hash: str
    signature: np.ndarray  # uint32 (NUM_PERM,)


class Deduplicator:
    """Decides, article after article, which ones are kept (see the module docstring)."""

    def __init__(self) -> None:
        from datasketch import MinHashLSH

        self.urls: set[str] = set()
        self.texts: set[str] = set()
        self.signatures: list[np.ndarray] = []
        self.lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, params=BANDS)

    def add(self, key: ArticleKey) -> Verdict:
        """The verdict on the next article; a kept one is remembered."""
        if key.url in self.urls:
            return "duplicate_url"
        if key.text_hash in self.texts:
            return "duplicate_text"
        from datasketch import MinHash

        minhash = MinHash(seed=SEED, hashvalues=key.signature, scheme=SCHEME)
        for candidate in self.lsh.query(minhash):
            if np.mean(self.signatures[candidate] == key.signature) >= THRESHOLD:
                return "near_duplicate"
        self.urls.add(key.url)
        self.texts.add(key.text_hash)
        self.lsh.insert(len(self.signatures), minhash)
        self.signatures.append(key.signature)
        return "kept"


def corpus_articles(url: str) -> Iterator[ArticleKey]:
    """The keys of the crawled articles of a corpus snapshot, in shard order (read from the first
    block of each; shards of other formats have no ``minhash`` column and hold none)."""
    fs, root = fsspec.core.url_to_fs(url)
    columns = ["doc_id", "url", "source_hash", "minhash"]
    for path, entry in open_corpus(url).shards:
        if "minhash" not in pq.read_schema(join(root, path), filesystem=fs).names:
            continue
        table = read_shard(url, path, entry, columns)
        table = table.filter(pc.is_valid(table["minhash"]))
        for doc_id, page, digest, minhash in zip(*(table[c].to_pylist() for c in columns), strict=True):
            yield ArticleKey(doc_id, page, digest, np.asarray(minhash, dtype=np.uint32))


def find_duplicates(
    articles: Iterable[tuple[int, ArticleKey]], extends: str | None
) -> tuple[dict[int, frozenset[str]], dict[str, int]]:
    """Which of ``articles`` ((shard index, key), in shard and record order) are duplicates, after
    the articles of the corpus snapshot ``extends``: the doc ids to drop per shard, and the count of
    each verdict (``articles`` kept, ``duplicate_urls``, ``duplicate_texts``, ``near_duplicates``)."""
    dedup = Deduplicator()
    for key in corpus_articles(extends) if extends else ():
        dedup.add(key)
    verdicts = dict.fromkeys(VERDICTS, 0)
    drops: dict[int, set[str]] = {}
    for shard, key in articles:
        verdict = dedup.add(key)
        verdicts[verdict] += 1
        if verdict != "kept":
            drops.setdefault(shard, set()).add(key.doc_id)
    counts = {"articles": verdicts["kept"], **{f"{v}s": verdicts[v] for v in VERDICTS[1:]}}
    return {shard: frozenset(ids) for shard, ids in drops.items()}, counts
