"""Index snapshots: everything NPM inference reads, built from a datastore.

Layout ({store}/index/{id}/), all of it needed at query time and nothing more::

    manifest.json   config: factory, search parameters, re-ranking, datastore / corpus / encoder lineage, the
                    precision of its vectors (f32 or bf16)
    index.faiss     FAISS index of every content token under its global id (inner product)
    index.ivfdata   the inverted lists, memory-mapped (only with ``on_disk``)
    trained.faiss   the trained, empty index (rotation, quantizers): an incremental rebuild fills it again
    tokens.npy      (N,) token id of every content token (uint16 when the vocabulary fits)
    offsets.npy     (blocks + 1,) int64: block b holds global ids offsets[b]:offsets[b+1]
    token_df.npy    (V,) int64: how many blocks hold each token id (IDF of evidence scoring)
    bm25/…          Lucene index of the blocks (doc id = global block number), for the
                    BM25-restricted open-set mode
    articles.sqlite the openings of the corpus's articles by title: what each candidate is
                    (:mod:`npmcore.index.articles`)

An index may also hold **BM25 alone**, of a corpus (:mod:`npmcore.index.bm25_index`: no
``index.faiss``, no datastore).

The index and its datastore and corpus live in the same store; the block texts (for
evidence) are read from the corpus snapshot, and kNN search re-scores its shortlist with the
datastore's exact vectors (``rerank``). The id is a digest of the datastore id and the index
config: the same datastore and config give the same snapshot.

A build is four steps, each finished once in the snapshot's staging folder (``.partial-{id}``,
kept when a build dies, so a rerun resumes after the last finished step; :mod:`npmcore.index.staging`):

1. :func:`build_faiss_files`: train on a bounded sample read row by row from the datastore,
   encode every shard on the Dask workers (exhaustive PQ: codes; IVF: a shard index;
   :mod:`npmcore.index.faiss_shards`), then gather them in shard order (IVF: merged, in memory
   or into one memory-mapped file);
2. :func:`build_bm25_files`: the Lucene index of the blocks;
3. :func:`build_articles_files`: the table of the articles' openings;
4. :func:`commit_index`: the manifest, with every file's checksum.

:func:`build_index` runs the four; the ``index_corpus`` flow runs each as a task.
"""

import functools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import faiss
import fsspec
import numpy as np
from distributed import Client

