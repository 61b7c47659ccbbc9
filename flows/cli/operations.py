"""Serving and operations commands: the deployments served, the query service and its serving pointer,
a Dask cluster's certificates."""

import os
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import Store, command, console
from flows.params import absolute_store

app = typer.Typer()
PANEL = "Serving and operations"


@app.command(name="serve", rich_help_panel=PANEL)
@command
def serve_command() -> None:
    """Serve the deployments of infra/prefect.yaml (train, index-rebuild, backfill-dump) until Ctrl-C.

    They run in this process, started from the UI of a running `prefect server start`.
    Its API: PREFECT_API_URL (default 127.0.0.1:4200)."""
    from prefect import serve
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.serve import deployments, server_api

    url = server_api()
    os.environ["PREFECT_API_URL"] = url  # the runs' subprocesses report to it too
    with temporary_settings({PREFECT_API_URL: url}):
        serve(*deployments())


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command(name="api", rich_help_panel=PANEL)
@command
def api_command(
    store: Store = "npm-store",
    index: Annotated[
        str | None, typer.Option(help="Serve this index snapshot (default: the store's serving pointer, followed).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind; another than loopback needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding the bearer token requests must send (or env NPM_API_TOKEN)."),
    ] = None,
    max_batch: Annotated[int, typer.Option(min=1, help="Queries per batch.")] = 16,
    max_wait_ms: Annotated[float, typer.Option(min=0, help="How long a request waits for others to batch with.")] = 3,
    queue_limit: Annotated[int, typer.Option(min=1, help="Queued queries beyond which requests get 503.")] = 64,
    poll_s: Annotated[float, typer.Option(min=0.1, help="Seconds between reads of the serving pointer.")] = 2,
    precision: Annotated[
        str,
        typer.Option(
            help="Precision of the query encoder: auto (bf16 on a GPU, and on a CPU with AMX or AVX512_BF16 where a "
            "probe finds it faster; else f32), f32, or bf16 (a GPU, or a CPU with those units)."
        ),
    ] = "auto",
    model: Annotated[
        str | None,
        typer.Option(
            help="Encoder of the queries: a query encoder (models:/npm-query-encoder/N or its folder) trained for "
            "the served index's encoder, whose passages it reads (default: each index's own encoder)."
        ),
    ] = None,
) -> None:
    """Answer queries over HTTP from the store's serving index, swapping in the index the serving pointer moves to.

    POST /v1/predict, /v1/classify; GET /v1/index, /livez, /readyz, /metrics, and / for a page."""
    import uvicorn

    from npmcore.index.precision import SETTINGS
    from npmcore.serve.api import create_app
    from npmcore.serve.service import Settings
    from npmcore.serve.serving import serving_index
    from npmcore.tracking import resolve_encoder

    if precision not in SETTINGS:
        raise ValueError(f"--precision must be one of {', '.join(SETTINGS)}, got {precision!r}")
    token = token_file.read_text().strip() if token_file else os.environ.get("NPM_API_TOKEN") or None
    if host not in LOOPBACK and not token:
        raise ValueError(
            f"--host {host} is reachable from other machines: give a token (--token-file or NPM_API_TOKEN)"
        )
    settings = Settings(
        store=absolute_store(store),
        index=index and absolute_store(index),
        token=token,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        queue_limit=queue_limit,
        poll_s=poll_s,
        precision=precision,
        model=resolve_encoder(model, absolute_store(store)),
    )
    if settings.index is None:
        serving_index(settings.store)  # a store that serves nothing stops here, with the way out
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


serving_app = typer.Typer(help="The store's serving pointer: the index `npmcore api` answers from.")
app.add_typer(serving_app, name="serving", rich_help_panel=PANEL)


@serving_app.command(name="show")
@command
def serving_show(store: Store = "npm-store") -> None:
    """The index served now, why, since when, and the earlier ones (for rollback)."""
    from npmcore.serve.serving import read_serving

    pointer = read_serving(absolute_store(store))
    if pointer is None:
        console.print("no serving pointer: `npmcore api` serves nothing until `npmcore serving set INDEX`")
        return
    console.print(f"{pointer.index}\n  {pointer.reason}, {pointer.at}")
    for earlier in pointer.previous:
        console.print(f"  before: {earlier}")


@serving_app.command(name="set")
@command
def serving_set(
    index: Annotated[str, typer.Argument(help="An index snapshot URL of the store.")], store: Store = "npm-store"
) -> None:
    """Point the store at an index snapshot (the service swaps it in)."""
    from npmcore.serve.serving import set_serving

    print(set_serving(absolute_store(store), absolute_store(index)).index)


@serving_app.command(name="rollback")
@command
def serving_rollback(store: Store = "npm-store") -> None:
    """Point the store back at the index it served before."""
    from npmcore.serve.serving import rollback_serving

    print(rollback_serving(absolute_store(store)).index)


@app.command(name="dask-certs", rich_help_panel=PANEL)
@command
def dask_certs_command(
    folder: Annotated[Path, typer.Argument(help="Folder to write ca.pem and a certificate and key per role into.")],
    host: Annotated[list[str], typer.Option(help="Name or IP address of the scheduler and workers (repeatable).")],
) -> None:
    """Write a private certificate authority and certificates for a Dask cluster with mutual TLS.

    One certificate and key each for the scheduler, the workers and the client.
    A client without a certificate of this authority is refused (see docs/operate.md)."""
    from npmcore.security import write_dask_certificates

    print(write_dask_certificates(folder, host))
