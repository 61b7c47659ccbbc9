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
