"""Where MLflow runs go: ``MLFLOW_TRACKING_URI`` (a server, checked), or a SQLite database inside a local store.

Light to import (no torch, transformers, nor MLflow before it makes a database), so that a command can make its
store's database in a process of its own while it imports the rest (:mod:`flows.cli.demo`).
"""

import logging
import os
import shutil
from importlib.metadata import version
from pathlib import Path

import requests
import sqlalchemy

from npmcore.storage import cache_dir

log = logging.getLogger(__name__)


class TrackingError(RuntimeError):
    """The MLflow tracking server cannot be reached."""


def check_server(uri: str, timeout_s: float = 10) -> None:
    """Fail within ``timeout_s`` with :class:`TrackingError` when ``uri`` is an MLflow server
    (http/https) that does not answer ``/health``; MLflow's own client would retry for minutes.
    Database and file URIs are not checked."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        requests.get(f"{uri.rstrip('/')}/health", timeout=timeout_s).raise_for_status()
    except requests.RequestException as e:
        raise TrackingError(
            f"cannot reach the MLflow server at {uri} within {timeout_s:g} s ({type(e).__name__}): start it "
            "(`mlflow server …`) or unset MLFLOW_TRACKING_URI to log into the store's own database"
        ) from e


def tracking_uri(store: str) -> str:
    """``MLFLOW_TRACKING_URI`` (a server must answer within 10 s), or a SQLite store inside a local store root."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        check_server(uri)
        return uri
    return default_tracking_uri(store)


def default_tracking_uri(store: str) -> str:
    """A SQLite tracking store inside a local store root (used when MLFLOW_TRACKING_URI is unset)."""
    if "://" in store and not store.startswith("file://"):
        raise ValueError(f"store {store} is not local: set MLFLOW_TRACKING_URI to an MLflow server (mlflow server …)")
    root = Path(store.removeprefix("file://")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    database = root / "mlflow.db"
    if not database.exists():
        seed_database(database)
    return f"sqlite:///{database}"


def seed_database(database: Path) -> None:
    """Put an empty MLflow database, its tables made, at ``database`` (a path nothing is at): a copy of one made
    once per MLflow version in the cache. MLflow making one itself runs its schema's migrations from the first,
    2 to 5 s a database; copied it takes milliseconds, and MLflow adds the default experiment as to its own.
    Linked into place, never over a database another process made meanwhile; any failure (a cache or a store
    that cannot be written) is logged and left to MLflow, which then makes the database itself or says why not."""
    partial = database.with_name(f".{database.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(empty_database(), partial)
        os.link(partial, database)
    except FileExistsError:  # another process made it first
        pass
    except (OSError, sqlalchemy.exc.SQLAlchemyError) as e:
        log.info("MLflow makes %s itself (no copy of an empty one: %s)", database, e)
    finally:
        partial.unlink(missing_ok=True)


def empty_database() -> Path:
    """An MLflow database with its tables and nothing in them, made once per MLflow version in the cache."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine

    path = cache_dir() / "mlflow" / f"empty-{version('mlflow')}.db"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        engine = create_sqlalchemy_engine(f"sqlite:///{partial}")
        try:
            _initialize_tables(engine)  # what MLflow's store runs on an empty database
        finally:
            engine.dispose()
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path
