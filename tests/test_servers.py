"""The servers as an operator runs them: a real `prefect server start` with the deployments of
infra/prefect.yaml, its scheduler and a process worker; a Dask scheduler with mutual TLS."""

import asyncio
import os
import signal
import ssl
import subprocess
import time

import pytest
from conftest import BIN, ROOT, api, free_port, prefect, run_training_deployment, stop, wait_for
from distributed import Client
from distributed.comm import connect

from npmcore.security import dask_security, write_dask_certificates

DEPLOYMENTS = {"index_rebuild/index-rebuild", "train_encoder/train", "backfill_dump/backfill-dump"}


@pytest.fixture(scope="module")
def deployed(prefect_server) -> dict:
    """docs/operate.md's commands: a process work pool and `prefect deploy --all`."""
    prefect(prefect_server, "work-pool", "create", "npm", "--type", "process")
    prefect(prefect_server, "--no-prompt", "deploy", "--all", "--prefect-file", "infra/prefect.yaml")
    return prefect_server


def test_deploy_all_lists_the_deployments_and_the_scheduler_plans_the_weekly_rebuild(deployed):
    listed = prefect(deployed, "deployment", "ls")
    assert all(name in listed for name in DEPLOYMENTS), listed
    rebuild = api(deployed, "/deployments/name/index_rebuild/index-rebuild")
    scheduled = wait_for(
        lambda: api(
            deployed,
            "/flow_runs/filter",
            {
                "deployments": {"id": {"any_": [rebuild["id"]]}},
                "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
            },
        ),  # fmt: skip
        90,
        "the scheduler creates the index rebuild's upcoming runs",
    )
    for run in scheduled:  # Sundays, 03:00 UTC
        start = time.strptime(run["expected_start_time"][:19], "%Y-%m-%dT%H:%M:%S")
        assert (start.tm_wday, start.tm_hour, start.tm_min) == (6, 3, 0), run["expected_start_time"]
    train = api(deployed, "/deployments/name/train_encoder/train")
    assert train["parameters"]["params"] == {"preset": "cpu-quality", "promote": True}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_process_worker_runs_a_triggered_training_run_which_becomes_the_champion(deployed, tmp_path, news_path):
    """As from the UI: a run of the train deployment with small overrides, picked up by a worker."""
    from mlflow import MlflowClient

    from npmcore.corpus.ingest import ingest
    from npmcore.corpus.partitions import IngestConfig

    store = tmp_path / "store"
    ingest([news_path], str(store), IngestConfig(max_tokens=64))
    env = {**deployed, "NPM_STORE": str(store)}
    env.pop("MLFLOW_TRACKING_URI", None)
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [BIN / "prefect", "worker", "start", "--pool", "npm"], env=env, cwd=ROOT, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        run_id, state = run_training_deployment(env, "the worker")
        assert state["type"] == "COMPLETED", (tmp_path / "worker.log").read_text()[-5000:]
    finally:
        stop(worker)
    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    champion = client.get_model_version_by_alias("npm-encoder", "champion")  # index-rebuild can run now
    assert champion.tags["promotion.reason"] == "no champion yet" and "cpu-small" in champion.description
    run = client.get_run(champion.run_id)
    assert run.data.tags["preset"] == "cpu-small" and run.data.tags["prefect.flow_run_id"] == run_id
    assert [d.dataset.name.split()[0] for d in run.inputs.dataset_inputs] == ["corpus"]


async def handshake(address: str, connection_args: dict) -> None:
    """Open a connection to a Dask scheduler and ask it for its identity (raises when refused)."""
    comm = await connect(address, timeout=5, **connection_args)
    try:
        await comm.write({"op": "identity"})
        await comm.read()
    finally:
        comm.abort()


def test_a_dask_scheduler_with_the_projects_certificates_refuses_clients_without_one(tmp_path):
    certs = write_dask_certificates(tmp_path / "certs", ["127.0.0.1", "localhost"])
    strangers = write_dask_certificates(tmp_path / "strangers", ["127.0.0.1"])  # another authority
    address = f"tls://127.0.0.1:{free_port()}"
    files = [
        "--tls-ca-file",
        certs / "ca.pem",
        "--tls-cert",
        certs / "scheduler.pem",
        "--tls-key",
        certs / "scheduler-key.pem",
    ]
    with (tmp_path / "scheduler.log").open("wb") as log:
        scheduler = subprocess.Popen(
            [BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--protocol", "tls",
             "--no-dashboard", *map(str, files)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with Client(address, security=dask_security(certs, "client"), timeout="60s", set_as_default=False) as client:
            assert client.scheduler_info()["address"] == address  # the cluster's own client gets in
        asyncio.run(handshake(address, dask_security(certs, "client").get_connection_args("client")))  # the probe works
        no_certificate = ssl.create_default_context(cafile=certs / "ca.pem")  # trusts the server, shows nothing
        no_certificate.check_hostname = False
        refused = {
            "no client certificate": (address, {"ssl_context": no_certificate}),
            "another authority": (address, dask_security(strangers, "client").get_connection_args("client")),
            "no TLS": (address.replace("tls://", "tcp://"), {}),
        }
        for name, (where, args) in refused.items():
            with pytest.raises((OSError, TimeoutError)):
                asyncio.run(handshake(where, args))
            assert scheduler.poll() is None, name
    finally:
        os.killpg(scheduler.pid, signal.SIGKILL)
        scheduler.wait()
    assert oct((certs / "client-key.pem").stat().st_mode & 0o777) == "0o600"
