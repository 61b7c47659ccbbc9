"""Index-building tasks: one task per datastore shard (run on the flow's Dask task runner), then FAISS + BM25."""

from prefect import task
from prefect_dask import get_dask_client

from npmcore.datastore import DatastorePlan, ShardResult, commit_datastore, embed_shard, existing_datastore, plan_datastore
from npmcore.indexer import IndexConfig, build_index
from tasks import is_transient


@task(name="plan-datastore")
def plan_datastore_task(corpus: str, store: str, encoder: str | None, reuse: str | None = None) -> tuple[DatastorePlan, str | None]:
    """The datastore plan (``reuse``: a datastore whose vectors unchanged blocks copy), and
    the URL of the finished datastore if it already exists."""
    plan = plan_datastore(corpus, store, encoder, reuse=reuse)
    return plan, existing_datastore(plan)


@task(name="embed-shard", retries=2, retry_delay_seconds=[10, 60], retry_condition_fn=is_transient)
def embed_shard_task(plan: DatastorePlan, index: int) -> ShardResult:
    """Embed one corpus shard (skipped when a previous run finished it)."""
    return embed_shard(plan, index)


@task(name="commit-datastore")
def commit_datastore_task(plan: DatastorePlan, results: list[ShardResult]) -> str:
    return commit_datastore(plan, results)


@task(name="build-index", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient)
def build_index_task(datastore: str, config: IndexConfig, trained: str | None = None) -> str:
    """FAISS (IVF shards added in parallel on the flow's Dask cluster, then merged; ``trained``:
    an index snapshot whose trained FAISS index is reused) and BM25."""
    with get_dask_client() as client:
        return build_index(datastore, config, client, trained)
