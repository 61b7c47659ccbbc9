"""Where NPM's candidate tokens come from, in an index snapshot: what is searched, not how it is scored.

* kNN search (:meth:`Retrieval.search`): the FAISS index's top k x rerank tokens of each query vector, re-scored
  with the datastore's exact vectors (:func:`npmcore.index.faiss_index.rescore`); refused where the index's vectors
  are not the encoder's, or it holds BM25 alone (:func:`foreign_encoder`).
* BM25-restricted search (:meth:`Retrieval.restricted`): every content token of a query's top BM25 passages with
  its exact vector: the datastore's (:func:`stored_vectors`), else encoded now by the passage encoder, once per
  process (:mod:`npmcore.answer.passage_vectors`).

Imports the index stage (FAISS, BM25), the snapshots and the encoder at the top, and of the answer stage the
passage cache, the corpus of phrases and the evidence reader.
"""

import logging
from pathlib import Path

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from npmcore.answer.evidence import EvidenceReader
from npmcore.answer.passage_vectors import PASSAGES, passage_key
from npmcore.answer.phrases import Corpus
from npmcore.encoder import encode, encoder_fingerprint, fast_forward, special_frame, tokenizer_fingerprint
from npmcore.forward import Precision
from npmcore.index import bm25
from npmcore.index.faiss_index import read_index, reconstruct, rescore, search, set_search_params, to_gpu
from npmcore.mask import MASK
from npmcore.snapshots import DatastoreRows, IndexSnapshot, open_corpus
from npmcore.storage import SnapshotError

log = logging.getLogger(__name__)


class Unsupported(ValueError):
    """The index cannot answer this kind of query (kNN search of an index of BM25 alone, or with another
    encoder than its vectors'): the message says why and what works."""


