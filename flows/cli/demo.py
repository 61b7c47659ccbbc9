"""Pipeline commands: the demo, the main job on the embedded default corpus.

A rerun that has nothing to do costs a check of its snapshots: the demo keeps its last result in the store
(``demo.json``) under a key of everything the result depends on (its options, the MLflow URI, the bytes of the
default corpus, the cloze facts, the shipped encoder and this package's code). When the key matches and the corpus
and index it names are intact (their sha256, the datastore's sizes) and the store serves what it served, the result
is printed again without starting Prefect, Dask or MLflow; anything else runs the pipeline, whose stages reuse what
they find built.
"""

import hashlib
import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import fsspec
import typer

from flows.cli.common import DaskAddress, Precision, Store, Workers, cluster_params, command, console
from flows.params import CLOZE_TEST, ClusterParams, IngestParams, absolute_store
from flows.results import PipelineResult
from npmcore import __version__
from npmcore.corpus.readers import default_corpus
from npmcore.storage import SnapshotError, existing_snapshot, join, open_snapshot, replace_json

if TYPE_CHECKING:  # imported where used: the flows take seconds to import
    from flows.pipeline import PipelineParams

app = typer.Typer()
PANEL = "Pipeline"


DEMO_BATCH = 8  # --train-steps: a short run from scratch shows the training stage, not a useful encoder
DEMO_QUERY = "Anarchism is a political philosophy that advocates [MASK] societies."
RECORD = "demo.json"  # in the store: the last demo's result, its key and its MLflow URI
CODE = ("npmcore", "flows", "tasks")  # the package's folders, code and shipped encoder


@app.command(name="demo", rich_help_panel=PANEL)
@command
def demo_command(
    store: Store = "npm-store",
    train_steps: Annotated[
        int,
        typer.Option(
            min=0,
            help="Train an encoder from scratch (MiniLM-L6 as published) for this many steps; 0: the shipped encoder.",
        ),
    ] = 0,
    precision: Precision = "auto",
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """The main job (flow pipeline) on the embedded default corpus: ingest, (train), index, evaluate, a query.
    A rerun with nothing to do prints the stored result after checking its snapshots (a few seconds)."""
    store = absolute_store(store)
    key = demo_key(store, train_steps, precision)
    if (stored := unchanged_result(store, key)) is not None:
        result, uri, at = stored
        when = at[:16].replace("T", " ")
        console.print(f"[dim]Up to date (nothing rerun): the demo of {when} UTC, snapshots checked[/]")
    else:
        result, uri = run_demo(store, train_steps, precision, cluster_params(dask_address, workers))
        at = datetime.now(UTC).isoformat(timespec="seconds")
        replace_json(join(store, RECORD), {"key": key, "at": at, "tracking_uri": uri, "result": result.model_dump()})
    from flows.output import demo_story

    encoder = (
        f"{result.encoder}, trained {train_steps} steps of {DEMO_BATCH} sequences from MiniLM-L6"
        if train_steps
        else "the shipped NPM-trained MiniLM-L6 (npmcore/checkpoints/npm-minilm-l6)"
    )
    story = demo_story(result, open_snapshot(result.corpus), encoder, str(CLOZE_TEST), uri)
    console.print(story, highlight=False, crop=False)  # its commands are whole lines, however long


def run_demo(store: str, train_steps: int, precision: str, cluster: ClusterParams) -> tuple[PipelineResult, str]:
    """The pipeline flow on the default corpus; its result and the MLflow URI it was tracked at."""
    # the store's MLflow database (a first run's: 10 s of MLflow's migrations) made by a process of its own from
    # the start, beside this one's imports and the temporary Prefect server's start
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        database = pool.submit(tracking_database, store)
        from flows.prefect_api import prefect_api

        def prepare() -> None:  # while a temporary Prefect server starts
            import flows.pipeline  # noqa: F401 (its imports: seconds)

            database.result()  # its error, if any, raised here
            pool.shutdown()  # its process done: not kept through the pipeline

        with prefect_api(meanwhile=prepare):
            from flows.pipeline import pipeline

            result = pipeline(demo_params(store, train_steps, precision, cluster), progress=sys.stderr.isatty())
    return result, database.result()


def demo_params(store: str, train_steps: int, precision: str, cluster: ClusterParams) -> "PipelineParams":
    """The pipeline's parameters for the demo: the default corpus in shards of 25 pages (embedded in parallel)."""
    from flows.evaluate import EvalParams
    from flows.index import IndexParams
    from flows.pipeline import PipelineParams
    from flows.train import TrainParams

    return PipelineParams(
        ingest=IngestParams(store=store, cluster=cluster, pages_per_partition=25),
        train=TrainParams(store=store, steps=train_steps, batch_size=DEMO_BATCH) if train_steps else None,
        index=IndexParams(store=store, precision=precision),
        evaluate=EvalParams(tasks=["cloze"], data=str(CLOZE_TEST), store=store),
        queries=[DEMO_QUERY],
    )


def tracking_database(store: str) -> str:
    """:func:`~npmcore.tracking_store.tracking_uri` of ``store`` (its MLflow database made when there is none yet)."""
    from npmcore.tracking_store import tracking_uri

    return tracking_uri(store)


def demo_key(store: str, train_steps: int, precision: str) -> str:
    """sha256 of what the demo's result depends on: its options, the MLflow URI asked for, and the bytes of the
    default corpus, the cloze facts and every file of the package (its code, the shipped encoder)."""
    digest = hashlib.sha256(
        json.dumps([store, train_steps, precision, os.environ.get("MLFLOW_TRACKING_URI"), __version__]).encode()
    )
    root = Path(__file__).resolve().parents[2]
    code = sorted(
        p for folder in CODE for p in (root / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    for path in [*map(Path, default_corpus()), CLOZE_TEST, *code]:
        digest.update(f"{path.name}:{path.stat().st_size}:".encode())
        with path.open("rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()


def unchanged_result(store: str, key: str) -> tuple[PipelineResult, str, str] | None:
    """The stored result, its MLflow URI and when it was made, if its key is ``key``, its corpus and index are
    intact, the store serves what it served then and its MLflow database is there; else None (run again)."""
    from npmcore.serve.serving import read_serving, verify_index

    try:
        with fsspec.open(join(store, RECORD)) as f:
            record = json.load(f)
        result, uri = PipelineResult.model_validate(record["result"]), record["tracking_uri"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):  # none, or not one this version wrote whole
        return None
    if record.get("key") != key:
        return None
    if existing_snapshot(result.corpus) is None:
        return None
    try:
        verify_index(result.index)
    except SnapshotError:
        return None
    pointer = read_serving(store)
    if (pointer and pointer.index) != result.serving:
        return None
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None
    return result, uri, record["at"]
