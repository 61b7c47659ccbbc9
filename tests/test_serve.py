"""`npmcore serve`, the demo's last command, as a newcomer runs it: against a running `prefect server start`
(a server of this module's own), it serves the deployments of infra/prefect.yaml, and a run triggered as from
the UI runs in it."""

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BIN, ROOT, api, run_training_deployment, stop, wait_for

SERVED = ["index_rebuild/index-rebuild", "train_encoder/train", "backfill_dump/backfill-dump"]


@pytest.fixture(scope="module")
def served(prefect_server, tmp_path_factory, news_path) -> Iterator[tuple[dict, Path]]:
    """`npmcore serve` in the project folder, with a small corpus in its store; yields the environment of
    the server's clients and the log of the serving process."""
    from npmcore.corpus.ingest import ingest
    from npmcore.corpus.partitions import IngestConfig

    folder = tmp_path_factory.mktemp("served")
    ingest([news_path], str(folder / "store"), IngestConfig(max_tokens=64))
    env = {**prefect_server, "NPM_STORE": str(folder / "store")}
    env.pop("MLFLOW_TRACKING_URI", None)
    for name in SERVED:  # the session's server may hold them deployed to a work pool (tests/test_servers.py)
        forget(env, name)
    with (folder / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [BIN / "npmcore", "serve"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: all(served_here(env, name) for name in SERVED), 300, "npmcore serve registers its deployments")
        yield env, folder / "serve.log"
    finally:
        stop(process)


def forget(env: dict, name: str) -> None:
    """Delete a deployment from the server, if it has one of that name."""
    try:
        deployment = api(env, f"/deployments/name/{name}")
    except OSError:  # 404: none
        return
    url = f"{env['PREFECT_API_URL']}/deployments/{deployment['id']}"
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=30).close()


def served_here(env: dict, name: str) -> bool:
    try:
        return api(env, f"/deployments/name/{name}")["work_pool_name"] is None
    except OSError:  # 404 until it is registered
        return False


def test_npmcore_serve_serves_the_deployments_of_prefect_yaml_without_a_work_pool(served):
    env, _ = served
    for name in SERVED:
        assert api(env, f"/deployments/name/{name}")["work_pool_name"] is None, name
    train = api(env, "/deployments/name/train_encoder/train")
    assert train["parameters"]["params"] == {"preset": "cpu-quality", "promote": True}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_training_run_triggered_as_from_the_ui_runs_in_the_serving_process(served):
    env, log = served
    _, state = run_training_deployment(env, "the serving process")
    assert state["type"] == "COMPLETED", log.read_text()[-5000:]
