"""Flow ``build_index``: corpus snapshot -> datastore (a task per shard on Dask) -> FAISS + BM25 index snapshot."""

from prefect import flow, unmapped
from prefect_dask import DaskTaskRunner
from pydantic import BaseModel, Field

from flows.params import ClusterParams, StoreURL, default_store
from flows.train import newest_corpus, tracking_uri
from npmcore.indexer import IndexConfig
from npmcore.storage import read_manifest
from npmcore.tracking import export_encoder, tracking
from tasks.index import build_index_task, commit_datastore_task, embed_shard_task, plan_datastore_task


class IndexParams(BaseModel):
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    corpus: str | None = Field(None, description="Corpus snapshot URL; empty = the newest corpus snapshot in the store.")
    model: str | None = Field(
        None, description="Encoder: a local model folder, a cached Hugging Face name or a registry URI "
        "(models:/npm-encoder@champion); empty = the default MiniLM-L6.",
    )
    factory: str | None = Field(None, description="FAISS index-factory string (Flat, HNSW32, IVF1024,PQ32, …); empty = the largest PQ within 64 bytes/token (IVF-PQ above 20M tokens).")
    search_params: str | None = Field(None, description="Default FAISS search parameters stored with the index (nprobe=64); empty = automatic.")
    train_size: int = Field(100_000, ge=1_000, description="Vectors sampled to train the index.")
    on_disk: bool = Field(False, description="IVF only: keep the inverted lists in a memory-mapped file.")
    bm25: bool = Field(True, description="Also build the BM25 index for the restricted open-set mode.")
    cluster: ClusterParams = Field(default_factory=ClusterParams)

    def config(self) -> IndexConfig:
        return IndexConfig(
            factory=self.factory, search_params=self.search_params, train_size=self.train_size, on_disk=self.on_disk, bm25=self.bm25
        )


def resolve_encoder(model: str | None, store: str) -> str | None:
    """A loadable encoder location: registry URIs are exported into the store once."""
    if model is None or not model.startswith("models:/"):
        return model
    with tracking(tracking_uri(store), "npm-index"):
        return export_encoder(model, store)


@flow(name="build_index")
def build_index(params: IndexParams | None = None, previous: str | None = None) -> str:
    """Embed a corpus snapshot and build its index snapshot; returns the index URL.

    ``previous``: an index of an earlier corpus snapshot made with the same encoder; blocks
    whose content is unchanged copy their vectors from its datastore and its trained FAISS
    index is reused (incremental backfill). Run it with :func:`dask_runner` so that the
    per-shard tasks run on Dask workers.
    """
    params = params or IndexParams()
    corpus = params.corpus or newest_corpus(params.store)
    reuse = read_manifest(previous).inputs[0]["datastore"] if previous else None
    plan, datastore = plan_datastore_task(corpus, params.store, resolve_encoder(params.model, params.store), reuse)
    if datastore is None:
        shards = embed_shard_task.map(unmapped(plan), range(len(plan.shards)))
        datastore = commit_datastore_task(plan, shards.result())
    return build_index_task.submit(datastore, params.config(), previous).result()  # on a worker: it uses the cluster


def dask_runner(cluster: ClusterParams) -> DaskTaskRunner:
    """Prefect tasks on an existing Dask scheduler, or on a local cluster of single-threaded workers."""
    if cluster.dask_address:
        return DaskTaskRunner(address=cluster.dask_address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": cluster.n_workers, "threads_per_worker": 1, "processes": True, "dashboard_address": None})
