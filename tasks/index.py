"""Index-building tasks: the datastore (shards mapped over a Dask cluster), then FAISS, BM25, the articles' table and
the commit."""

from prefect import task

from npmcore.cluster import dask_client
from npmcore.forward import BATCH_TOKENS, Precision
from npmcore.index.bm25_index import build_bm25_index
from npmcore.index.datastore import build_datastore, plan_datastore
from npmcore.index.indexer import (
    IndexConfig,
    build_articles_files,
    build_bm25_files,
    build_faiss_files,
    commit_index,
    existing_index,
    plan_index,
)
from npmcore.progress import token_progress
from npmcore.storage import FileEntry
from tasks import HOUR, is_transient


@task(
    name="build-datastore",
    retries=2,
    retry_delay_seconds=[10, 60],
    retry_condition_fn=is_transient,
    timeout_seconds=24 * HOUR,
)
def build_datastore_task(
    corpus: str,
    store: str,
    encoder: str | None,
    reuse: str | None,
    dask_address: str,
    precision: Precision,
    batch_tokens: int = BATCH_TOKENS,
    progress: bool = False,
) -> str:
    """Embed every block of a corpus in ``precision`` (a retry resumes: finished shards are kept); ``reuse``: a
    datastore of the same encoder and precision whose vectors unchanged blocks copy."""
    with dask_client(dask_address) as client:
        total = plan_datastore(corpus, store, encoder, batch_tokens, reuse, precision).tokens
        with token_progress("embedding", total, terminal=progress) as show:
            on_shard = lambda shard: show(shard.tokens)  # noqa: E731
            return build_datastore(corpus, store, encoder, client, batch_tokens, on_shard, reuse, precision)


@task(name="build-faiss", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient, timeout_seconds=12 * HOUR)
def build_faiss_task(
    datastore: str, config: IndexConfig, trained: str | None, dask_address: str, progress: bool = False
) -> dict[str, FileEntry]:
    """Train the FAISS index on a sample, encode the shards on the workers, gather them (``trained``:
    an index snapshot whose trained FAISS index is reused); a retry resumes."""
    plan = plan_index(datastore, config, trained)
    if existing_index(plan):
        return {}
    with dask_client(dask_address) as client:
        with token_progress("indexing", plan.choice.tokens, terminal=progress) as show:
            return build_faiss_files(plan, client, show)


@task(name="build-bm25", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient, timeout_seconds=12 * HOUR)
def build_bm25_task(datastore: str, config: IndexConfig, trained: str | None) -> dict[str, FileEntry]:
    """The Lucene index of the blocks, for BM25-restricted open-set queries."""
    plan = plan_index(datastore, config, trained)
    return {} if existing_index(plan) else build_bm25_files(plan)


@task(name="build-articles", retries=1, retry_delay_seconds=30, retry_condition_fn=is_transient, timeout_seconds=HOUR)
def build_articles_task(datastore: str, config: IndexConfig, trained: str | None) -> dict[str, FileEntry]:
    """The table of the corpus's article openings: what says of what kind a candidate answer is."""
    plan = plan_index(datastore, config, trained)
    return {} if existing_index(plan) else build_articles_files(plan)


@task(name="commit-index", retries=1, retry_delay_seconds=10, retry_condition_fn=is_transient)
def commit_index_task(datastore: str, config: IndexConfig, trained: str | None, files: dict[str, FileEntry]) -> str:
    """The index snapshot's manifest, written last; returns its URL (an existing one as it is)."""
    plan = plan_index(datastore, config, trained)
    return existing_index(plan) or commit_index(plan, files)


@task(
    name="build-bm25-index",
    retries=1,
    retry_delay_seconds=30,
    retry_condition_fn=is_transient,
    timeout_seconds=12 * HOUR,
)
def build_bm25_index_task(corpus: str, encoder: str | None, previous: str | None = None) -> str:
    """The index snapshot of BM25 alone of a corpus (no vectors); returns its URL (an existing one as it is).
    ``previous``: an index whose corpus this one extends (its Lucene index extended, not built again)."""
    return build_bm25_index(corpus, encoder, previous)