from npmcore.cluster import map_bounded
from npmcore.index.articles import ARTICLES, write_articles
from npmcore.index.bm25_passages import write_bm25
from npmcore.index.faiss_index import (
    OPQ_ITERATIONS,
    add_codes,
    emptied,
    finalize,
    is_ivf,
    merge_ivf,
    takes_codes,
    train_index,
)
from npmcore.index.faiss_shards import codes_to_reuse, encode_shard
from npmcore.index.index_choice import IndexChoice, choose_index
from npmcore.index.staging import clear_finished, finish, finished, publish, upload, write_renamed
from npmcore.rarity import block_frequency
from npmcore.snapshots import (
    INDEX,
    DatastoreRows,
    open_corpus,
    open_datastore,
    open_index,
    shard_arrays,
)
from npmcore.storage import (
    FileEntry,
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
TRAINED = "trained.faiss"  # the trained, empty FAISS index, kept in the snapshot: incremental rebuilds reuse it
Progress = Callable[[int], None]  # called with the tokens just added to the index


@dataclass(frozen=True)
class IndexConfig:
    factory: str | None = None  # FAISS index-factory string; None = chosen by choose_index (PQ, <= 64 B/token)
    search_params: str | None = None  # default FAISS search parameters stored with the index; None = nprobe for IVF
    train_size: int | None = None  # vectors sampled evenly over the datastore to train the index; None = sized to it
    on_disk: bool = False  # IVF only: merge the inverted lists into a memory-mapped index.ivfdata
    bm25: bool = True  # also build the BM25 (Lucene) index used by the restricted open-set mode
    rerank: int | None = None  # kNN: the index's top k x rerank re-scored from the datastore; None = chosen
    max_memory: int | None = None  # bytes of RAM the served index may hold: chooses the factory (and on_disk)


@dataclass(frozen=True)
class IndexPlan:
    id: str
    store: str
    datastore: str
    choice: IndexChoice  # factory, search parameters, rerank, training sample, on_disk, estimates
    config: IndexConfig
    trained: str | None = None  # index snapshot whose trained (emptied) FAISS index is reused

    @property
    def staging(self) -> str:
        return SnapshotWriter(self.store, INDEX, self.id, resumable=True).staging


def store_root(snapshot: str) -> str:
    """``{store}/{kind}/{id}`` -> ``{store}``."""
    return snapshot.rstrip("/").rsplit("/", 2)[0]


def choose_for(tokens: int, dim: int, config: IndexConfig) -> IndexChoice:
    """The index ``config`` asks for over ``tokens`` vectors of ``dim`` dimensions (what it leaves
    open chosen by :func:`npmcore.index.index_choice.choose_index`)."""
    return choose_index(
        dim,
        tokens,
        factory=config.factory,
        search_params=config.search_params,
        train_size=config.train_size,
        on_disk=config.on_disk,
        rerank=config.rerank,
        max_memory=config.max_memory,
    )


def corpus_choice(corpus: str, encoder: str | None, config: IndexConfig = IndexConfig()) -> IndexChoice:
    """The index a corpus snapshot will get, known before it is embedded: its content tokens (its
    tokens less each block's special tokens) at the encoder's width."""
    from npmcore.encoder import encoder_config, load_tokenizer, special_frame

    manifest = open_corpus(corpus).manifest
    before, after = special_frame(load_tokenizer(encoder))
    tokens = manifest.counts["tokens"] - (before + after) * manifest.counts["blocks"]
    return choose_for(tokens, encoder_config(encoder).hidden_size, config)


def plan_index(datastore: str, config: IndexConfig = IndexConfig(), trained: str | None = None) -> IndexPlan:
    """Fix the index's factory, search parameters and id. ``trained``: an index snapshot of
    the same encoder whose trained FAISS index is emptied and filled again (an incremental
    rebuild trains nothing; its factory, search parameters and re-ranking carry over)."""
    manifest = open_datastore(datastore).manifest
    choice = choose_for(manifest.counts["tokens"], manifest.config["dim"], config)
    if trained is not None:
        base = open_index(trained).manifest
        if base.config["encoder_fingerprint"] != manifest.config["encoder_fingerprint"]:
            raise ValueError(f"index {trained} was trained on vectors of another encoder than datastore {datastore}")
        choice = choose_for(
            manifest.counts["tokens"],
            manifest.config["dim"],
            IndexConfig(
                factory=base.config["factory"],
                search_params=base.config["search_params"],
                train_size=base.config["train_size"],
                on_disk=base.config["on_disk"],
                bm25=config.bm25,
                rerank=base.config.get("rerank", 1),
            ),
        )
    id_config = {
        "factory": choice.factory,
        "search_params": choice.search_params,
        "train_size": choice.train_size,
        "on_disk": choice.on_disk,
        "bm25": config.bm25,
        "rerank": choice.rerank,
        **({"opq_iterations": OPQ_ITERATIONS} if "OPQ" in choice.factory and trained is None else {}),
        **({"trained": open_index(trained).manifest.id} if trained is not None else {}),
    }
    snap_id = snapshot_id(INDEX, [{"datastore": manifest.id}], id_config)
    return IndexPlan(snap_id, store_root(datastore), datastore, choice, config, trained)


def training_sample(datastore: str, n: int, seed: int = 0) -> np.ndarray:
    """(min(n, N), d) float32 vectors drawn uniformly without replacement from the whole
    datastore, read row by row (:meth:`DatastoreRows.gather`): memory holds the sample only."""
    total = open_datastore(datastore).manifest.counts["tokens"]
    pick = np.sort(np.random.default_rng(seed).choice(total, size=min(n, total), replace=False))
    return DatastoreRows(datastore, mapped=False).gather(pick)


# --- 1. FAISS -----------------------------------------------------------------------------


def build_faiss_files(
    plan: IndexPlan, client: Client | None = None, on_tokens: Progress | None = None
) -> dict[str, FileEntry]:
    """Step 1: the FAISS index and the token arrays, written into the staging folder (skipped when
    a previous try finished it); returns their relative paths and checksums."""
    done = finished(plan.staging, "faiss")
    if done is not None:
        log.info("index %s: FAISS index already built; skipped", plan.id)
        return done
    manifest = open_datastore(plan.datastore).manifest  # each shard's checksums are verified where it is encoded
    tokens = manifest.counts["tokens"]
    if tokens == 0:
        raise ValueError(f"datastore {plan.datastore} has no tokens")
    choice = plan.choice
    with tempfile.TemporaryDirectory(prefix="npm-index-") as tmp:
        workdir = Path(tmp)
        parts = join(plan.staging, "faiss-shards")
        trained = _trained(plan, join(plan.staging, TRAINED), workdir)
        names = manifest.config["shards"]
        if is_ivf(trained) or takes_codes(trained):  # encoded on the workers, then gathered here
            firsts = np.cumsum([0, *manifest.config["shard_tokens"][:-1]]).tolist()
            jobs = [(name, first, join(parts, name)) for name, first in zip(names, firsts, strict=True)]
            reuse = codes_to_reuse(plan.trained, plan.datastore, trained)
            trained_url = join(plan.staging, TRAINED)
            encode = functools.partial(
                encode_shard, (trained_url, sha256_file(trained_url).sha256), plan.datastore, reuse
            )
            started, copied = time.perf_counter(), 0
            for _, added, reused in map_bounded(encode, jobs, client):
                copied += reused
                if on_tokens is not None:
                    on_tokens(added)
            log.info(
                "encoded %d shards (%d tokens, the codes of %d copied from index %s) on the workers in %.0f s",
                len(names), tokens, copied, reuse, _since(started),
            )  # fmt: skip
        started = time.perf_counter()
        ordered = [join(parts, name) for name in names]
        index = trained
        if is_ivf(trained):
            local = [_local_copy(url, workdir / "shards") for url in ordered]
            ivfdata = workdir / "index.ivfdata" if choice.on_disk else None
            index = merge_ivf(trained, [str(p) for p in local], str(ivfdata) if ivfdata else None)
            shutil.rmtree(workdir / "shards")
        elif takes_codes(trained):
            for url in ordered:
                with fsspec.open(url, "rb") as f:
                    add_codes(index, np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, trained.sa_code_size()))
        else:  # a graph or a fast-scan layout: vectors added in order here
            for name in names:
                vectors = shard_arrays(plan.datastore, name, manifest.files, verify=True)["vectors"]
                index.add(np.asarray(vectors, dtype=np.float32))
                if on_tokens is not None:
                    on_tokens(len(vectors))
        if index.ntotal != tokens:
            raise SnapshotError(f"index holds {index.ntotal} vectors, the datastore {tokens}")
        faiss.write_index(finalize(index), str(workdir / "index.faiss"))
        del index
        log.info("gathered the index in %.0f s", _since(started))
        files = [workdir / "index.faiss", *([workdir / "index.ivfdata"] if choice.on_disk else [])]
        for key, array in token_arrays(plan.datastore, _vocab_size(manifest)).items():
            np.save(workdir / f"{key}.npy", array)
            files.append(workdir / f"{key}.npy")
        entries = {**upload(plan.staging, workdir, files), TRAINED: sha256_file(join(plan.staging, TRAINED))}
    fs, path = fsspec.core.url_to_fs(parts)
    if fs.exists(path):
        fs.rm(path, recursive=True)
    return finish(plan.staging, "faiss", entries)


