"""The Prefect deployments in infra/prefect.yaml point at real flows with valid parameters and schedules."""

from pathlib import Path

import pytest
import yaml
from prefect.client.schemas.schedules import CronSchedule
from prefect.flows import load_flow_from_entrypoint

ROOT = Path(__file__).resolve().parents[1]
DEPLOYMENTS = {d["name"]: d for d in yaml.safe_load((ROOT / "infra" / "prefect.yaml").read_text())["deployments"]}


def test_the_three_deployments_exist():
    assert set(DEPLOYMENTS) == {"index-rebuild", "train", "backfill-dump"}
    assert {d["work_pool"]["name"] for d in DEPLOYMENTS.values()} == {"npm"}


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_entrypoints_load_and_parameters_validate(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # entrypoints are relative to the project root, as for `prefect deploy`
    deployment = DEPLOYMENTS[name]
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    given = deployment.get("parameters", {}).get("params", {})
    params = flow.validate_parameters({"params": given})["params"]
    assert is_within(given, params.model_dump(mode="json"))  # every value given arrives, typed


def is_within(given: dict, dumped: dict) -> bool:
    return all(is_within(v, dumped[k]) if isinstance(v, dict) else dumped[k] == v for k, v in given.items())


def test_index_rebuild_runs_weekly_with_the_champion_encoder():
    deployment = DEPLOYMENTS["index-rebuild"]
    (schedule,) = deployment["schedules"]
    CronSchedule(cron=schedule["cron"], timezone=schedule["timezone"])  # raises on an invalid cron string
    assert deployment["parameters"]["params"]["model"] == "models:/npm-encoder@champion"


def test_the_compose_stack_is_closed_by_default():
    """Ports on 127.0.0.1 unless the operator opts in, Prefect and MLflow behind credentials from .env,
    Dask speaking mutual TLS only: nobody reaches a server by finding its port."""
    compose = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())
    services = compose["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("${NPM_BIND_ADDRESS:-127.0.0.1}:"), (name, port)
    shared = compose["x-npm"]["environment"]
    assert shared["PREFECT_SERVER_API_AUTH_STRING"] == shared["PREFECT_API_AUTH_STRING"]
    assert shared["PREFECT_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING:?")  # no default: it must be set
    assert "--app-name basic-auth" in services["mlflow"]["command"]
    assert (
        shared["DASK_SCHEDULER_ADDRESS"].startswith("tls://")
        and shared["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] == "true"
    )
    assert (
        "--protocol tls" in services["dask-scheduler"]["command"] and "--tls-cert" in services["dask-worker"]["command"]
    )
    example = (ROOT / "infra" / ".env.example").read_text()
    assert "--host 0.0.0.0" in services["api"]["command"]  # and so refuses to start without NPM_API_TOKEN
    for variable in ("PREFECT_AUTH_STRING", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY", "NPM_API_TOKEN"):
        assert f"{variable}=\n" in example  # documented, empty: secrets are the operator's


def test_npmcore_serve_serves_the_same_deployments_without_a_work_pool(monkeypatch):
    from flows.serve import deployments

    monkeypatch.chdir(ROOT)
    served = {d.name: d for d in deployments()}
    assert set(served) == set(DEPLOYMENTS)
    for name, deployment in served.items():
        assert deployment.parameters == DEPLOYMENTS[name].get("parameters", {}) and deployment.work_pool_name is None
    (schedule,) = served["index-rebuild"].schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone) == ("0 3 * * 0", "UTC")


def test_npmcore_serve_names_the_way_out_without_a_server():
    from conftest import free_port
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from typer.testing import CliRunner

    from flows.cli import app

    # nothing listens there; as a setting, not the environment: Prefect read that when it was imported, and
    # another test of this process may have pointed the settings at a running server
    with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{free_port()}/api"}):
        result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2 and "start one with `prefect server start`" in " ".join(result.output.split())
