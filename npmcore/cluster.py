"""Dask clusters: a LocalCluster by default, or an existing scheduler by address."""

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from distributed import Client, LocalCluster, as_completed

log = logging.getLogger(__name__)
Item = TypeVar("Item")
Result = TypeVar("Result")


def local_cluster_options(n_workers: int | None = None) -> dict:
    """The LocalCluster of every command that is given no scheduler: one single-threaded worker
    process per core (default), no dashboard. Torch and tokenizers parallelise inside a task
    poorly; Dask parallelises across shards well."""
    return {"n_workers": n_workers, "threads_per_worker": 1, "processes": True, "dashboard_address": None}


class ClusterError(RuntimeError):
    """The Dask scheduler cannot be reached."""


CONNECT_TIMEOUT_S = 10.0  # how long a command tries to reach a Dask scheduler before it fails


def check_scheduler(address: str) -> None:
    """Fail within :data:`CONNECT_TIMEOUT_S` with :class:`ClusterError` when the scheduler cannot be reached."""
    with dask_client(address):
        pass


@contextmanager
def dask_cluster(address: str | None = None, n_workers: int | None = None) -> Iterator[str]:
    """The scheduler address a flow's stages share: ``address`` itself (checked to answer), or
    that of a LocalCluster started for the duration of the block."""
    if address:
        check_scheduler(address)
        yield address
        return
    with LocalCluster(**local_cluster_options(n_workers)) as cluster:
        # the scheduler lives in this process: its INFO lines (every task's client connecting and
        # leaving, with a traceback when one leaves mid-message) would bury the pipeline's own
        logging.getLogger("distributed").setLevel(logging.WARNING)
        log.info("started a local Dask cluster with %d workers at %s", len(cluster.workers), cluster.scheduler_address)
        yield cluster.scheduler_address


@contextmanager
def dask_client(
    address: str | None = None, n_workers: int | None = None, timeout_s: float | None = None
) -> Iterator[Client]:
    """A Dask client for the duration of the block.

    Args:
        address: scheduler address (``tcp://host:8786``) of an existing cluster; None
            starts a LocalCluster of single-threaded worker processes.
        n_workers: LocalCluster size (default: one per core); ignored with ``address``.
        timeout_s: how long to try to reach ``address`` before failing (None: :data:`CONNECT_TIMEOUT_S`).
    """
    if address:
        timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
        try:
            client = Client(address, timeout=f"{timeout_s}s")
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"cannot reach the Dask scheduler at {address} within {timeout_s:g} s: {e}") from e
        log.info("using Dask scheduler %s (%d workers)", address, len(client.scheduler_info(n_workers=-1)["workers"]))
        with client:
            yield client
        return
    with LocalCluster(**local_cluster_options(n_workers)) as cluster, Client(cluster) as client:
        log.info("started a local Dask cluster with %d workers", len(cluster.workers))
        yield client


def worker_threads(client: Client) -> int:
    """Threads of all the cluster's workers together."""
    return sum(w["nthreads"] for w in client.scheduler_info(n_workers=-1)["workers"].values())


def map_bounded(fn: Callable[[Item], Result], items: Iterable[Item], client: Client | None) -> Iterator[Result]:
    """Run ``fn`` over ``items``: in this process, or on Dask with at most two tasks per
    worker in flight (items may be a lazy stream). Results come in completion order."""
    if client is None:
        yield from map(fn, items)
        return
    max_in_flight = 2 * max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
    pending = as_completed()
    try:
        for item in items:
            pending.add(client.submit(fn, item, pure=False))
            while pending.count() >= max_in_flight:
                yield next(pending).result()
        for future in pending:
            yield future.result()
    finally:  # on an error, stop what is still queued before the caller cleans up
        client.cancel(list(pending.futures))