def _trained(plan: IndexPlan, url: str, workdir: Path) -> faiss.Index:
    """The trained, empty index: a previous try's (kept in the staging folder, so that shards it
    encoded stay valid), the emptied index of ``plan.trained``, or trained now on a sample."""
    fs, _ = fsspec.core.url_to_fs(url)
    if fs.exists(url):
        return faiss.read_index(str(_local_copy(url, workdir / "trained")))
    if plan.trained is not None and TRAINED in open_index(plan.trained).manifest.files:
        trained = faiss.read_index(str(_local_copy(join(plan.trained, TRAINED), workdir / "trained")))
    elif plan.trained is not None:  # an index of an earlier package keeps no trained index: empty its own
        trained = emptied(_local_copy(join(plan.trained, "index.faiss"), workdir / "trained").as_posix())
    else:
        started = time.perf_counter()
        trained = train_index(plan.choice.factory, training_sample(plan.datastore, plan.choice.train_size))
        log.info("trained %s on %d vectors in %.0f s", plan.choice.factory, plan.choice.train_size, _since(started))
    write_renamed(url, faiss.serialize_index(trained).tobytes())
    return trained


def _vocab_size(manifest: Manifest) -> int:
    from npmcore.encoder import load_tokenizer

    return len(load_tokenizer(None if manifest.config["encoder"] == "default" else manifest.config["encoder"]))


def token_arrays(datastore: str, vocab_size: int) -> dict[str, np.ndarray]:
    """tokens (N,) and offsets (blocks + 1,) of the whole datastore in global order, and
    token_df (V,): the blocks holding each token id (the IDF of evidence scoring)."""
    manifest = open_datastore(datastore).manifest
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
    tokens = np.empty(manifest.counts["tokens"], dtype=dtype)
    offsets, first = [np.zeros(1, dtype=np.int64)], 0
    for name in manifest.config["shards"]:
        arrays = shard_arrays(datastore, name, manifest.files)
        tokens[first : first + len(arrays["tokens"])] = arrays["tokens"]
        offsets.append(np.asarray(arrays["offsets"][1:]) + first)
        first += len(arrays["tokens"])
    offsets = np.concatenate(offsets)
    return {"tokens": tokens, "offsets": offsets, "token_df": block_frequency(tokens, offsets, vocab_size).df}


