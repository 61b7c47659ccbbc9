"""Flow ``backfill_dump``: a new Wikipedia dump becomes a new corpus snapshot and index, incrementally.

The dump is ingested into its own corpus snapshot. Its blocks are matched by content
hash against the datastore of the previous index (same encoder): unchanged blocks copy
their vectors, only new and changed blocks are embedded, blocks of deleted or edited
articles are simply not carried over, and the previous index's trained FAISS index is
filled again instead of trained. The previous snapshots are immutable and stay
queryable, so a question can be answered against the old and the new corpus.
"""

import time
from datetime import date

import fsspec
import mlflow
from prefect import flow
from pydantic import BaseModel, Field

from flows.index import IndexParams, index_corpus
from flows.ingest import ingest_corpus
from flows.params import ClusterParams, IngestParams, StoreURL, default_store
from npmcore.cluster import dask_cluster
from npmcore.encoder import cached_encoder, encoder_fingerprint
from npmcore.snapshots import INDEX, IndexSnapshot, open_corpus, open_datastore, open_index
from npmcore.storage import list_snapshots
from npmcore.tracking import log_snapshot_input, resolve_encoder, tracking, tracking_uri
from tasks import link_runs


class BackfillParams(BaseModel):
    dump: str = Field(description="The new dump: a pages-articles XML(.bz2) path or URL (s3://…).")
    dump_date: date = Field(description="Date of the dump (YYYY-MM-DD), logged with the new snapshots.")
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    model: str | None = Field(
        None, description="Encoder (path, cached name or models:/npm-encoder@champion); empty = the default encoder."
    )
    previous: str | None = Field(
        None, description="Index of the previous dump; empty = the newest index in the store made with this encoder."
    )
    pages_per_partition: int = Field(200, ge=1, description="Dump pages per Dask partition (and datastore shard).")
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    experiment: str = Field("npm-backfill", description="MLflow experiment.")


def check_dump(url: str) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        raise FileNotFoundError(f"dump {url} does not exist")


class BackfillResult(BaseModel):
    corpus: str  # the new dump's corpus snapshot
    index: str  # and its index
    previous: str | None  # the index whose vectors and trained FAISS index were reused; None: a full build
    blocks: int
    reused_blocks: int  # blocks whose vectors were copied, not embedded again


def newest_index(store: str, fingerprint: str, excluding_corpus: str) -> IndexSnapshot | None:
    """The newest index of ``store`` made with encoder weights ``fingerprint`` over another corpus."""
    found = [IndexSnapshot(url, m) for url, m in list_snapshots(store, INDEX)]
    found = [i for i in found if i.encoder_fingerprint == fingerprint and i.corpus_id != excluding_corpus]
    return found[-1] if found else None


@flow(name="backfill_dump")
def backfill_dump(params: BackfillParams) -> BackfillResult:
    """Ingest a new dump and index it incrementally."""
    check_dump(params.dump)
    uri = tracking_uri(params.store)  # an unreachable MLflow server fails now, not after the indexing
    start = time.perf_counter()
    with dask_cluster(params.cluster.dask_address, params.cluster.n_workers) as address:
        cluster = ClusterParams(dask_address=address)  # both stages on one cluster: its workers stay warm
        encoder = resolve_encoder(params.model, params.store)
        fingerprint = encoder_fingerprint(cached_encoder(encoder)[1])
        # the corpus of the newest index: its unchanged pages are copied instead of parsed again
        earlier = (
            open_index(params.previous)
            if params.previous
            else newest_index(params.store, fingerprint, excluding_corpus="")
        )
        ingest_params = IngestParams(
            inputs=[params.dump],
            format="mediawiki",
            store=params.store,
            cluster=cluster,
            pages_per_partition=params.pages_per_partition,
            previous=earlier.corpus if earlier else None,
        )
        corpus = ingest_corpus(ingest_params)
        found = newest_index(params.store, fingerprint, open_corpus(corpus).manifest.id)
        previous = params.previous or (found.url if found else None)
        index = index_corpus(IndexParams(store=params.store, corpus=corpus, model=encoder, cluster=cluster), previous)
    datastore = open_datastore(open_index(index).datastore).manifest
    with tracking(uri, params.experiment), mlflow.start_run(run_name=f"backfill {params.dump_date}"):
        link_runs(uri)
        log_snapshot_input("corpus", corpus, "produced")
        log_snapshot_input("index", index, "produced")
        mlflow.log_params(
            {
                "dump": params.dump,
                "dump_date": params.dump_date.isoformat(),
                "corpus": corpus,
                "corpus_id": open_corpus(corpus).manifest.id,
                "index": index,
                "previous_index": previous,
                "encoder": params.model or "default",
                "encoder_fingerprint": datastore.config["encoder_fingerprint"],
            }
        )
        blocks, reused = datastore.counts["blocks"], datastore.counts["reused_blocks"]
        mlflow.log_metrics(
            {
                "blocks": blocks,
                "reused_blocks": reused,
                "reembedded_fraction": (blocks - reused) / max(blocks, 1),
                "seconds": time.perf_counter() - start,
            }
        )
    return BackfillResult(corpus=corpus, index=index, previous=previous, blocks=blocks, reused_blocks=reused)
