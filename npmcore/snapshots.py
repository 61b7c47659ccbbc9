"""Reading snapshots: each kind's name, its files and its typed lineage.

The writers (:mod:`npmcore.corpus.ingest`, :mod:`npmcore.index.datastore`, :mod:`npmcore.index.indexer`,
:mod:`npmcore.model.train`, :mod:`npmcore.tracking`) make snapshots; every reader opens them
here. A snapshot's lineage is a field, not a dictionary lookup::

    corpus      Parquet block shards of the input files       CorpusSnapshot
    datastore   a vector per content token of a corpus        DatastoreSnapshot(.corpus)
    index       FAISS + token ids + BM25 of a datastore       IndexSnapshot(.datastore, .corpus)
                (or token ids + BM25 alone of a corpus)       IndexSnapshot(.vectors false, .corpus)
    encoder     a registered model exported for the workers   (manifest only)
    checkpoint  a training run's weights and optimizer        (npmcore.model.train)
"""

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from npmcore.sources import Source
from npmcore.storage import (
    FileEntry,
    Manifest,
    SnapshotError,
    join,
    list_snapshots,
    open_snapshot,
    sha256_bytes,
    sha256_file,
)

CORPUS, DATASTORE, INDEX, ENCODER, CHECKPOINT = "corpus", "datastore", "index", "encoder", "checkpoint"

