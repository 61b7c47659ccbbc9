"""Ingestion task: raw corpora to a corpus snapshot on a Dask cluster."""

from contextlib import nullcontext

from prefect import task

from npmcore.cluster import dask_client
from npmcore.ingest import IngestConfig, ingest
from npmcore.progress import shard_progress
from tasks import is_transient


@task(name="ingest-corpus", retries=2, retry_delay_seconds=[5, 30], retry_condition_fn=is_transient)
def ingest_corpus_task(
    inputs: list[str], store: str, config: IngestConfig, dask_address: str | None, n_workers: int | None, progress: bool,
    previous: str | None = None,
) -> str:
    """Ingest ``inputs`` into ``store`` (copying unchanged dump pages from ``previous``); returns the corpus snapshot URL."""
    with dask_client(dask_address, n_workers) as client, (shard_progress("ingesting") if progress else nullcontext()) as on_shard:
        return ingest(inputs, store, config, client, on_shard=on_shard, previous=previous)
