"""Training bundles: what training reads of a corpus snapshot, in one compact file that travels.

A GPU machine reached for a short stretch has no store, no network and little room for
files; training needs only each block's token ids, its document and the length of its
"{title}. " prefix. :func:`write_bundle` writes those fields of a corpus snapshot (or of
its first ``max_tokens`` tokens, whole documents) into one Parquet file: token ids as
uint16 when the vocabulary fits, zstd at a high level, the snapshot's lineage in the
file's metadata. :func:`read_bundle` gives the blocks back in document order, and
:func:`npmcore.model.batching.iter_batches` batches a bundle as it batches a snapshot (the
bundle is one shard).
"""

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from npmcore.snapshots import open_corpus, read_blocks

SUFFIX = ".bundle.parquet"
_META = b"npmcore.corpus.bundle"
COMPRESSION_LEVEL = 19  # zstd: the file is written once and travels; reading stays fast at any level


@dataclass(frozen=True)
class BundleInfo:
    corpus: str  # URL of the corpus snapshot it was cut from
    corpus_id: str
    tokenizer: str  # the snapshot's tokenizer fingerprint
    max_tokens: int  # the snapshot's block length limit
    docs: int
    blocks: int
    tokens: int


def is_bundle(url: str) -> bool:
    return url.endswith(SUFFIX)


def write_bundle(corpus_url: str, out: str | Path, max_tokens: int | None = None) -> BundleInfo:
    """Write the training fields of a corpus snapshot's blocks to ``out`` (``*.bundle.parquet``),
    atomically: every document, or the first whole documents holding at most ``max_tokens`` tokens."""
    out = Path(out)
    if not out.name.endswith(SUFFIX):
        raise ValueError(f"a bundle's file name ends with {SUFFIX}, got {out.name}")
    corpus = open_corpus(corpus_url)
    docs, token_ids, titles = [], [], []
    total = 0
    for doc, rows in enumerate(_documents(corpus_url)):
        size = sum(len(ids) for ids, _ in rows)
        if max_tokens is not None and total + size > max_tokens:
            break
        docs += [doc] * len(rows)
        token_ids += [ids for ids, _ in rows]
        titles += [title for _, title in rows]
        total += size
    if not docs:
        raise ValueError(f"no whole document of {corpus_url} fits in {max_tokens} tokens")
    info = BundleInfo(
        corpus=corpus_url,
        corpus_id=corpus.manifest.id,
        tokenizer=corpus.tokenizer,
        max_tokens=int(corpus.manifest.config["max_tokens"]),
        docs=docs[-1] + 1,
        blocks=len(docs),
        tokens=total,
    )
    dtype = pa.uint16() if max(map(max, token_ids)) < 1 << 16 else pa.int32()
    table = pa.table(
        {
            "doc": pa.array(docs, pa.int32()),
            "token_ids": pa.array(token_ids, pa.list_(dtype)),
            "title_tokens": pa.array(titles, pa.int16()),
        }
    ).replace_schema_metadata({_META: json.dumps(info.__dict__).encode()})
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".tmp-{out.name}")
    pq.write_table(table, partial, compression="zstd", compression_level=COMPRESSION_LEVEL, use_dictionary=False)
    os.replace(partial, out)
    return info


def _documents(corpus_url: str) -> Iterator[list[tuple[list[int], int]]]:
    """(token ids, title tokens) of the blocks of each document of a corpus snapshot, in order."""
    rows: list[tuple[list[int], int]] = []
    previous = None
    for table in read_blocks(corpus_url, ["doc_id", "token_ids", "title_tokens"]):
        columns = (table.column(c).to_pylist() for c in ("doc_id", "token_ids", "title_tokens"))
        for doc_id, ids, title in zip(*columns, strict=True):
            if doc_id != previous and rows:
                yield rows
                rows = []
            previous = doc_id
            rows.append((ids, title))
    if rows:
        yield rows


def bundle_info(path: str | Path) -> BundleInfo:
    metadata = pq.read_schema(path).metadata or {}
    if _META not in metadata:
        raise ValueError(f"{path} is not a training bundle (no {_META.decode()} metadata)")
    return BundleInfo(**json.loads(metadata[_META]))


def read_bundle(path: str | Path) -> pa.Table:
    """The bundle's blocks in document order, with the columns batching reads of a corpus shard
    (``block_id`` "{doc}#{i}", ``doc_id``, ``block_index``, ``token_ids``, ``title_tokens``)."""
    bundle_info(path)  # a clear error for any other file
    table = pq.read_table(path)
    doc = table.column("doc").to_numpy()
    starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])  # first block of each document
    index = np.arange(len(doc)) - np.repeat(starts, np.diff(np.r_[starts, len(doc)]))
    doc_ids = doc.astype(str)
    return pa.table(
        {
            "block_id": pa.array(np.char.add(np.char.add(doc_ids, "#"), index.astype(str))),
            "doc_id": pa.array(doc_ids),
            "block_index": pa.array(index, pa.int32()),
            "token_ids": table.column("token_ids"),
            "title_tokens": table.column("title_tokens"),
        }
    )
