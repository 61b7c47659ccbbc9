"""Ingestion task: raw corpora to a corpus snapshot, partitions mapped over a Dask cluster."""

from prefect import task

from npmcore.cluster import dask_client
from npmcore.corpus.ingest import ingest
from npmcore.corpus.inputs import input_bytes
from npmcore.corpus.partitions import IngestConfig
from npmcore.progress import shard_progress
from tasks import HOUR, is_transient


@task(
    name="ingest-corpus",
    retries=2,
    retry_delay_seconds=[5, 30],
    retry_condition_fn=is_transient,
    timeout_seconds=12 * HOUR,
)
def ingest_corpus_task(
    inputs: list[str],
    store: str,
    config: IngestConfig,
    dask_address: str,
    progress: bool,
    previous: str | None = None,
    extends: str | None = None,
) -> str:
    """Ingest ``inputs`` into ``store`` (copying unchanged dump pages from ``previous``, or extending the
    corpus ``extends``); returns the snapshot URL."""
    with (
        dask_client(dask_address) as client,
        shard_progress("ingesting", input_bytes(inputs), terminal=progress) as on_shard,
    ):
        return ingest(inputs, store, config, client, on_shard=on_shard, previous=previous, extends=extends)
