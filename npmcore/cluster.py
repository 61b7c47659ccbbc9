"""Dask clusters: a LocalCluster by default, or an existing scheduler by address."""

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import dask
import fsspec
from distributed import Client, LocalCluster, WorkerPlugin, as_completed
from fsspec.implementations.local import LocalFileSystem

from npmcore.storage import StoreError, check_store

log = logging.getLogger(__name__)
Item = TypeVar("Item")
Result = TypeVar("Result")


# A local cluster has no dashboard: nobody reads what its workers' profiler samples (every 10 ms by default) or
# its event-loop and system monitors record (every 20 ms, 500 ms). At these intervals an idle cluster of two
# workers costs 2.5% of a core instead of 17% (bench/dask_idle.py, AMD EPYC); a worker's memory is still checked
# twice a second.
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "500ms",
}


def local_cluster(n_workers: int | None = None) -> LocalCluster:
    """The LocalCluster of every command that is given no scheduler: one single-threaded worker
    process per core (default), no dashboard, monitored at :data:`LOCAL_CLUSTER_CONFIG`'s intervals (its
    workers get the configuration from their nannies). Torch and tokenizers parallelise inside a task
    poorly; Dask parallelises across shards well."""
    with dask.config.set(LOCAL_CLUSTER_CONFIG):
        return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None)


class ClusterError(RuntimeError):
    """The Dask scheduler cannot be reached."""


CONNECT_TIMEOUT_S = 10.0  # how long a command tries to reach a Dask scheduler before it fails


def check_scheduler(address: str) -> None:
    """Fail within :data:`CONNECT_TIMEOUT_S` with :class:`ClusterError` when the scheduler cannot be reached."""
    with dask_client(address):
        pass


def store_problem(store: str) -> str | None:
    """Why this process cannot use ``store`` (None: it can); runs on a worker."""
    try:
        check_store(store)
    except StoreError as e:
        return str(e)
    return None


class StoreAccess(WorkerPlugin):
    """Refuses a worker that cannot use the store (no credentials, say): it logs why in one line and
    closes, its nanny too, before it takes a task. Registered with the cluster, it checks the workers
    that join later as well."""

    name = "npmcore-store-access"

    def __init__(self, store: str):
        self.store = store

    def setup(self, worker) -> None:
        if (problem := store_problem(self.store)) is not None:
            log.error("Dask worker %s refused: %s", worker.address, problem)
            worker.loop.add_callback(worker.close, reason=f"npmcore: {problem}", nanny=True)


def admit_workers(client: Client, store: str) -> None:
    """Refuse the workers of ``client``'s cluster that cannot use ``store``, with a line each, now and as
    they join (:class:`StoreAccess`); fails with :class:`ClusterError` when none can."""
    refused = {worker: problem for worker, problem in client.run(store_problem, store).items() if problem}
    for worker, problem in refused.items():
        log.warning("Dask worker %s refused: %s", worker, problem)
    if refused and len(refused) == len(client.scheduler_info(n_workers=-1)["workers"]):
        raise ClusterError(
            f"no Dask worker at {client.scheduler.address} can use the store: {next(iter(refused.values()))}"
        )
    client.register_plugin(StoreAccess(store))


@contextmanager
def dask_cluster(address: str | None = None, n_workers: int | None = None, store: str | None = None) -> Iterator[str]:
    """The scheduler address a flow's stages share: ``address`` itself (checked to answer; with ``store``,
    its workers that cannot use the store are refused), or that of a LocalCluster started for the
    duration of the block (its workers share this process's environment)."""
    if address:
        with dask_client(address) as client:
            if store is not None:
                admit_workers(client, store)
        yield address
        return
    with local_cluster(n_workers) as cluster:
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
    with local_cluster(n_workers) as cluster, Client(cluster) as client:
        log.info("started a local Dask cluster with %d workers", len(cluster.workers))
        yield client


def check_readable(paths: list[str], client: Client | None) -> None:
    """Fail with a :class:`ValueError` naming the path and the workers when a worker of ``client``'s cluster
    cannot see a local path it is to read: a file on this machine only, while the workers run on others."""
    if client is None:
        return
    for path in paths:
        fs, local = fsspec.core.url_to_fs(path)
        if not isinstance(fs, LocalFileSystem):  # S3 and the like: the same for every worker
            continue
        blind = sorted(worker for worker, seen in client.run(os.path.exists, local).items() if not seen)
        if blind:
            raise ValueError(
                f"{path} is not on the machines of the Dask workers {', '.join(blind)}: put the inputs where "
                "every worker can read them (the store's S3 bucket, a shared filesystem)"
            )


def worker_threads(client: Client) -> int:
    """Threads of all the cluster's workers together."""
    return sum(w["nthreads"] for w in client.scheduler_info(n_workers=-1)["workers"].values())


def map_bounded(
    fn: Callable[..., Result], items: Iterable[Item], client: Client | None, shared: tuple[object, ...] = ()
) -> Iterator[Result]:
    """Run ``fn(item, *shared)`` over ``items``: in this process, or on Dask with at most two tasks per
    worker in flight (items may be a lazy stream). Results come in completion order. ``shared``: objects
    every call takes (a tokenizer), sent to each worker once (scattered), not with every task."""
    if client is None:
        yield from (fn(item, *shared) for item in items)
        return
    # hash=False: a key of its own per call (an equal object scattered again as the last call releases it would
    # lose its data under the new call's tasks: "lost dependencies")
    shared = tuple(client.scatter([s], broadcast=True, hash=False)[0] for s in shared)
    max_in_flight = 2 * max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
    pending = as_completed()
    try:
        for item in items:
            pending.add(client.submit(fn, item, *shared, pure=False))
            while pending.count() >= max_in_flight:
                yield next(pending).result()
        for future in pending:
            yield future.result()
    finally:  # on an error, stop what is still queued before the caller cleans up
        client.cancel(list(pending.futures))
