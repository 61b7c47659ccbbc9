"""Flow ``index_corpus``: corpus snapshot -> datastore (shards embedded on Dask) -> FAISS (shards
encoded on Dask) -> BM25 -> index snapshot; the embedding precision and the index's plan are logged
before anything is embedded. Without vectors: corpus snapshot -> BM25 -> index snapshot (nothing embedded)."""

import time
from collections.abc import Iterator
from contextlib import contextmanager

import mlflow
from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from flows.params import ClusterParams, PrecisionSetting, StoreURL, default_store
from npmcore.cluster import dask_client, dask_cluster, worker_threads
from npmcore.durations import duration_in_one_unit
from npmcore.forward import BATCH_TOKENS, Precision
from npmcore.index.datastore import embedding_precision, embedding_seconds
from npmcore.index.indexer import IndexConfig, corpus_choice
from npmcore.model.query_encoder import embedding_encoder
from npmcore.snapshots import newest_corpus, open_index
from npmcore.tracking import resolve_encoder
from tasks.index import (
    build_articles_task,
    build_bm25_index_task,
    build_bm25_task,
    build_datastore_task,
    build_faiss_task,
    commit_index_task,
)


class IndexParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    corpus: str | None = Field(
        None, description="Corpus snapshot URL; empty = the newest corpus snapshot in the store."
    )
    model: str | None = Field(
        None,
        description="Encoder: a local model folder, a cached Hugging Face name or a registry URI "
        "(models:/npm-encoder@champion); empty = the shipped default encoder.",
    )
    factory: str | None = Field(
        None,
        description="FAISS index-factory string (Flat, HNSW32, IVF1024,PQ32, …); empty = 32-byte PQ codes, their "
        "shortlist re-scored from the datastore (above 1M tokens an OPQ rotation and an IVF).",
    )
    search_params: str | None = Field(
        None, description="Default FAISS search parameters stored with the index (nprobe=64); empty = automatic."
    )
    train_size: int | None = Field(
        None,
        ge=1_000,
        description="Vectors sampled to train the index; empty = 1 in 32 of the corpus tokens, 20k to 100k.",
    )
    on_disk: bool = Field(False, description="IVF only: keep the inverted lists in a memory-mapped file.")
    rerank: int | None = Field(
        None,
        ge=1,
        description="kNN search re-scores the index's top k x rerank with the datastore's exact vectors; "
        "empty = 4 for compressed indexes, 1 for Flat.",
    )
    max_memory_gb: float | None = Field(
        None,
        gt=0,
        description="RAM (GiB) the served index may hold: the default factory is chosen within it "
        "(IVF with memory-mapped lists when the codes do not fit); empty = no limit.",
    )
    bm25: bool = Field(True, description="Also build the BM25 index for the restricted open-set mode.")
    vectors: bool = Field(
        True,
        description="Embed the corpus and index its token vectors; false: an index of BM25 alone (no embedding), "
        "which BM25-restricted open-set queries need and nothing else (kNN search refuses it).",
    )
    batch_tokens: int = Field(
        BATCH_TOKENS,
        ge=512,
        description="Padded tokens per encoder forward while embedding; the default is sized for CPUs; on a GPU "
        "131072 (an H200 embeds 598k tokens/s at 131072, 217k at 8192: bench/embed.py).",
    )
    precision: PrecisionSetting = "auto"
    cluster: ClusterParams = Field(default_factory=ClusterParams)

    def config(self) -> IndexConfig:
        return IndexConfig(
            factory=self.factory,
            search_params=self.search_params,
            train_size=self.train_size,
            on_disk=self.on_disk,
            bm25=self.bm25,
            rerank=self.rerank,
            max_memory=None if self.max_memory_gb is None else int(self.max_memory_gb * 2**30),
        )


