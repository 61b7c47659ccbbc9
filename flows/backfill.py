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

from flows.index import IndexParams, build_index, dask_runner, resolve_encoder
from flows.ingest import ingest_corpus
from flows.params import ClusterParams, IngestParams, StoreURL, default_store
from flows.train import tracking_uri
from npmcore.cluster import dask_client
from npmcore.encoder import cached_encoder, encoder_fingerprint
from npmcore.indexer import KIND as INDEX
from npmcore.storage import list_snapshots, read_manifest
from npmcore.tracking import tracking


class BackfillParams(BaseModel):
    dump: str = Field(description="The new dump: a pages-articles XML(.bz2) path or URL (s3://…).")
    dump_date: date = Field(description="Date of the dump (YYYY-MM-DD), logged with the new snapshots.")
    store: StoreURL = Field(default_factory=default_store, description="Store root URL (env NPM_STORE).")
    model: str | None = Field(None, description="Encoder (path, cached name or models:/npm-encoder@champion); empty = the default encoder.")
    previous: str | None = Field(None, description="Index of the previous dump; empty = the newest index in the store made with this encoder.")
    pages_per_partition: int = Field(200, ge=1, description="Dump pages per Dask partition (and datastore shard).")
    cluster: ClusterParams = Field(default_factory=ClusterParams)
    experiment: str = Field("npm-backfill", description="MLflow experiment.")


def check_dump(url: str) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        raise FileNotFoundError(f"dump {url} does not exist")


def newest_index(store: str, fingerprint: str, excluding_corpus: str) -> str | None:
    """The newest index of ``store`` made with encoder weights ``fingerprint`` over another corpus."""
    found = [
        url for url, m in list_snapshots(store, INDEX)
        if m.config["encoder_fingerprint"] == fingerprint and m.inputs[0]["corpus_id"] != excluding_corpus
    ]
    return found[-1] if found else None


@flow(name="backfill_dump")
def backfill_dump(params: BackfillParams) -> dict[str, str | None]:
    """Ingest a new dump and index it incrementally; returns the corpus, the new index and the previous one."""
    check_dump(params.dump)
    uri = tracking_uri(params.store)  # an unreachable MLflow server fails now, not after the indexing
    start = time.perf_counter()
    with dask_client(params.cluster.dask_address, params.cluster.n_workers) as client:
        cluster = ClusterParams(dask_address=client.scheduler.address)  # both stages on one cluster: its workers stay warm
        encoder = resolve_encoder(params.model, params.store)
        fingerprint = encoder_fingerprint(cached_encoder(encoder)[1])
        earlier = params.previous or newest_index(params.store, fingerprint, excluding_corpus="")  # its corpus: pages not to parse again
        ingest_params = IngestParams(
            inputs=[params.dump], format="mediawiki", store=params.store, cluster=cluster, pages_per_partition=params.pages_per_partition,
            previous=read_manifest(earlier).inputs[0]["corpus"] if earlier else None,
        )
        corpus = ingest_corpus(ingest_params)
        corpus_id = read_manifest(corpus).id
        previous = params.previous or newest_index(params.store, fingerprint, corpus_id)
        index_params = IndexParams(store=params.store, corpus=corpus, model=encoder, cluster=cluster)
        index = build_index.with_options(task_runner=dask_runner(cluster))(index_params, previous)
    datastore = read_manifest(read_manifest(index).inputs[0]["datastore"])
    with tracking(uri, params.experiment), mlflow.start_run(run_name=f"backfill {params.dump_date}"):
        mlflow.log_params({
            "dump": params.dump, "dump_date": params.dump_date.isoformat(), "corpus": corpus, "corpus_id": corpus_id,
            "index": index, "previous_index": previous, "encoder": params.model or "default",
            "encoder_fingerprint": datastore.config["encoder_fingerprint"],
        })
        blocks, reused = datastore.counts["blocks"], datastore.counts["reused_blocks"]
        mlflow.log_metrics({
            "blocks": blocks, "reused_blocks": reused, "reembedded_fraction": (blocks - reused) / max(blocks, 1),
            "seconds": time.perf_counter() - start,
        })
    return {"corpus": corpus, "index": index, "previous": previous}
