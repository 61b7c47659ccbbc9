"""MLflow's process state around npmcore.tracking's blocks, and the check that a trained encoder is registered."""

import re

import mlflow
import pytest
from mlflow import MlflowClient

from npmcore.tracking import REGISTERED_MODEL, check_registered, tracking


def test_a_tracking_block_leaves_no_store_behind_for_the_next_client(tmp_path):
    """Issue 38: after a block on store A, a client of store B given only B's tracking URI read A's
    model registry (MLflow keeps the registry URI in a process global), so B's encoder looked lost."""
    a, b = (f"sqlite:///{tmp_path / name}.db" for name in ("a", "b"))
    MlflowClient(tracking_uri=b, registry_uri=b).create_registered_model(REGISTERED_MODEL)
    before = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    with tracking(a, "a run's experiment"):
        assert (mlflow.get_tracking_uri(), mlflow.get_registry_uri()) == (a, a)
    assert (mlflow.get_tracking_uri(), mlflow.get_registry_uri()) == before
    assert MlflowClient(tracking_uri=b).get_registered_model(REGISTERED_MODEL).name == REGISTERED_MODEL


def test_an_encoder_missing_from_the_stores_registry_fails_the_check(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri, registry_uri=uri).create_registered_model(REGISTERED_MODEL)
    with pytest.raises(RuntimeError, match=f"models:/npm-encoder/1 is not in the model registry at {re.escape(uri)}"):
        check_registered(f"models:/{REGISTERED_MODEL}/1", uri)