@flow(name="index_corpus")
def index_corpus(params: IndexParams | None = None, previous: str | None = None, progress: bool = False) -> str:
    """Embed a corpus snapshot and build its index snapshot; returns the index URL.

    ``previous``: an index of an earlier corpus snapshot made with the same encoder; blocks
    whose content is unchanged copy their vectors from its datastore and its trained FAISS
    index is reused, and where the new corpus extends its corpus (a source added), its BM25 index
    is extended (incremental backfill). ``progress``: show progress bars (a terminal); else
    long stages log their progress. Each stage's seconds, and for a new index the plan's
    estimate of them, go to the log and to the active MLflow run (``seconds.*``, ``plan_seconds.*``),
    and so does the precision the corpus is embedded in (param ``precision``; ``auto`` resolved here).
    """
    params = params or IndexParams()
    corpus = params.corpus or newest_corpus(params.store)
    encoder = embedding_encoder(resolve_encoder(params.model, params.store))  # a query encoder's passage encoder
    if not params.vectors:
        if previous is not None and open_index(previous).vectors:
            raise ValueError(f"index {previous} holds vectors: a backfill of it builds vectors too")
        seconds: dict[str, float] = {}
        with timed(seconds, "bm25"):
            url = build_bm25_index_task(corpus, encoder, previous)
        get_run_logger().info("index stages: bm25 %.1f s (BM25 alone, no vectors)", seconds["bm25"])
        if mlflow.active_run() is not None:
            mlflow.log_metrics({"seconds.bm25": seconds["bm25"]})
        return url
    reuse = open_index(previous).datastore if previous else None
    config = params.config()
    logger = get_run_logger()
    precision = embedding_precision(encoder, params.precision)
    logger.info("embedding precision: %s (asked: %s)", precision, params.precision)
    if mlflow.active_run() is not None:
        mlflow.log_param("precision", precision)
    with dask_cluster(params.cluster.dask_address, params.cluster.n_workers, params.store) as address:
        plan = {} if previous else log_plan(corpus, encoder, config, address, precision)
        seconds: dict[str, float] = {}
        with timed(seconds, "embedding"):
            datastore = build_datastore_task(
                corpus, params.store, encoder, reuse, address, precision, params.batch_tokens, progress
            )
        with timed(seconds, "faiss"):
            faiss_files = build_faiss_task(datastore, config, previous, address, progress)
        with timed(seconds, "bm25"):
            bm25_files = build_bm25_task(datastore, config, previous)
        with timed(seconds, "articles"):
            articles_files = build_articles_task(datastore, config, previous)
        url = commit_index_task(datastore, config, previous, {**faiss_files, **bm25_files, **articles_files})
    logger.info(
        "index stages: %s",
        ", ".join(f"{k} {v:.1f} s" + (f" (plan {plan[k]:.1f} s)" if k in plan else "") for k, v in seconds.items()),
    )
    if mlflow.active_run() is not None:
        mlflow.log_metrics(
            {f"seconds.{k}": v for k, v in seconds.items()} | {f"plan_seconds.{k}": v for k, v in plan.items()}
        )
    return url


def log_plan(
    corpus: str, encoder: str | None, config: IndexConfig, address: str, precision: Precision
) -> dict[str, float]:
    """Log the index a corpus will get and what each stage will cost on the cluster's worker threads
    (embedding at this machine's measured rate in ``precision``); returns the seconds planned per stage."""
    with dask_client(address) as client:
        threads = worker_threads(client)
    choice = corpus_choice(corpus, encoder, config)
    plan = {
        "embedding": embedding_seconds(corpus, encoder, threads, precision),
        "faiss": choice.train_s + choice.encode_s / threads,
        "bm25": choice.bm25_s if config.bm25 else 0.0,
    }
    logger = get_run_logger()
    for what, value in choice.rows():
        logger.info("index plan: %s: %s", what, value)
    logger.info(
        "index plan: embedding: %s on %d worker threads in %s",
        duration_in_one_unit(plan["embedding"]),
        threads,
        precision,
    )
    return plan


@contextmanager
def timed(seconds: dict[str, float], stage: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    seconds[stage] = time.perf_counter() - started