class Retrieval:
    """An index snapshot's searchable parts: its FAISS index (None: BM25 alone), its datastore's exact vectors
    (None: unreadable, or another encoder's) and its BM25 passages, whose vectors ``passage_model`` computes in
    ``precision`` where the datastore's cannot be read.

    Args:
        snapshot: the index snapshot; ``folder`` its local copy.
        corpus: its token ids and block offsets; ``evidence`` the reader of its passages' texts.
        knn_refused: why kNN search is refused (:func:`foreign_encoder`); None: it works.
    """

    def __init__(
        self,
        snapshot: IndexSnapshot,
        folder: Path,
        corpus: Corpus,
        evidence: EvidenceReader,
        tokenizer: PreTrainedTokenizerFast,
        passage_model: PreTrainedModel,
        passage_fingerprint: str,
        precision: Precision,
        knn_refused: str | None,
    ):
        self.snapshot = snapshot
        self.url = snapshot.url
        self.manifest = snapshot.manifest
        self.knn_refused = knn_refused
        self.stored = None if knn_refused else stored_vectors(snapshot)
        # an index of BM25 alone has no FAISS index: its passages are always encoded per query
        self.index = read_index(str(folder / "index.faiss")) if snapshot.vectors else None
        if self.index is not None:
            set_search_params(self.index, self.manifest.config["search_params"])
        self.search_index = to_gpu(self.index) if self.index is not None else None
        self.corpus = corpus
        self.evidence = evidence
        self.tokenizer = tokenizer
        self.passage_model = passage_model
        self.passage_fingerprint = passage_fingerprint
        self.precision = precision
        self.dim = int(self.manifest.config["dim"])
        self.bm25_dir = folder / "bm25" if self.manifest.config["bm25"] else None
        self._bm25: bm25.BM25Searcher | None = None
        self._frame = special_frame(tokenizer)

    def refused(self, restrict: bool) -> str | None:
        """Why the index cannot answer queries restricted to its top BM25 passages (``restrict``), or kNN
        queries; None: it can."""
        if not restrict:
            return self.knn_refused
        if self.bm25_dir is None:
            return f"index {self.url} was built without BM25: query it with restrict=false (kNN search)"
        return None

    # --- kNN search ---------------------------------------------------------------------

    def search(
        self, q: np.ndarray, k: int, rerank: int | None = None, search_params: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (sims, global ids) of scaled query vectors (n, d): the index's top k x ``rerank`` re-scored with
        the datastore's exact vectors (None: the index's default; 1, or no readable datastore: the index's own
        scores), searched with ``search_params`` (None: the index's)."""
        if self.knn_refused:
            raise Unsupported(self.knn_refused)
        rerank = rerank if rerank is not None else self.manifest.config.get("rerank", 1)
        if rerank < 1:
            raise ValueError(f"rerank must be >= 1, got {rerank}")
        if self.stored is None:
            rerank = 1
        if search_params is not None:
            set_search_params(self.search_index, search_params)
        try:
            sims, found = search(self.search_index, q, k * rerank)
        finally:
            if search_params is not None:
                set_search_params(self.search_index, self.manifest.config["search_params"])
        if rerank == 1:
            return sims, found
        return rescore(q, found, self.stored.gather, min(k, self.index.ntotal))

    def token_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Vectors (n, d) of global tokens: exact from the datastore when it can be read, else
        decoded from the index's codes."""
        if self.stored is not None:
            return self.stored.gather(ids)
        if self.index is None:
            raise Unsupported(self.knn_refused)
        return reconstruct(self.index, ids)

    # --- BM25 passages ------------------------------------------------------------------

    def bm25_blocks(self, query: str, n: int) -> list[int]:
        """Global block numbers of the top-``n`` BM25 passages for a query (its mask removed)."""
        if (refused := self.refused(restrict=True)) is not None:
            raise Unsupported(refused)
        if self._bm25 is None:
            self._bm25 = bm25.BM25Searcher(str(self.bm25_dir))
        return [int(hit.block_id) for hit in self._bm25.search(query.replace(MASK, " "), n)]

    def passages(self, query: str, n: int) -> list[str]:
        """The texts of the top-``n`` BM25 passages of a query, as the encoder reads them (title first)."""
        return [self.evidence.passage(block).text for block in self.bm25_blocks(query, n)]

    def restricted(
        self, queries: list[str], passages: int, blocks: list[list[int]] | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query: the sorted global ids (n,) and exact vectors (n, d) of every content
        token of its top BM25 passages, or of the ``blocks`` given for it (:meth:`block_vectors`; each passage read or
        encoded once)."""
        searched = blocks if blocks is not None else [self.bm25_blocks(query, passages) for query in queries]
        chosen = [sorted(set(mine)) for mine in searched]
        unique = sorted(set().union(*chosen))
        vectors = dict(zip(unique, self.block_vectors(unique), strict=True))
        out = []
        for blocks in chosen:
            ids = np.concatenate(
                [np.arange(self.corpus.offsets[b], self.corpus.offsets[b + 1]) for b in blocks]
                or [np.empty(0, dtype=np.int64)]
            )
            out.append(
                (ids, np.concatenate([vectors[b] for b in blocks] or [np.empty((0, self.dim), dtype=np.float32)]))
            )
        return out

    def block_vectors(self, blocks: list[int]) -> list[np.ndarray]:
        """Exact vectors (n_b, d) of the content tokens of each block: the datastore's when it
        holds this encoder's vectors and can be read, else encoded now."""
        if self.stored is not None:
            return [self.stored.rows(int(self.corpus.offsets[b]), int(self.corpus.offsets[b + 1])) for b in blocks]
        keys = [passage_key(self.passage_fingerprint, self.precision, self.corpus.block_tokens(b)) for b in blocks]
        found = [PASSAGES.get(key) for key in keys]  # encoded before, by any NPM of this process
        missing = [n for n, vectors in enumerate(found) if vectors is None]
        before, after = self._frame
        framed = self.tokenizer(self.tokenizer.mask_token)["input_ids"]  # the special tokens around a text
        sequences = [
            framed[:before]
            + self.corpus.block_tokens(blocks[n]).astype(np.int64).tolist()
            + framed[len(framed) - after :]
            for n in missing
        ]
        if not sequences:
            return found
        forward = fast_forward(self.passage_model, self.precision)
        for n, hidden in zip(
            missing, encode(self.passage_model, self.tokenizer, sequences, forward=forward), strict=True
        ):
            found[n] = hidden[before : len(hidden) - after]
            PASSAGES.put(keys[n], found[n])
        return found

    def close(self) -> None:
        """Closes the BM25 searcher, if one was opened (its Lucene reader)."""
        if self._bm25 is not None:
            self._bm25.close()


def stored_vectors(index: IndexSnapshot) -> DatastoreRows | None:
    """The index's datastore, for the exact vectors of BM25 passages; None (and a warning) when
    it cannot be read, e.g. deleted after the index was built: passages are then encoded again."""
    try:
        return DatastoreRows(index.datastore)
    except SnapshotError as e:
        log.warning("BM25-restricted queries will encode their passages again: %s", e)
        return None


def foreign_encoder(
    index: IndexSnapshot, encoder: str | None, tokenizer: PreTrainedTokenizerFast, model: PreTrainedModel
) -> str | None:
    """Why the encoder cannot search the index's vectors (None when it can: the same weights).
    Another tokenizer is refused outright; another encoder of the same tokenizer, or an index of
    BM25 alone, answers BM25-restricted queries only, since those encode their passages again."""
    source = encoder or index.encoder or "default"
    if tokenizer_fingerprint(tokenizer) != open_corpus(index.corpus).tokenizer:
        raise ValueError(
            f"index {index.url} holds tokens of another tokenizer than encoder {source!r}'s: "
            "build an index with this encoder (npmcore index --model …)"
        )
    if not index.vectors:
        return (
            f"index {index.url} holds BM25 alone (no token vectors): kNN search (npm-no-bm25, closed-set tasks, "
            "the kNN-LM) needs an index with vectors (npmcore index without --bm25-only); BM25-restricted queries "
            "work"
        )
    fingerprint = encoder_fingerprint(model)
    if fingerprint == index.encoder_fingerprint:
        return None
    return (
        f"index {index.url} was built with encoder {index.manifest.config['encoder']!r} "
        f"(weights {index.encoder_fingerprint}), but encoder {source!r} has weights {fingerprint}: kNN search "
        "needs an index built with this encoder (npmcore index --model …); BM25-restricted queries work with "
        "any encoder of the same tokenizer"
    )
