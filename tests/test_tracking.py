"""MLflow's process state around npmcore.tracking's blocks, and the check that a trained encoder is registered."""

import re
import sqlite3
import subprocess
import sys

import mlflow
import pytest
from mlflow import MlflowClient

from npmcore.tracking import REGISTERED_MODEL, check_registered, tracking
from npmcore.tracking_store import default_tracking_uri


def test_a_tracking_block_leaves_no_store_behind_for_the_next_client(tmp_path):
    """Issue 38: after a block on store A, a client of store B given only B's tracking URI read A's
    model registry (MLflow keeps the registry URI in a process global), so B's encoder looked lost."""
    a, b = (default_tracking_uri(str(tmp_path / name)) for name in ("a", "b"))
    MlflowClient(tracking_uri=b, registry_uri=b).create_registered_model(REGISTERED_MODEL)
    before = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    with tracking(a, "a run's experiment"):
        assert (mlflow.get_tracking_uri(), mlflow.get_registry_uri()) == (a, a)
    assert (mlflow.get_tracking_uri(), mlflow.get_registry_uri()) == before
    assert MlflowClient(tracking_uri=b).get_registered_model(REGISTERED_MODEL).name == REGISTERED_MODEL


def test_an_encoder_missing_from_the_stores_registry_fails_the_check(tmp_path):
    uri = default_tracking_uri(str(tmp_path))
    MlflowClient(tracking_uri=uri, registry_uri=uri).create_registered_model(REGISTERED_MODEL)
    with pytest.raises(RuntimeError, match=f"models:/npm-encoder/1 is not in the model registry at {re.escape(uri)}"):
        check_registered(f"models:/{REGISTERED_MODEL}/1", uri)


def contents(uri: str) -> tuple[dict, list, list]:
    """A database's tables (columns, indexes, foreign keys), its migration and its experiments. Not the SQL text of
    its tables, nor the order of its indexes: MLflow's migrations vary those from one run to the next."""
    with sqlite3.connect(uri.removeprefix("sqlite:///")) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        schema = {
            table: (
                db.execute(f"PRAGMA table_info('{table}')").fetchall(),
                sorted(row[1:] for row in db.execute(f"PRAGMA index_list('{table}')")),  # not its sequence number
                sorted(row[2:] for row in db.execute(f"PRAGMA foreign_key_list('{table}')")),
            )
            for table in tables
        }
        version = db.execute("SELECT * FROM alembic_version").fetchall()
        experiments = db.execute("SELECT name, lifecycle_stage, artifact_location FROM experiments").fetchall()
    return schema, version, experiments


def test_a_stores_database_is_a_copy_of_an_empty_one_that_mlflow_reads_as_one_it_made(tmp_path, monkeypatch):
    """Made, as the demo makes it, in a process of its own beside the command's imports: one that loads no
    encoder framework (they took that process 20 s of a 2-core machine's start, compiling what the command did)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    made = f"sqlite:///{tmp_path / 'made.db'}"  # MLflow makes it, migrations and all
    code = (
        "import sys; from npmcore.tracking_store import tracking_uri; "
        "print(tracking_uri(sys.argv[1])); print([m for m in ('torch', 'transformers') if m in sys.modules])"
    )
    made_by = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True, check=True
    )
    seeded, loaded = made_by.stdout.splitlines()
    assert loaded == "[]"
    empty = tmp_path / "cache" / "npmcore" / "mlflow" / f"empty-{mlflow.__version__}.db"
    assert (tmp_path / "store" / "mlflow.db").read_bytes() == empty.read_bytes()
    for uri in (made, seeded):
        MlflowClient(uri).search_experiments()  # MLflow adds the default experiment to each
    assert contents(seeded) == contents(made)
    with tracking(seeded, "npm-train"), mlflow.start_run():
        mlflow.log_metric("loss", 1.0)
    assert default_tracking_uri(str(tmp_path / "store")) == seeded  # a database there is never replaced
    assert [e.name for e in MlflowClient(seeded).search_experiments()] == ["npm-train", "Default"]
    assert (tmp_path / "store" / "mlflow.db").read_bytes() != empty.read_bytes()
    assert [p.name for p in (tmp_path / "store").iterdir()] == ["mlflow.db"]  # no partial copy left
