"""Pipeline commands: the demo, the main job on the embedded default corpus."""

import sys
from typing import Annotated

import typer

from flows.cli.common import DaskAddress, Precision, Store, Workers, cluster_params, command, console
from flows.params import IngestParams, absolute_store
from npmcore.storage import open_snapshot

app = typer.Typer()
PANEL = "Pipeline"


DEMO_BATCH = 8  # --train-steps: a short run from scratch shows the training stage, not a useful encoder
DEMO_QUERY = "Anarchism is a political philosophy that advocates [MASK] societies."


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
    """The main job (flow pipeline) on the embedded default corpus: ingest, (train), index, evaluate, a query."""
    from flows.prefect_api import prefect_api

    with prefect_api(imports=["flows.pipeline"]):  # its imports while a temporary server starts
        from flows.evaluate import EvalParams
        from flows.index import IndexParams
        from flows.pipeline import CLOZE_TEST, PipelineParams, pipeline
        from flows.train import TrainParams

        params = PipelineParams(
            ingest=IngestParams(
                store=store, cluster=cluster_params(dask_address, workers), pages_per_partition=25
            ),  # shards embedded in parallel
            train=TrainParams(store=store, steps=train_steps, batch_size=DEMO_BATCH) if train_steps else None,
            index=IndexParams(store=store, precision=precision),
            evaluate=EvalParams(tasks=["cloze"], data=str(CLOZE_TEST), store=store),
            queries=[DEMO_QUERY],
        )
        result = pipeline(params, progress=sys.stderr.isatty())
    from flows.output import demo_story
    from npmcore.tracking import tracking_uri

    encoder = (
        f"{result.encoder}, trained {train_steps} steps of {DEMO_BATCH} sequences from MiniLM-L6"
        if train_steps
        else "the shipped NPM-trained MiniLM-L6 (npmcore/checkpoints/npm-minilm-l6)"
    )
    uri = tracking_uri(absolute_store(store))
    story = demo_story(result, open_snapshot(result.corpus), encoder, str(CLOZE_TEST), uri)
    console.print(story, highlight=False, crop=False)  # its commands are whole lines, however long
