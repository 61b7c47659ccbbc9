"""Flow ``ingest_corpus``: raw dumps and news collections to a verified corpus snapshot."""

from prefect import flow

from flows.params import IngestParams
from npmcore.cluster import dask_cluster
from npmcore.corpus.partitions import IngestConfig
from npmcore.corpus.readers import default_corpus
from tasks.ingest import ingest_corpus_task


@flow(name="ingest_corpus")
def ingest_corpus(params: IngestParams | None = None, progress: bool = False) -> str:
    """Ingest ``params.inputs`` (default: the embedded corpus) on Dask; returns the snapshot URL."""
    params = params or IngestParams()
    config = IngestConfig(
        format=params.format,
        encoder=params.encoder,
        max_tokens=params.max_tokens,
        partition_bytes=int(params.partition_mb * (1 << 20)),
        pages_per_partition=params.pages_per_partition,
        lang=params.lang,
        strict=params.strict,
        dump_date=params.dump_date and params.dump_date.isoformat(),
    )
    with dask_cluster(params.cluster.dask_address, params.cluster.n_workers, params.store) as address:
        return ingest_corpus_task(
            params.inputs or default_corpus(), params.store, config, address, progress, params.previous, params.extends
        )
