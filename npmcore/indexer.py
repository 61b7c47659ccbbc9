"""Index snapshots: everything NPM inference reads, built from a datastore.

Layout ({store}/index/{id}/), all of it needed at query time and nothing more::

    manifest.json   config: factory, search parameters, datastore / corpus / encoder lineage
    index.faiss     FAISS index of every content token under its global id (inner product)
    index.ivfdata   the inverted lists, memory-mapped (only with ``on_disk``)
    tokens.npy      (N,) token id of every content token (uint16 when the vocabulary fits)
    offsets.npy     (blocks + 1,) int64: block b holds global ids offsets[b]:offsets[b+1]
    bm25/…          Lucene index of the blocks (doc id = global block number), for the
                    BM25-restricted open-set mode

The index and its datastore and corpus live in the same store; the block texts (for
evidence) are read from the corpus snapshot. The id is a digest of the datastore id and
the index config: the same datastore and config give the same snapshot.
"""

import functools
import logging
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import fsspec
import numpy as np
from distributed import Client

from npmcore import bm25
from npmcore.blocks import encoder_input
from npmcore.cluster import map_bounded
from npmcore.faiss_index import (
    add_all,
    add_shard,
    default_factory,
    default_train_size,
    emptied,
    finalize,
    is_ivf,
    merge_ivf,
    train_index,
)
from npmcore.snapshots import INDEX, iter_shards, open_datastore, open_index, read_blocks, shard_arrays
from npmcore.storage import (
    Manifest,
    SnapshotError,
    SnapshotWriter,
    existing_snapshot,
    join,
    sha256_file,
    snapshot_id,
    snapshot_url,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexConfig:
    factory: str | None = None  # FAISS index-factory string; None = default_factory(d, tokens): PQ, <= 64 B/token
    search_params: str | None = None  # default FAISS search parameters stored with the index; None = nprobe for IVF
    train_size: int | None = None  # vectors sampled evenly over the datastore to train the index; None = sized to it
    on_disk: bool = False  # IVF only: merge the inverted lists into a memory-mapped index.ivfdata
    bm25: bool = True  # also build the BM25 (Lucene) index used by the restricted open-set mode


@dataclass(frozen=True)
class IndexPlan:
    id: str
    store: str
    datastore: str
    factory: str
    search_params: str
    train_size: int  # the config's, or default_train_size of the datastore's tokens
    config: IndexConfig
    trained: str | None = None  # index snapshot whose trained (emptied) FAISS index is reused

    @property
    def staging(self) -> str:
        return SnapshotWriter(self.store, INDEX, self.id, resumable=True).staging


def store_root(snapshot: str) -> str:
    """``{store}/{kind}/{id}`` -> ``{store}``."""
    return snapshot.rstrip("/").rsplit("/", 2)[0]


def plan_index(datastore: str, config: IndexConfig = IndexConfig(), trained: str | None = None) -> IndexPlan:
    """Fix the index's factory, search parameters and id. ``trained``: an index snapshot of
    the same encoder whose trained FAISS index is emptied and filled again (an incremental
    rebuild trains nothing; its factory and search parameters carry over)."""
    manifest = open_datastore(datastore).manifest
    if config.on_disk and config.factory is not None and "IVF" not in config.factory:
        raise ValueError(f"on_disk needs an IVF index, got factory {config.factory!r}")
    factory = config.factory or default_factory(manifest.config["dim"], manifest.counts["tokens"])
    search_params = config.search_params if config.search_params is not None else _default_search_params(factory)
    train_size = config.train_size or default_train_size(manifest.counts["tokens"])
    id_config = {**asdict(config), "factory": factory, "search_params": search_params, "train_size": train_size}
    if trained is not None:
        base = open_index(trained).manifest
        if base.config["encoder_fingerprint"] != manifest.config["encoder_fingerprint"]:
            raise ValueError(f"index {trained} was trained on vectors of another encoder than datastore {datastore}")
        factory, search_params = base.config["factory"], base.config["search_params"]
        id_config = {**id_config, "factory": factory, "search_params": search_params, "trained": base.id}
    snap_id = snapshot_id(INDEX, [{"datastore": manifest.id}], id_config)
    return IndexPlan(snap_id, store_root(datastore), datastore, factory, search_params, train_size, config, trained)


def _default_search_params(factory: str) -> str:
    """IVF: probe 1/8 of the lists (at least 16); HNSW: efSearch 128; others: none."""
    for part in factory.split(","):
        if part.startswith("IVF"):
            nlist = int("".join(c for c in part[3:] if c.isdigit()) or 1)
            return f"nprobe={min(nlist, max(16, nlist // 8))}"
        if part.startswith("HNSW"):
            return "efSearch=128"
    return ""


def training_sample(datastore: str, n: int, seed: int = 0) -> np.ndarray:
    """(min(n, N), d) float32 vectors drawn uniformly without replacement from the whole datastore."""
    total = open_datastore(datastore).manifest.counts["tokens"]
    pick = np.sort(np.random.default_rng(seed).choice(total, size=min(n, total), replace=False))
    parts = []
    for first, arrays in iter_shards(datastore):
        vectors = arrays["vectors"]
        mine = pick[(pick >= first) & (pick < first + len(vectors))] - first
        parts.append(np.asarray(vectors[mine], dtype=np.float32))
    return np.concatenate(parts)


def _shard_index(trained: bytes, datastore: str, job: tuple[str, int, str]) -> str:
    """Add one datastore shard (name, first global id, output URL) to a copy of the trained
    IVF index and write it to the output URL (runs on a worker)."""
    name, first, out = job
    vectors = shard_arrays(datastore, name, open_datastore(datastore).manifest.files)["vectors"]
    index = add_shard(faiss.deserialize_index(np.frombuffer(trained, dtype=np.uint8)), vectors, first)
    with fsspec.open(out, "wb") as f:
        f.write(faiss.serialize_index(index).tobytes())
    return out


def build_faiss(plan: IndexPlan, workdir: Path, client: Client | None) -> list[Path]:
    """Train, fill and write the FAISS index into the local folder ``workdir``; returns the files."""
    manifest = open_datastore(plan.datastore).manifest
    if manifest.counts["tokens"] == 0:
        raise ValueError(f"datastore {plan.datastore} has no tokens")
    if plan.trained is None:
        trained = train_index(plan.factory, training_sample(plan.datastore, plan.train_size))
    else:
        trained = emptied(_local_copy(join(plan.trained, "index.faiss"), workdir / "trained").as_posix())
    names, firsts = manifest.config["shards"], np.cumsum([0, *manifest.config["shard_tokens"][:-1]]).tolist()
    if is_ivf(trained):  # shards are added in parallel, then merged
        blob = faiss.serialize_index(trained).tobytes()
        parts = join(plan.staging, "ivf-shards")
        jobs = [(name, first, join(parts, f"{name}.faiss")) for name, first in zip(names, firsts, strict=True)]
        fn = functools.partial(_shard_index, blob, plan.datastore)
        shard_urls = sorted(map_bounded(fn, jobs, client))
        local = [_local_copy(url, workdir / "ivf-shards") for url in shard_urls]
        ivfdata = workdir / "index.ivfdata" if plan.config.on_disk else None
        index = merge_ivf(trained, [str(p) for p in local], str(ivfdata) if ivfdata else None)
        shutil.rmtree(workdir / "ivf-shards")
        fs, path = fsspec.core.url_to_fs(parts)
        fs.rm(path, recursive=True)
    else:
        index = add_all(trained, [(first, arrays["vectors"]) for first, arrays in iter_shards(plan.datastore)])
    if index.ntotal != manifest.counts["tokens"]:
        raise SnapshotError(f"index holds {index.ntotal} vectors, the datastore {manifest.counts['tokens']}")
    faiss.write_index(finalize(index), str(workdir / "index.faiss"))
    return [workdir / "index.faiss", *([workdir / "index.ivfdata"] if plan.config.on_disk else [])]


def _local_copy(url: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / url.rsplit("/", 1)[-1]
    with fsspec.open(url, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def token_arrays(datastore: str, vocab_size: int) -> dict[str, np.ndarray]:
    """tokens (N,) and offsets (blocks + 1,) of the whole datastore in global order."""
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
    tokens, offsets = [], [np.zeros(1, dtype=np.int64)]
    for first, arrays in iter_shards(datastore):
        tokens.append(np.asarray(arrays["tokens"]).astype(dtype))
        offsets.append(np.asarray(arrays["offsets"][1:]) + first)
    return {"tokens": np.concatenate(tokens), "offsets": np.concatenate(offsets)}


def passages(corpus: str):
    """(global block number, passage text) of every block, in global order (the BM25 documents)."""
    number = 0
    for table in read_blocks(corpus, columns=["title", "text"]):
        for title, text in zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True):
            yield str(number), encoder_input(title, text)
            number += 1


def build_index(
    datastore: str, config: IndexConfig = IndexConfig(), client: Client | None = None, trained: str | None = None
) -> str:
    """Build (or reuse) the index snapshot of ``datastore``; returns its URL. ``trained``: an
    index snapshot whose trained FAISS index is reused (see :func:`plan_index`)."""
    plan = plan_index(datastore, config, trained)
    url = snapshot_url(plan.store, INDEX, plan.id)
    if existing_snapshot(url, verify=False):
        log.info("index %s already exists; nothing to do", url)
        return url
    ds = open_datastore(datastore, verify=True).manifest  # every shard verified once before it is indexed
    from npmcore.encoder import load_tokenizer

    vocab_size = len(load_tokenizer(None if ds.config["encoder"] == "default" else ds.config["encoder"]))
    with (
        tempfile.TemporaryDirectory(prefix="npm-index-") as tmp,
        SnapshotWriter(plan.store, INDEX, plan.id, resumable=True) as writer,
    ):
        workdir = Path(tmp)
        files = build_faiss(plan, workdir, client)
        for key, array in token_arrays(datastore, vocab_size).items():
            np.save(workdir / f"{key}.npy", array)
            files.append(workdir / f"{key}.npy")
        if config.bm25:
            bm25.index_passages(passages(open_datastore(datastore).corpus), str(workdir / "bm25"))
            files.extend(sorted(p for p in (workdir / "bm25").iterdir() if p.is_file()))
        for path in files:
            relpath = str(path.relative_to(workdir))
            with open(path, "rb") as src, fsspec.open(writer.url(relpath), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            writer.add(relpath, sha256_file(str(path)))
        manifest = Manifest(
            kind=INDEX,
            id=plan.id,
            inputs=[{"datastore": datastore, "datastore_id": ds.id, **ds.inputs[0]}],
            config={
                "factory": plan.factory,
                "search_params": plan.search_params,
                "on_disk": config.on_disk,
                "train_size": plan.train_size,
                "bm25": config.bm25,
                "dim": ds.config["dim"],
                "trained": trained,
                "encoder": ds.config["encoder"],
                "encoder_fingerprint": ds.config["encoder_fingerprint"],
                "shard_blocks": ds.config["shard_blocks"],
            },
            counts={"tokens": ds.counts["tokens"], "blocks": ds.counts["blocks"]},
            files=dict(writer.files),
        )
        return writer.commit(manifest)
