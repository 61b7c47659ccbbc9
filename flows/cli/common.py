"""What the commands of the ``npmcore`` CLI share: the console, the options several take, and the handling of
errors a user can fix (one line, exit status 2)."""

import functools
import sys
from collections.abc import Callable
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flows.output import Legible
from flows.params import ClusterParams
from npmcore.storage import SnapshotError

console = Console()
errors = Console(stderr=True)

Store = Annotated[str, typer.Option("--store", envvar="NPM_STORE", help="Store root: a path, file:// or s3:// URL.")]
DaskAddress = Annotated[
    str | None,
    typer.Option(
        "--dask-address", envvar="DASK_SCHEDULER_ADDRESS", help="Existing Dask scheduler; default: a local cluster."
    ),
]
Workers = Annotated[int | None, typer.Option("--workers", min=1, help="Local Dask workers (default: one per core).")]
ExcludeQueryWords = Annotated[
    bool,
    typer.Option(
        "--exclude-query-words/--allow-query-words",
        help="NPM phrases: never answer with a content word of the query (e.g. its subject's name); on the dev "
        "data this ties or wins for every encoder measured.",
    ),
]
ScoringOption = Annotated[
    str,
    typer.Option(
        help="NPM phrases: evidence (NPM's candidates ranked by what their passages say around them as well; the "
        "best on the dev data) or npm (the paper's scoring: summed similarities of each phrase's positions).",
    ),
]
Precision = Annotated[
    str,
    typer.Option(
        help="Precision of the encoder (embedding; eval: the queries too): auto (bf16 on a GPU, and on a CPU with "
        "AMX or AVX512_BF16 where a short probe finds it faster; else f32), f32, or bf16 (a GPU, or a CPU with those "
        "units). Part of the datastore's id: vectors of two precisions are never mixed.",
    ),
]
Lang = Annotated[str, typer.Option(help="WARC files: keep the articles in this language (ISO 639-1 code).")]
Strict = Annotated[
    bool, typer.Option("--strict", help="WARC files: stop at a bad record instead of counting and skipping it.")
]
# Errors a user can fix: bad input (CorpusError, EncoderError and QueryError are ValueErrors), a missing file, a
# broken snapshot, and an unreachable Dask scheduler or MLflow server. The last two are named, not imported: the
# CLI loads neither Dask nor MLflow (nor torch) before a command needs them, so `npmcore --help` answers in a second.
USER_ERRORS = (ValueError, FileNotFoundError, SnapshotError)
SERVICE_ERRORS = {
    "npmcore.cluster": ("ClusterError",),
    "npmcore.tracking_store": ("TrackingError",),
}


def is_user_error(error: Exception) -> bool:
    """Whether ``error`` is one of the errors above (a service's error can only come from its loaded module)."""
    loaded = tuple(
        getattr(sys.modules[module], name)
        for module, names in SERVICE_ERRORS.items()
        if module in sys.modules
        for name in names
    )
    return isinstance(error, USER_ERRORS + loaded) or store_failure(error) is not None


def store_failure(error: BaseException | None) -> str | None:
    """What an S3 store did, when ``error`` is its failure after botocore's retries (npmcore.storage.S3_CLIENT): it
    stopped answering (botocore's ConnectionError, HTTPClientError), or it answered with an error of its own, a 5xx
    (s3fs raises an OSError from botocore's ClientError; Dask keeps the cause of a worker's error)."""
    boto = sys.modules.get("botocore.exceptions")
    while boto is not None and error is not None:
        if isinstance(error, (boto.ConnectionError, boto.HTTPClientError)):
            return f"the S3 store stopped answering, retries included: {error}"
        if (
            isinstance(error, boto.ClientError)
            and error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500
        ):
            return f"the S3 store failed, retries included: {error}"
        error = error.__cause__
    return None


def fail(error: Exception) -> NoReturn:
    """Print ``error: …`` as one physical line whatever the console's width (a path or URL in it can be
    copied whole; the terminal folds it for the eye only), and exit with status 2."""
    text = store_failure(error) or str(error)
    errors.print(f"[bold red]error:[/] {escape(text)}", soft_wrap=True)
    raise typer.Exit(2)


def command(function: Callable) -> Callable:
    """A CLI command whose user errors (bad input, unreachable services) exit with status 2 and one line."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as e:
            if is_user_error(e):
                fail(e)
            raise

    return run


def cluster_params(dask_address: str | None, workers: int | None) -> ClusterParams:
    """The cluster options of a command; a given scheduler must answer within 10 s, before any flow starts."""
    params = ClusterParams(dask_address=dask_address, n_workers=workers)
    if params.dask_address:
        from npmcore.cluster import check_scheduler

        check_scheduler(params.dask_address)
    return params


def show(table: Table) -> None:
    """Print a table legibly at the console's width (wrapped or vertical when narrow; never a cut word)."""
    console.print(Legible(table))
