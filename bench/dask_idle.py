"""CPU an idle local Dask cluster of two workers costs: Dask's defaults against :func:`npmcore.cluster.local_cluster`.

Usage: python bench/dask_idle.py [--seconds 30]

Each cluster is started, left to settle for 8 s, then the CPU time of this process (the scheduler and the
nannies) and of its children (the workers) is read over ``--seconds``. Prints one JSON line:
``{"default_core_share", "local_cluster_core_share", "seconds", "cpu"}`` (shares of one core).
"""

import argparse
import json
import time
from collections.abc import Callable

import psutil
from distributed import LocalCluster
from newcomer import cpu

from npmcore.cluster import local_cluster


def cpu_seconds() -> float:
    me = psutil.Process()
    return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])


def idle_share(start: Callable[[], LocalCluster], seconds: float) -> float:
    """The share of one core the cluster ``start`` returns spends over ``seconds`` doing nothing."""
    with start():
        time.sleep(8)
        before = cpu_seconds()
        time.sleep(seconds)
        return round((cpu_seconds() - before) / seconds, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    seconds = parser.parse_args().seconds
    default = idle_share(
        lambda: LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None), seconds
    )
    tuned = idle_share(lambda: local_cluster(2), seconds)
    figures = {"default_core_share": default, "local_cluster_core_share": tuned, "seconds": seconds, "cpu": cpu()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
