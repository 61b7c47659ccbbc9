"""Index snapshots that hold BM25 alone, of a corpus (:func:`build_bm25_index`): the blocks' Lucene index and their
token arrays (``tokens.npy``, ``offsets.npy``, ``token_df.npy``) and the table of its articles' openings
(``articles.sqlite``), laid out as an index with vectors holds them (:mod:`npmcore.index.indexer`), factory ``BM25``
and ``vectors`` false in the manifest; no ``index.faiss``, no datastore. The BM25-restricted open-set mode encodes
its top passages per query and needs nothing else, so
evaluating against a large corpus costs a Lucene index, not an embedding of every token. kNN search refuses it.

The id is a digest of the corpus id and the encoder its queries use (:func:`bm25_index_id`): the same corpus and
encoder give the same snapshot. The Lucene index is written as an index with vectors writes it
(:func:`~npmcore.index.bm25_passages.write_bm25`), and the snapshot by the same steps (:mod:`npmcore.index.staging`),
at once: there is nothing to resume.

Imports the shared modules, :mod:`npmcore.index.articles`, :mod:`npmcore.index.bm25_passages`,
:mod:`npmcore.index.indexer` and :mod:`npmcore.index.staging`."""

import logging
import tempfile
import time
from pathlib import Path

import numpy as np

from npmcore.index.articles import ARTICLES, write_articles
from npmcore.index.bm25_passages import write_bm25
from npmcore.index.indexer import store_root
from npmcore.index.staging import publish, upload
from npmcore.rarity import block_frequency
from npmcore.snapshots import INDEX, open_corpus, read_blocks
from npmcore.storage import SnapshotError, SnapshotWriter, existing_snapshot, snapshot_id, snapshot_url

log = logging.getLogger(__name__)
BM25_ONLY = "BM25"  # the factory named by an index that holds BM25 alone (no token vectors)


def corpus_token_arrays(corpus: str, tokenizer) -> tuple[dict[str, np.ndarray], list[int]]:
    """tokens, offsets and token_df (as :func:`~npmcore.index.indexer.token_arrays`) read from the corpus's
    token ids, each block less the tokenizer's special tokens: the same arrays a datastore of the corpus gives;
    and the blocks of each corpus shard."""
    from npmcore.encoder import special_frame

    before, after = special_frame(tokenizer)
    manifest = open_corpus(corpus).manifest
    total = manifest.counts["tokens"] - (before + after) * manifest.counts["blocks"]
    tokens = np.empty(total, dtype=np.uint16 if len(tokenizer) <= 1 << 16 else np.int32)
    lengths, first = [], 0
    for table in read_blocks(corpus, columns=["token_ids"]):
        column = table.column("token_ids").combine_chunks()
        bounds = column.offsets.to_numpy()
        flat = column.values.to_numpy()
        keep = np.ones(len(flat), dtype=bool)
        for k in range(before):
            keep[bounds[:-1] + k] = False
        for k in range(1, after + 1):
            keep[bounds[1:] - k] = False
        content = flat[keep]
        tokens[first : first + len(content)] = content
        lengths.append(np.diff(bounds) - before - after)
        first += len(content)
    if first != total:
        raise SnapshotError(f"corpus {corpus} holds {first} content tokens, its manifest counts {total}")
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths or [np.empty(0, dtype=np.int64)]))])
    offsets = offsets.astype(np.int64)
    arrays = {"tokens": tokens, "offsets": offsets, "token_df": block_frequency(tokens, offsets, len(tokenizer)).df}
    return arrays, [len(n) for n in lengths]


def bm25_index_id(corpus: str, encoder: str | None) -> str:
    """The id of the BM25-only index of a corpus snapshot queried with ``encoder`` (None: the default)."""
    config = {"factory": BM25_ONLY, "vectors": False, "bm25": True, "encoder": encoder or "default"}
    return snapshot_id(INDEX, [{"corpus": open_corpus(corpus).manifest.id}], config)


def build_bm25_index(corpus: str, encoder: str | None = None, previous: str | None = None) -> str:
    """Build (or reuse) the index snapshot of a corpus that holds BM25 alone: the blocks' Lucene
    index and their token arrays, no vectors (see the module's docstring). ``encoder``: the
    encoder its queries use by default (None: the shipped one); its tokenizer must be the
    corpus's. ``previous``: an index whose Lucene index is extended where its corpus is a prefix of this one
    (:func:`~npmcore.index.bm25_passages.write_bm25`). Returns the URL."""
    from npmcore.encoder import encoder_config, load_tokenizer, tokenizer_fingerprint

    snapshot = open_corpus(corpus)
    tokenizer = load_tokenizer(encoder)
    if tokenizer_fingerprint(tokenizer) != snapshot.tokenizer:
        raise ValueError(
            f"corpus {corpus} was tokenized by another tokenizer than encoder {encoder or 'default'!r}'s: "
            "ingest it with this encoder (npmcore ingest --model …)"
        )
    store, snap_id = store_root(corpus), bm25_index_id(corpus, encoder)
    url = snapshot_url(store, INDEX, snap_id)
    if existing_snapshot(url, verify=False):
        log.info("index %s already exists; nothing to do", url)
        return url
    with tempfile.TemporaryDirectory(prefix="npm-bm25-") as tmp, SnapshotWriter(store, INDEX, snap_id) as writer:
        workdir = Path(tmp)
        started = time.perf_counter()
        arrays, shard_blocks = corpus_token_arrays(corpus, tokenizer)
        for key, array in arrays.items():
            np.save(workdir / f"{key}.npy", array)
        count = write_bm25(corpus, workdir / "bm25", previous)
        log.info("BM25 index of %d blocks (no vectors) in %.0f s", count, time.perf_counter() - started)
        write_articles(corpus, workdir / ARTICLES)
        files = upload(writer.staging, workdir, sorted(p for p in workdir.rglob("*") if p.is_file()))
        return publish(
            writer,
            files,
            inputs=[{"corpus": corpus, "corpus_id": snapshot.manifest.id}],
            config={
                "factory": BM25_ONLY,
                "vectors": False,
                "bm25": True,
                "search_params": None,
                "rerank": None,
                "dim": encoder_config(encoder).hidden_size,
                "encoder": encoder or "default",
                "encoder_fingerprint": None,
                "shard_blocks": shard_blocks,
            },
            counts={"tokens": len(arrays["tokens"]), "blocks": len(arrays["offsets"]) - 1},
        )