# --- 2. BM25 ------------------------------------------------------------------------------


def build_bm25_files(plan: IndexPlan) -> dict[str, FileEntry]:
    """Step 2: the Lucene index of the blocks, written into the staging folder (skipped when a
    previous try finished it, or not asked for); returns its files' relative paths and checksums."""
    if not plan.config.bm25:
        return {}
    done = finished(plan.staging, "bm25")
    if done is not None:
        log.info("index %s: BM25 index already built; skipped", plan.id)
        return done
    with tempfile.TemporaryDirectory(prefix="npm-bm25-") as tmp:
        workdir = Path(tmp)
        started = time.perf_counter()
        count = write_bm25(open_datastore(plan.datastore).corpus, workdir / "bm25", plan.trained)
        log.info("BM25 index of %d blocks in %.0f s", count, _since(started))
        entries = upload(plan.staging, workdir, sorted(p for p in (workdir / "bm25").iterdir() if p.is_file()))
    return finish(plan.staging, "bm25", entries)


# --- 3. articles --------------------------------------------------------------------------


def build_articles_files(plan: IndexPlan) -> dict[str, FileEntry]:
    """Step 3: the table of the corpus's article openings (:mod:`npmcore.index.articles`), written into the staging
    folder (skipped when a previous try finished it); returns its file's relative path and checksum."""
    done = finished(plan.staging, "articles")
    if done is not None:
        log.info("index %s: table of articles already written; skipped", plan.id)
        return done
    with tempfile.TemporaryDirectory(prefix="npm-articles-") as tmp:
        workdir, started = Path(tmp), time.perf_counter()
        count = write_articles(open_datastore(plan.datastore).corpus, workdir / ARTICLES)
        log.info("table of %d articles' openings in %.0f s", count, _since(started))
        entries = upload(plan.staging, workdir, [workdir / ARTICLES])
    return finish(plan.staging, "articles", entries)


# --- 4. commit ----------------------------------------------------------------------------


def commit_index(plan: IndexPlan, files: dict[str, FileEntry]) -> str:
    """Step 4: the manifest of the files the steps wrote; publishes the snapshot, returns its URL."""
    datastore = open_datastore(plan.datastore)
    ds = datastore.manifest
    choice = plan.choice
    with SnapshotWriter(plan.store, INDEX, plan.id, resumable=True) as writer:
        clear_finished(plan.staging, ("faiss", "bm25", "articles"))
        return publish(
            writer,
            files,
            inputs=[{"datastore": plan.datastore, "datastore_id": ds.id, **ds.inputs[0]}],
            config={
                "factory": choice.factory,
                "search_params": choice.search_params,
                "rerank": choice.rerank,
                "on_disk": choice.on_disk,
                "train_size": choice.train_size,
                **({"opq_iterations": OPQ_ITERATIONS} if "OPQ" in choice.factory and plan.trained is None else {}),
                "bm25": plan.config.bm25,
                "dim": ds.config["dim"],
                "trained": plan.trained,
                "encoder": ds.config["encoder"],
                "encoder_fingerprint": ds.config["encoder_fingerprint"],
                "precision": datastore.precision,
                "shard_blocks": ds.config["shard_blocks"],
            },
            counts={"tokens": ds.counts["tokens"], "blocks": ds.counts["blocks"]},
        )


def existing_index(plan: IndexPlan) -> str | None:
    """URL of the finished index snapshot of ``plan``, if there is one."""
    url = snapshot_url(plan.store, INDEX, plan.id)
    return url if existing_snapshot(url, verify=False) else None


def build_index(
    datastore: str,
    config: IndexConfig = IndexConfig(),
    client: Client | None = None,
    trained: str | None = None,
    on_tokens: Progress | None = None,
) -> str:
    """Build (or reuse) the index snapshot of ``datastore``; returns its URL. ``trained``: an
    index snapshot whose trained FAISS index is reused (see :func:`plan_index`)."""
    plan = plan_index(datastore, config, trained)
    if url := existing_index(plan):
        log.info("index %s already exists; nothing to do", url)
        return url
    files = build_faiss_files(plan, client, on_tokens)
    return commit_index(plan, {**files, **build_bm25_files(plan), **build_articles_files(plan)})


# --- helpers ------------------------------------------------------------------------------


def _local_copy(url: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / url.rsplit("/", 1)[-1]
    with fsspec.open(url, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def _since(started: float) -> float:
    return time.perf_counter() - started
