"""Serve the deployments of ``infra/prefect.yaml`` from one process (Prefect's ``serve``): no work
pool, no worker. A run started from the Prefect UI (or by a schedule) runs in a subprocess of
this one, in the working folder (so ``./npm-store`` is the store), until Ctrl-C. A server runs
the deployments of the same file through a work pool instead (``prefect deploy``, docs/operate.md)."""

import urllib.request
from pathlib import Path

import yaml
from prefect.deployments.runner import RunnerDeployment
from prefect.flows import load_flow_from_entrypoint
from prefect.schedules import Cron
from prefect.settings import PREFECT_API_URL

ROOT = Path(__file__).resolve().parents[1]
PREFECT_YAML = ROOT / "infra" / "prefect.yaml"
LOCAL_SERVER = "http://127.0.0.1:4200/api"  # where `prefect server start` listens by default


def deployments(path: Path = PREFECT_YAML) -> list[RunnerDeployment]:
    """The file's deployments (name, description, parameters, schedules), bound to this process."""
    found = []
    for spec in yaml.safe_load(path.read_text())["deployments"]:
        flow = load_flow_from_entrypoint(str(ROOT / spec["entrypoint"]))
        schedules = [Cron(s["cron"], timezone=s.get("timezone")) for s in spec.get("schedules", [])]
        found.append(
            flow.to_deployment(
                spec["name"],
                description=spec.get("description"),
                parameters=spec.get("parameters"),
                schedules=schedules,
            )
        )
    return found


def server_api() -> str:
    """The API of a running Prefect server: ``PREFECT_API_URL``, else a local ``prefect server start``'s.
    Raises ValueError, naming the way out, when it does not answer within 10 s."""
    url = PREFECT_API_URL.value() or LOCAL_SERVER
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            response.read()
    except OSError as e:
        raise ValueError(
            f"no Prefect server answers at {url} ({e}): start one with `prefect server start` "
            "(or point PREFECT_API_URL at yours)"
        ) from None
    return url