BLOCK_SCHEMA = pa.schema(
    [
        ("block_id", pa.string()),
        ("doc_id", pa.string()),
        ("block_index", pa.int32()),
        ("title", pa.string()),
        ("source", pa.string()),
        ("text", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("title_tokens", pa.int32()),  # the first title_tokens non-special token ids spell the "{title}. " prefix
        ("content_hash", pa.string()),
        ("source_hash", pa.string()),  # sha256 of the document's source (dump pages: page id, title, wikitext;
        # crawled articles: their text, whitespace collapsed, the exact-duplicate key of npmcore.corpus.dedup)
    ]
)
# Shards of crawled articles (format warc) add three columns; shards of the other formats are
# unchanged, byte for byte, so their snapshot ids keep naming the same content.
WARC_BLOCK_SCHEMA = (
    BLOCK_SCHEMA.append(pa.field("url", pa.string()))
    .append(
        pa.field("date", pa.timestamp("us", tz="UTC"))  # WARC-Date: when the page was crawled
    )
    .append(
        pa.field("minhash", pa.list_(pa.uint32()))  # the article's MinHash signature, on its first block (else null)
    )
)
DATASTORE_ARRAYS = ("vectors", "tokens", "offsets")


def _encoder(config: dict) -> str | None:
    """The encoder a snapshot was made with: a path or name, None for the default encoder."""
    return None if config["encoder"] == "default" else config["encoder"]


@dataclass(frozen=True)
class CorpusSnapshot:
    url: str
    manifest: Manifest

    @property
    def encoder(self) -> str | None:
        """The encoder whose tokenizer made the token ids (None: the default encoder)."""
        return _encoder(self.manifest.config)

    @property
    def tokenizer(self) -> str:
        """Fingerprint of that tokenizer (:func:`npmcore.encoder.tokenizer_fingerprint`)."""
        return self.manifest.config["tokenizer"]

    @property
    def shards(self) -> list[tuple[str, FileEntry]]:
        """(path, checksum) of every block shard, in order."""
        return sorted(self.manifest.files.items())

    @property
    def sources(self) -> list[Source]:
        """What it holds, a wiki or collection each (:mod:`npmcore.sources`); [] for a snapshot made before
        corpora recorded them."""
        return [Source.from_dict(s) for s in self.manifest.sources]


@dataclass(frozen=True)
class DatastoreSnapshot:
    url: str
    manifest: Manifest

    @property
    def corpus(self) -> str:
        return self.manifest.inputs[0]["corpus"]

    @property
    def encoder(self) -> str | None:
        return _encoder(self.manifest.config)

    @property
    def encoder_fingerprint(self) -> str:
        return self.manifest.config["encoder_fingerprint"]

    @property
    def precision(self) -> str:
        """The precision its vectors were computed in (``f32`` or ``bf16``); datastores written before it was
        recorded were all embedded on CPUs in float32."""
        return self.manifest.config.get("precision", "f32")


@dataclass(frozen=True)
class IndexSnapshot:
    url: str
    manifest: Manifest

    @property
    def vectors(self) -> bool:
        """Whether the index holds token vectors (FAISS and a datastore); False: BM25 alone."""
        return self.manifest.config.get("vectors", True)

    @property
    def datastore(self) -> str:
        if not self.vectors:
            raise SnapshotError(
                f"index {self.url} holds BM25 alone (no token vectors, no datastore): build an index with vectors "
                "for kNN search (npmcore index without --bm25-only)"
            )
        return self.manifest.inputs[0]["datastore"]

    @property
    def datastore_id(self) -> str | None:
        """The datastore's id; None for an index of BM25 alone."""
        return self.manifest.inputs[0].get("datastore_id")

    @property
    def corpus(self) -> str:
        return self.manifest.inputs[0]["corpus"]

    @property
    def corpus_id(self) -> str:
        return self.manifest.inputs[0]["corpus_id"]

    @property
    def encoder(self) -> str | None:
        return _encoder(self.manifest.config)

    @property
    def encoder_fingerprint(self) -> str | None:
        """The weights of the encoder that made the vectors; None for an index of BM25 alone."""
        return self.manifest.config["encoder_fingerprint"]

    @property
    def precision(self) -> str | None:
        """The precision its vectors were computed in (``f32`` or ``bf16``; as its datastore's); None for an
        index of BM25 alone."""
        return self.manifest.config.get("precision", "f32" if self.vectors else None)


def open_corpus(url: str, verify: bool = False) -> CorpusSnapshot:
    return CorpusSnapshot(url, open_snapshot(url, CORPUS, verify))


def open_datastore(url: str, verify: bool = False) -> DatastoreSnapshot:
    return DatastoreSnapshot(url, open_snapshot(url, DATASTORE, verify))


def open_index(url: str, verify: bool = False) -> IndexSnapshot:
    return IndexSnapshot(url, open_snapshot(url, INDEX, verify))


def newest_corpus(store: str) -> str:
    """URL of the newest corpus snapshot of ``store``."""
    found = list_snapshots(store, CORPUS)
    if not found:
        raise ValueError(f"no corpus snapshot in {store}: run `npmcore ingest` first or pass --corpus")
    return found[-1][0]


# --- corpus blocks ----------------------------------------------------------------------


def read_shard(
    url: str, path: str, entry: FileEntry, columns: list[str] | None = None, optional: tuple[str, ...] = ()
) -> pa.Table:
    """One block shard of the corpus snapshot at ``url``, checked against its manifest entry
    (read once: hashed in memory, then parsed); ``optional`` columns are read too where the shard has them
    (crawled articles' ``url``)."""
    with fsspec.open(join(url, path), "rb") as f:
        data = f.read()
    if sha256_bytes(data) != entry.sha256:
        raise SnapshotError(f"snapshot {url}: checksum mismatch in {path} (manifest sha256 {entry.sha256[:12]}…)")
    if optional:
        names = pq.read_schema(io.BytesIO(data)).names
        columns = [*(columns or []), *(c for c in optional if c in names)]
    return pq.read_table(io.BytesIO(data), columns=columns)


def read_blocks(url: str, columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The block tables of a corpus snapshot, one per shard, in order, each verified as it is read."""
    corpus = open_corpus(url)
    for path, entry in corpus.shards:
        yield read_shard(url, path, entry, columns)


# --- datastore arrays -------------------------------------------------------------------


def shard_arrays(
    url: str, name: str, files: dict[str, FileEntry] | None = None, verify: bool = False
) -> dict[str, np.ndarray]:
    """The arrays of one datastore shard: memory-mapped when local, read otherwise; with
    ``files`` (the manifest's entries) the sizes are checked and, with ``verify``, the checksums
    (each worker verifies the shards it reads: no pass over a whole datastore in one process)."""
    arrays = {}
    for key in DATASTORE_ARRAYS:
        relpath = f"shards/{name}/{key}.npy"
        fs, path = fsspec.core.url_to_fs(join(url, relpath))
        if not fs.exists(path):
            raise SnapshotError(f"datastore {url}: file {relpath} is missing")
        if files is not None and fs.size(path) != files[relpath].bytes:
            raise SnapshotError(
                f"datastore {url}: {relpath} has {fs.size(path)} bytes, the manifest says {files[relpath].bytes}"
            )
        if isinstance(fs, LocalFileSystem):
            found = sha256_file(path) if verify else None
            arrays[key] = np.load(path, mmap_mode="r")
        else:
            with fs.open(path, "rb") as f:
                data = f.read()
            found = FileEntry(sha256_bytes(data), len(data)) if verify else None
            arrays[key] = np.load(io.BytesIO(data))
        if verify and files is not None and found != files[relpath]:
            raise SnapshotError(
                f"snapshot {url}: checksum mismatch in {relpath} (manifest sha256 {files[relpath].sha256[:12]}…, "
                f"{files[relpath].bytes} bytes; found {found.sha256[:12]}…, {found.bytes} bytes)"
            )
    return arrays


def iter_shards(url: str) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(first global token id, arrays) of each shard of a datastore, in order."""
    manifest = open_datastore(url).manifest
    first = 0
    for name, tokens in zip(manifest.config["shards"], manifest.config["shard_tokens"], strict=True):
        yield first, shard_arrays(url, name, manifest.files)
        first += tokens


class DatastoreRows:
    """Vectors of a datastore by global token id, without loading whole shards: each shard's
    ``vectors.npy`` header is read once, then only the requested rows (a seek and one read,
    local or remote through fsspec). Open-set queries read their BM25 passages' vectors here
    instead of encoding the passages again."""

    def __init__(self, url: str, mapped: bool = True):
        manifest = open_datastore(url).manifest
        self.url = url
        # Local shards are memory-mapped for scattered reads (a query's shortlist: fast, and the pages it touches
        # stay mapped); mapped=False reads each run of rows into memory instead (a large sample read once: the
        # kernel maps whole neighbourhoods of a faulted page in, so a mapped 100k-row sample held GBs of pages).
        self.mapped = mapped
        self.names: list[str] = manifest.config["shards"]
        self.first = np.cumsum([0, *manifest.config["shard_tokens"]])  # first global token of each shard
        self._layout: dict[int, tuple[int, int, np.dtype]] = {}  # shard: (data offset, row width, dtype)
        self._mapped: dict[int, np.ndarray] = {}  # local shards' vectors, memory-mapped

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """float32 vectors (hi - lo, d) of global tokens lo..hi-1."""
        if not 0 <= lo < hi <= self.first[-1]:
            raise ValueError(f"datastore {self.url}: no rows {lo}..{hi} in {self.first[-1]} tokens")
        parts = []
        while lo < hi:
            shard = int(np.searchsorted(self.first, lo, side="right") - 1)
            end = min(hi, int(self.first[shard + 1]))
            parts.append(self._read(shard, lo - int(self.first[shard]), end - int(self.first[shard])))
            lo = end
        return np.concatenate(parts)

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """float32 vectors (len(ids), d) of the global tokens ``ids`` (any order, repeats allowed):
        from memory-mapped shards when local (unless ``mapped=False``), else each run of consecutive ids
        as one read (remote: all of a shard's reads issued together, ``fsspec``'s ``cat_ranges``). A
        FAISS shortlist is re-scored exactly with them; an index trains on a sample read so."""
        import torch  # converts float16 rows three times faster than numpy

        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and not (0 <= ids.min() and ids.max() < self.first[-1]):
            raise ValueError(f"datastore {self.url}: token ids outside 0..{self.first[-1] - 1}")
        unique, where = np.unique(ids, return_inverse=True)
        shard_of = np.searchsorted(self.first, unique, side="right") - 1
        parts = [
            self._read_scattered(shard, unique[shard_of == shard] - int(self.first[shard]))
            for shard in np.unique(shard_of).tolist()
        ]
        if not parts:
            return np.empty((0, 0), dtype=np.float32)
        found = torch.from_numpy(np.concatenate(parts)).float().numpy()
        return found if len(unique) == len(ids) and (unique == ids).all() else found[where]

    def _read_scattered(self, shard: int, rows: np.ndarray) -> np.ndarray:
        """Rows (sorted, unique) of one shard, as stored."""
        fs, path = fsspec.core.url_to_fs(join(self.url, f"shards/{self.names[shard]}/vectors.npy"))
        if isinstance(fs, LocalFileSystem) and self.mapped:
            if shard not in self._mapped:
                try:
                    self._mapped[shard] = np.load(path, mmap_mode="r")
                except (FileNotFoundError, ValueError) as e:
                    raise SnapshotError(f"datastore {self.url}: shard {self.names[shard]} cannot be read: {e}") from e
            return self._mapped[shard][rows]
        if shard not in self._layout:
            self._read(shard, 0, 1)  # reads the header
        offset, d, dtype = self._layout[shard]
        row_bytes = d * dtype.itemsize
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1  # runs of consecutive rows: one ranged read each
        runs = np.split(rows, breaks)
        starts = [offset + int(run[0]) * row_bytes for run in runs]
        ends = [offset + (int(run[-1]) + 1) * row_bytes for run in runs]
        if isinstance(fs, LocalFileSystem):
            with open(path, "rb") as f:
                data = b"".join(os.pread(f.fileno(), end - start, start) for start, end in zip(starts, ends))
        else:  # issued together (fsspec's cat_ranges)
            data = b"".join(fs.cat_ranges([path] * len(runs), starts, ends))
        if len(data) != len(rows) * row_bytes:
            raise SnapshotError(f"datastore {self.url}: shard {self.names[shard]} is shorter than its rows")
        return np.frombuffer(data, dtype=dtype).reshape(len(rows), d)

    def _read(self, shard: int, lo: int, hi: int) -> np.ndarray:
        try:
            return self._read_rows(shard, lo, hi)
        except (FileNotFoundError, EOFError, ValueError) as e:
            raise SnapshotError(f"datastore {self.url}: shard {self.names[shard]} cannot be read: {e}") from e

    def _read_rows(self, shard: int, lo: int, hi: int) -> np.ndarray:
        fs, path = fsspec.core.url_to_fs(join(self.url, f"shards/{self.names[shard]}/vectors.npy"))
        # no read-ahead cache: on S3 each read is then one ranged GET of exactly the rows asked for
        with fs.open(path, "rb", cache_type="none") as f:
            if shard not in self._layout:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                )
                shape, fortran, dtype = read_header(f)
                if fortran or len(shape) != 2 or shape[0] != self.first[shard + 1] - self.first[shard]:
                    raise ValueError(
                        f"its vectors have shape {shape}, not the manifest's "
                        f"{self.first[shard + 1] - self.first[shard]} row-major rows"
                    )
                self._layout[shard] = (f.tell(), shape[1], dtype)
            offset, d, dtype = self._layout[shard]
            f.seek(offset + lo * d * dtype.itemsize)
            data = f.read((hi - lo) * d * dtype.itemsize)
        if len(data) != (hi - lo) * d * dtype.itemsize:
            raise EOFError(f"rows {lo}..{hi} are past the end of its vectors file")
        return np.frombuffer(data, dtype=dtype).reshape(hi - lo, d).astype(np.float32)
