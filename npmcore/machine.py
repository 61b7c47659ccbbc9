"""This machine: its CPU, and the rates measured on it once and cached (the plan's estimates are made of them).

A rate file is ``{cache}/{kind}/{digest of the machine}-{what}.json`` (:func:`npmcore.storage.cache_dir`):
``{"machine": …, "what": …, "rates": {name: value}}``, written under a temporary name and renamed, so a
reader sees a whole file or none. The machine is described by whoever measures (the CPU's model and flags
and the library versions the rate depends on; a GPU's name): another machine, or another version, measures
again. A rate taken while another job held the cores all along is cached too slow: delete the file.
"""

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from npmcore.storage import cache_dir

log = logging.getLogger(__name__)


def has_gpu_driver() -> bool:
    """Whether the kernel runs an NVIDIA or AMD GPU driver (``/proc/driver/nvidia``, ``/dev/kfd``): a machine
    where torch may find a GPU (only importing torch, seconds, can tell)."""
    return Path("/proc/driver/nvidia").exists() or Path("/dev/kfd").exists()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; none where there is no such file)."""
    return frozenset(_cpuinfo().get("flags", "").split())


def cpu_name() -> str:
    return _cpuinfo().get("model name", "unknown CPU")


def cpu_description(flags: frozenset[str]) -> str:
    """The CPU's model and its sorted ``flags`` (:func:`cpu_flags`): two machines of one description compute alike."""
    return f"{cpu_name()} {' '.join(sorted(flags))}"


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo``."""
    path = Path("/proc/cpuinfo")
    text = path.read_text() if path.is_file() else ""
    fields = (line.partition(":") for line in text.split("\n\n")[0].splitlines())
    return {key.strip(): value.strip() for key, _, value in fields}


def measured_rates(
    kind: str, machine: str, what: str, measure: Callable[[], dict[str, float]], cache: Path | None = None
) -> dict[str, float]:
    """The rates of ``what`` on ``machine``: cached in ``{cache}/{kind}/``, else ``measure()`` now (then cached)."""
    path = (cache or cache_dir()) / kind / f"{hashlib.sha256(machine.encode()).hexdigest()[:16]}-{what}.json"
    if path.is_file():
        return json.loads(path.read_text())["rates"]
    rates = measure()
    _write_atomically(path, json.dumps({"machine": machine, "what": what, "rates": rates}, indent=2))
    return rates


def _write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path``, written under a temporary name and renamed (a reader sees all or nothing);
    a cache that cannot be written only costs measuring again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(partial, path)
    except OSError as e:
        log.warning("rates cannot be cached in %s (%s): each process measures again", path, e)
