"""Index-building tasks: the datastore (shards mapped over a Dask cluster), then FAISS + BM25."""

from prefect import task

from npmcore.cluster import dask_client
from npmcore.datastore import build_datastore
from npmcore.indexer import IndexConfig, build_index
from tasks import HOUR, is_transient


@task(
    name="build-datastore",
    retries=2,
    retry_delay_seconds=[10, 60],
    retry_condition_fn=is_transient,
    timeout_seconds=24 * HOUR,
)
def build_datastore_task(corpus: str, store: str, encoder: str | None, reuse: str | None, dask_address: str) -> str:
    """Embed every block of a corpus (a retry resumes: finished shards are kept); ``reuse``: a
    datastore of the same encoder whose vectors unchanged blocks copy."""
    with dask_client(dask_address) as client:
        return build_datastore(corpus, store, encoder, client, reuse=reuse)


@task(name="build-index", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient, timeout_seconds=12 * HOUR)
def build_index_task(datastore: str, config: IndexConfig, trained: str | None, dask_address: str) -> str:
    """FAISS (IVF shards filled in parallel, then merged; ``trained``: an index snapshot whose
    trained FAISS index is reused) and BM25."""
    with dask_client(dask_address) as client:
        return build_index(datastore, config, client, trained)
