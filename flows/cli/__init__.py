"""The ``npmcore`` command line: each command parses its options, calls one flow or library
function, and prints. Errors a user can fix print one line and exit with status 2.

One module per group of commands, each a panel of ``npmcore --help``; what they share is in ``common``."""

import gc

import typer

from flows.cli import data, demo, evaluation, index_query, operations, training
from flows.cli.interrupts import stopped_by_signals

app = typer.Typer(help="NPM, the Nonparametric Masked Language Model: pipeline commands.", no_args_is_help=True)
for group in (demo, data, training, index_query, evaluation, operations):
    app.add_typer(group.app)


def main() -> None:
    """The ``npmcore`` program. What its command made stays until the process ends: exempt from the
    collection at exit, which took 3 s of a cached `npmcore demo` (Prefect's, MLflow's, transformers' objects)."""
    try:
        with stopped_by_signals():
            app()
    finally:
        gc.freeze()
