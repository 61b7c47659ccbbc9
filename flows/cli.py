"""The ``npmcore`` command line: each command parses its options, calls one flow or library
function, and prints. Errors a user can fix print one line and exit with status 2."""

import functools
import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flows.output import (
    Indented,
    Legible,
    counts_table,
    crawl_table,
    evaluation,
    highlight,
    number,
    score_parts,
    shown,
    table,
)
from flows.params import ClusterParams, IngestParams, absolute_store
from npmcore.corpus import FORMATS
from npmcore.snapshots import CORPUS
from npmcore.storage import SnapshotError, join, list_snapshots, open_snapshot

app = typer.Typer(help="NPM, the Nonparametric Masked Language Model: pipeline commands.", no_args_is_help=True)
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
Lang = Annotated[str, typer.Option(help="WARC files: keep the articles in this language (ISO 639-1 code).")]
Strict = Annotated[
    bool, typer.Option("--strict", help="WARC files: stop at a bad record instead of counting and skipping it.")
]
# Errors a user can fix: bad input (CorpusError, EncoderError and QueryError are ValueErrors), a missing file, a
# broken snapshot, and an unreachable Dask scheduler or MLflow server. The last two are named, not imported: this
# module loads neither Dask nor MLflow (nor torch), so `npmcore --help` answers in a second.
USER_ERRORS = (ValueError, FileNotFoundError, SnapshotError)
SERVICE_ERRORS = {
    "npmcore.cluster": ("ClusterError",),
    "npmcore.tracking": ("TrackingError",),
    # an S3 store that stopped answering mid-command, after botocore's retries (npmcore.storage.S3_CLIENT)
    "botocore.exceptions": ("ConnectionError", "HTTPClientError"),
}


def is_user_error(error: Exception) -> bool:
    """Whether ``error`` is one of the errors above (a service's error can only come from its loaded module)."""
    loaded = tuple(
        getattr(sys.modules[module], name)
        for module, names in SERVICE_ERRORS.items()
        if module in sys.modules
        for name in names
    )
    return isinstance(error, USER_ERRORS + loaded)


def fail(error: Exception) -> NoReturn:
    """Print ``error: …`` as one physical line whatever the console's width (a path or URL in it can be
    copied whole; the terminal folds it for the eye only), and exit with status 2."""
    text = str(error)
    if type(error).__module__ == "botocore.exceptions":
        text = f"the S3 store stopped answering, retries included: {text}"
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


@app.command(name="ingest")
@command
def ingest_command(
    inputs: Annotated[
        list[str] | None, typer.Argument(help="Files, folders or globs; none: the embedded default corpus.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"auto or one of {', '.join(FORMATS)}.")] = "auto",
    store: Store = "npm-store",
    encoder: Annotated[
        str | None, typer.Option(help="Tokenizer path or cached name (default: the default encoder's).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Maximum block length in encoder tokens.")] = 256,
    partition_mb: Annotated[
        float, typer.Option(min=0.01, help="MiB of an uncompressed line-based file per Dask partition.")
    ] = 8,
    pages_per_partition: Annotated[int, typer.Option(min=1, help="Dump pages per Dask partition.")] = 200,
    lang: Lang = "en",
    strict: Strict = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Ingest Wikipedia dumps, WikiExtractor output, news or CC-News WARC files into a verified corpus snapshot."""
    from flows.ingest import ingest_corpus

    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    params = IngestParams(
        inputs=inputs or [],
        format=fmt,
        store=store,
        encoder=encoder,
        max_tokens=max_tokens,
        partition_mb=partition_mb,
        pages_per_partition=pages_per_partition,
        lang=lang,
        strict=strict,
        cluster=cluster_params(dask_address, workers),
    )
    url = ingest_corpus(params, progress=sys.stderr.isatty())
    manifest = open_snapshot(url, verify=False)
    show(counts_table(manifest))
    if "articles" in manifest.counts:
        show(crawl_table(manifest.counts))
    print(url)


DEMO_BATCH = 8  # --train-steps: a short run from scratch shows the training stage, not a useful encoder
DEMO_QUERY = "Anarchism is a political philosophy that advocates [MASK] societies."


@app.command(name="demo")
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
            index=IndexParams(store=store),
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


@app.command(name="serve")
@command
def serve_command() -> None:
    """Serve the deployments of infra/prefect.yaml (train, index-rebuild, backfill-dump) from this process until
    Ctrl-C, to run from the UI of a running `prefect server start` (PREFECT_API_URL; default 127.0.0.1:4200)."""
    from prefect import serve
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.serve import deployments, server_api

    url = server_api()
    os.environ["PREFECT_API_URL"] = url  # the runs' subprocesses report to it too
    with temporary_settings({PREFECT_API_URL: url}):
        serve(*deployments())


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command(name="api")
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
) -> None:
    """Answer queries over HTTP from the store's serving index (POST /v1/predict, /v1/classify; GET /v1/index,
    /livez, /readyz, /metrics, and / for a page), swapping in the index the serving pointer moves to."""
    import uvicorn

    from npmcore.api import Settings, create_app

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
    )
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


serving_app = typer.Typer(help="The store's serving pointer: the index `npmcore api` answers from.")
app.add_typer(serving_app, name="serving")


@serving_app.command(name="show")
@command
def serving_show(store: Store = "npm-store") -> None:
    """The index served now, why, since when, and the earlier ones (for rollback)."""
    from npmcore.serving import read_serving

    pointer = read_serving(absolute_store(store))
    if pointer is None:
        console.print("no serving pointer: `npmcore api` serves the store's newest index")
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
    from npmcore.serving import set_serving

    print(set_serving(absolute_store(store), absolute_store(index)).index)


@serving_app.command(name="rollback")
@command
def serving_rollback(store: Store = "npm-store") -> None:
    """Point the store back at the index it served before."""
    from npmcore.serving import rollback_serving

    print(rollback_serving(absolute_store(store)).index)


@app.command(name="train")
@command
def train_command(
    corpus: Annotated[str | None, typer.Option(help="Corpus snapshot URL; default: the newest in the store.")] = None,
    store: Store = "npm-store",
    preset: Annotated[
        str,
        typer.Option(
            help="cpu-small (a short run), cpu-mlm (the masked-LM stage), cpu-quality (the shipped encoder's "
            "CPU recipe: NPM + 0.5 MLM), gpu-mlm, gpu-npm (one GPU) or paper (32 GPUs)."
        ),
    ] = "cpu-small",
    objective: Annotated[
        str | None,
        typer.Option(
            help="npm (span masking), npm-single (token masking) or mlm (masked-LM stage); default: the preset's."
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="Optimizer steps (default: the preset's; its warm-up keeps its share).")
    ] = None,
    batch_size: Annotated[int | None, typer.Option(help="Sequences per step (default: the preset's).")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate (default: the preset's).")] = None,
    warmup_steps: Annotated[
        int | None, typer.Option(help="Linear warm-up steps (default: the preset's share of --steps).")
    ] = None,
    mlm_weight: Annotated[
        float | None,
        typer.Option(
            help="NPM objectives: weight of an auxiliary MLM loss (default: the preset's; cpu-quality 0.5, else 0)."
        ),
    ] = None,
    rare_boost: Annotated[
        float | None,
        typer.Option(
            help="NPM: a span holding a date, a number or a rare token is this many times as likely to be masked "
            "(default: the preset's)."
        ),
    ] = None,
    prebatch: Annotated[
        int | None, typer.Option(help="NPM: the keys of this many earlier batches are extra negatives.")
    ] = None,
    encoder: Annotated[
        str | None,
        typer.Option(help="Initial encoder: path, cached name or models:/npm-encoder/N (e.g. the MLM stage's)."),
    ] = None,
    alias: Annotated[str | None, typer.Option(help="Registry alias for the new version, e.g. candidate.")] = None,
    promote: Annotated[
        bool, typer.Option(help="Make it npm-encoder@champion if it beats the champion on dev data.")
    ] = False,
    seed: int = 0,
) -> None:
    """Train an encoder (NPM, or the masked-LM stage before it); logs to MLflow and registers npm-encoder."""
    from flows.train import TrainParams, train_encoder

    params = TrainParams(
        store=store,
        corpus=corpus,
        preset=preset,
        objective=objective,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        warmup_steps=warmup_steps,
        mlm_weight=mlm_weight,
        rare_boost=rare_boost,
        prebatch=prebatch,
        encoder=encoder,
        alias=alias,
        promote=promote,
        seed=seed,
    )
    print(train_encoder(params, progress=sys.stderr.isatty()))


@app.command(name="promote")
@command
def promote_command(
    model: Annotated[str, typer.Argument(help="A registered version: models:/npm-encoder/N.")],
    store: Store = "npm-store",
    alias: Annotated[str, typer.Option(help="The alias to move.")] = "champion",
    force: Annotated[bool, typer.Option(help="Move the alias without evaluating.")] = False,
) -> None:
    """Point npm-encoder@champion at a version if it beats the current champion on the dev evaluation."""
    from flows.prefect_api import prefect_api
    from flows.promote import PromoteParams, promote

    with prefect_api():
        decision = promote(PromoteParams(model=model, store=store, alias=alias, force=force))
    console.print(f"{'promoted' if decision.promoted else 'kept'}: {decision.reason}")
    print(f"models:/npm-encoder@{alias} -> {model if decision.promoted else decision.champion}")


@app.command(name="register")
@command
def register_command(
    source: Annotated[str, typer.Argument(help="A training run folder (its newest checkpoint) or an encoder folder.")],
    store: Store = "npm-store",
    alias: Annotated[str | None, typer.Option(help="Registry alias for the new version, e.g. champion.")] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "npm-train",
) -> None:
    """Log a trained encoder to MLflow and register it as npm-encoder: the newest checkpoint of a run
    folder (e.g. from torchrun -m npmcore.train), or an encoder folder (e.g. returned by a GPU run)."""
    from npmcore.tracking import register_checkpoint, register_encoder, tracking_uri

    uri, path = tracking_uri(absolute_store(store)), absolute_store(source)
    if run_folder(path):
        print(register_checkpoint(path, uri, experiment, alias))
    else:
        print(register_encoder(path, uri, experiment, alias))


@app.command(name="export")
@command
def export_command(
    source: Annotated[
        str, typer.Argument(help="A training run folder, or an encoder folder (weights in parts or not).")
    ],
    out: Annotated[Path, typer.Option(help="Encoder folder to write.")],
    step: Annotated[
        int | None, typer.Option(help="Run folders: checkpoint step (default: the newest; 0: the initial encoder).")
    ] = None,
    part_mib: Annotated[
        float | None, typer.Option(help="Split the weights into files of at most this many MiB.")
    ] = None,
) -> None:
    """Write a checkpoint as an encoder folder: fp16 safetensors with the MLM head and the tokenizer."""
    from npmcore.encoder import export_fp16
    from npmcore.train import export_checkpoint

    part_bytes = int(part_mib * 2**20) if part_mib else None
    path = absolute_store(source)
    if run_folder(path):
        print(export_checkpoint(path, step, out, part_bytes))
    else:
        print(export_fp16(path, out, part_bytes))


@app.command(name="interpolate")
@command
def interpolate_command(
    first: Annotated[str, typer.Argument(help="Encoder folder A (with a trained MLM head).")],
    second: Annotated[str, typer.Argument(help="Encoder folder B: A's lineage (same architecture and tokenizer).")],
    weight: Annotated[float, typer.Option(help="Share of B: the result is (1 - weight) * A + weight * B.")],
    out: Annotated[Path, typer.Option(help="Encoder folder to write.")],
) -> None:
    """Mix the weights of two encoders of one lineage (fp16, MLM head included): e.g. the shipped
    encoder and a longer-trained continuation of it."""
    from npmcore.encoder import interpolate

    print(interpolate(absolute_store(first), absolute_store(second), weight, out))


def run_folder(path: str) -> bool:
    """Whether ``path`` is a training run folder (it holds checkpoints) rather than an encoder folder."""
    import fsspec

    fs, local = fsspec.core.url_to_fs(path)
    return fs.exists(f"{local.rstrip('/')}/checkpoints")


@app.command(name="bundle")
@command
def bundle_command(
    corpus: Annotated[str, typer.Argument(help="Corpus snapshot URL.")],
    out: Annotated[Path, typer.Option(help="File to write, named *.bundle.parquet.")],
    max_tokens: Annotated[
        int | None, typer.Option(min=1, help="Keep the first whole documents within this many tokens (default: all).")
    ] = None,
) -> None:
    """Write a corpus snapshot's training fields (token ids, documents, title lengths) into one compact file."""
    from npmcore.bundle import write_bundle

    info = write_bundle(absolute_store(corpus), out, max_tokens)
    size = out.stat().st_size
    console.print(f"{info.docs:,} documents, {info.blocks:,} blocks, {info.tokens:,} tokens: {size / 2**20:.1f} MiB")
    print(out)


@app.command(name="learning-curve")
@command
def learning_curve_command(
    run_id: Annotated[str, typer.Argument(help="MLflow run id of a training run (experiment npm-train).")],
    store: Store = "npm-store",
    task: Annotated[
        list[str] | None, typer.Option(help="Task evaluated at every checkpoint (repeatable; default mr and cloze).")
    ] = None,
    data: Annotated[str | None, typer.Option(help="The jsonl file of the cloze task (use a dev split).")] = None,
    split: Annotated[str, typer.Option(help="dev (tuning data; the default) or test.")] = "dev",
    limit: Annotated[int, typer.Option(min=1, help="Examples per task.")] = 100,
    held_out: Annotated[
        str | None, typer.Option(help="Corpus snapshot never trained on: the objective's metrics on it at every step.")
    ] = None,
    corpus: Annotated[
        str | None, typer.Option(help="Evaluate against this corpus snapshot instead of each task's reference corpus.")
    ] = None,
    step: Annotated[
        list[int] | None, typer.Option(help="Checkpoint step to evaluate (repeatable; default all, plus 0).")
    ] = None,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Evaluate a training run's checkpoints; logs eval.<task> (and heldout.<metric>) against the step into the run."""
    from flows.learning_curve import CurveParams, learning_curve
    from flows.prefect_api import prefect_api

    params = CurveParams(
        run_id=run_id,
        store=store,
        tasks=task or ([] if held_out else ["mr", "cloze"]),
        data=data,
        split=split,
        corpus=corpus and absolute_store(corpus),
        held_out=held_out and absolute_store(held_out),
        limit=limit,
        steps=step,
        cluster=cluster_params(dask_address, workers),
    )
    with prefect_api():
        points = learning_curve(params)
    names = sorted({t for p in points for t in p.scores})
    curve = table(number("step"), *map(number, names), title=f"learning curve of run {run_id} (its MLflow metrics)")
    for p in sorted(points, key=lambda p: p.step):
        curve.add_row(str(p.step), *(f"{p.scores[n]:.4f}" if n in p.scores else "–" for n in names))
    show(curve)


@app.command(name="index")
@command
def index_command(
    corpus: Annotated[str | None, typer.Option(help="Corpus snapshot URL; default: the newest in the store.")] = None,
    store: Store = "npm-store",
    model: Annotated[
        str | None,
        typer.Option(
            help="Encoder: model folder, cached HF name or models:/npm-encoder@champion (default: the shipped encoder)."
        ),
    ] = None,
    factory: Annotated[
        str | None,
        typer.Option(
            help="FAISS index-factory string, e.g. Flat, HNSW32, IVF1024,PQ32 (default: 32-byte PQ codes after an "
            "OPQ rotation, their shortlist re-scored from the datastore; IVF-PQ above 1M tokens)."
        ),
    ] = None,
    search_params: Annotated[str | None, typer.Option(help="Default FAISS search parameters, e.g. nprobe=64.")] = None,
    on_disk: Annotated[bool, typer.Option(help="IVF only: memory-mapped inverted lists.")] = False,
    rerank: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="kNN search re-scores the index's top k x N with the datastore's exact vectors (default: 3 for "
            "compressed exhaustive indexes, 4 for IVF, 1 for Flat).",
        ),
    ] = None,
    max_memory: Annotated[
        float | None,
        typer.Option(
            help="GiB of RAM the served index may hold: the default factory is chosen within it (IVF with "
            "memory-mapped lists when its codes do not fit).",
        ),
    ] = None,
    batch_tokens: Annotated[
        int,
        typer.Option(
            min=512,
            help="Padded tokens per encoder forward while embedding; on a GPU 131072 (an H200 embeds 598k tokens/s "
            "at 131072, 217k at 8192).",
        ),
    ] = 8192,
    bm25_only: Annotated[
        bool,
        typer.Option(
            "--bm25-only",
            help="Build an index of BM25 alone: nothing embedded, minutes instead of hours on a large corpus; "
            "BM25-restricted queries (system npm) encode their top passages per query, kNN search refuses it.",
        ),
    ] = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Embed a corpus snapshot (shards in parallel on Dask) and build its FAISS + BM25 index; prints its URL.
    The log states the index's plan first: its factory and why, its size, memory, training sample and time.
    With --bm25-only: the index of BM25 alone, nothing embedded."""
    from flows.index import IndexParams, index_corpus
    from flows.prefect_api import prefect_api

    params = IndexParams(
        store=store,
        corpus=corpus and absolute_store(corpus),
        model=model,
        factory=factory,
        search_params=search_params,
        on_disk=on_disk,
        rerank=rerank,
        max_memory_gb=max_memory,
        batch_tokens=batch_tokens,
        vectors=not bm25_only,
        cluster=cluster_params(dask_address, workers),
    )
    with prefect_api():
        url = index_corpus(params, progress=sys.stderr.isatty())
    manifest = open_snapshot(url, verify=False)
    show(counts_table(manifest))
    rerank = manifest.config.get("rerank") or 1
    if not manifest.config.get("vectors", True):
        console.print("BM25 alone: no token vectors (BM25-restricted queries encode their passages)")
    else:
        console.print(
            f"factory {manifest.config['factory']} ({manifest.config['search_params'] or 'no search parameters'}"
            + (f"; kNN re-scores k x {rerank} from the datastore)" if rerank > 1 else ")")
        )
    print(url)


@app.command(name="backfill")
@command
def backfill_command(
    dump: Annotated[
        list[str],
        typer.Argument(help="The new pages-articles dump, or a month of CC-News WARC files (paths, URLs or globs)."),
    ],
    date: Annotated[str, typer.Option(help="Date of the dump, YYYY-MM-DD; a month of WARC files: YYYY-MM.")],
    store: Store = "npm-store",
    model: Annotated[
        str | None,
        typer.Option(help="Encoder (path, cached name or models:/npm-encoder@champion; default: the shipped one)."),
    ] = None,
    previous: Annotated[
        str | None,
        typer.Option(
            help="Index of the previous dump, or whose corpus WARC files extend (default: the newest in the store "
            "with this encoder)."
        ),
    ] = None,
    lang: Lang = "en",
    strict: Strict = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Ingest a new dump, or add a month of CC-News WARC files to the corpus, and index it incrementally: only
    new or changed blocks are embedded (flow backfill_dump)."""
    from flows.backfill import BackfillParams, backfill_dump
    from flows.prefect_api import prefect_api

    params = BackfillParams(
        dump=dump,
        dump_date=date,
        store=store,
        model=model,
        previous=previous and absolute_store(previous),
        lang=lang,
        strict=strict,
        cluster=cluster_params(dask_address, workers),
    )
    with prefect_api():
        result = backfill_dump(params)
    console.print(f"corpus: [bold]{result.corpus}[/]\nprevious index: {result.previous or 'none (full build)'}")
    if "articles" in result.counts:
        show(crawl_table(result.counts))
    if result.vectors:
        console.print(
            f"blocks: {result.blocks:,}, vectors reused: {result.reused_blocks:,}, "
            f"embedded: {result.blocks - result.reused_blocks:,}"
        )
    else:
        console.print(f"blocks: {result.blocks:,}, BM25 alone: nothing embedded")
    print(result.index)


@app.command(name="query")
@command
def query_command(
    queries: Annotated[
        list[str], typer.Argument(help='Queries with one [MASK] each, e.g. "Thessaloniki is a city in [MASK]."')
    ],
    index_url: Annotated[str, typer.Option("--index", help="Index snapshot URL (from npmcore index).")],
    model: Annotated[str | None, typer.Option(help="Encoder (default: the one the index was built with).")] = None,
    single: Annotated[
        bool, typer.Option(help="One [MASK] vector, single-token answers (NPM single's inference).")
    ] = False,
    restrict: Annotated[
        bool, typer.Option(help="Search only the top BM25 passages, scored exactly (paper's open-set mode).")
    ] = True,
    k: Annotated[int, typer.Option(min=1, help="Tokens retrieved per query vector.")] = 4096,
    l_max: Annotated[int, typer.Option(min=1, help="Longest answer in tokens.")] = 10,
    tau: Annotated[float, typer.Option(min=1e-6, help="Temperature.")] = 1.0,
    passages: Annotated[int, typer.Option(min=1, help="BM25 passages when restricted.")] = 3,
    answers: Annotated[int, typer.Option(min=1, help="Answers per query.")] = 5,
    content_words: Annotated[
        bool,
        typer.Option(
            "--content-words/--any-words",
            help="Answers start and end with a content word, no function word or punctuation (paper).",
        ),
    ] = True,
    exclude_query_words: ExcludeQueryWords = True,
    scoring: ScoringOption = "evidence",
    explain: Annotated[
        bool, typer.Option(help="Show each answer's score parts (evidence scoring): why it won.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON: one list of answers per query (with --explain, their parts).")
    ] = False,
) -> None:
    """Fill the [MASK] of each query with phrases retrieved from the index, with their evidence."""
    from dataclasses import asdict

    from npmcore.inference import NPM, SCORINGS, InferenceConfig

    if scoring not in SCORINGS:
        raise ValueError(f"--scoring must be one of {', '.join(SCORINGS)}, got {scoring!r}")
    config = InferenceConfig(
        k=k,
        l_max=l_max,
        tau=tau,
        restrict=restrict,
        passages=passages,
        answers=answers,
        content_words=content_words,
        exclude_query_words=exclude_query_words,
        scoring=scoring,
    )
    npm = NPM(absolute_store(index_url), encoder=model)
    results = (npm.predict_tokens if single else npm.predict)(queries, config)
    rows = [[(a, [npm.evidence.span(e) for e in a.evidence]) for a in found] for found in results]
    if json_out:
        out = [
            [
                {
                    "answer": a.text,
                    "score": a.score,
                    "evidence": [asdict(s) for s in spans],
                    **({"parts": a.parts} if explain else {}),
                }
                for a, spans in found
            ]
            for found in rows
        ]
        print(json.dumps(out if len(out) > 1 else out[0], ensure_ascii=False))
        return
    for text, found in zip(queries, rows, strict=True):
        console.print(f"[bold]{escape(text)}[/]")
        for rank, (answer, spans) in enumerate(found, 1):
            console.print(f"  {rank}. [bold green]{escape(answer.text)}[/]  {answer.score:.3f}")
            if explain and answer.parts is not None:
                console.print(Indented(score_parts(answer.parts), 5), highlight=False)
            for span in spans:  # wrapped lines keep the indentation
                evidence = f"[dim]{span.block_id}[/] [italic]{escape(span.title)}[/]: " + highlight(
                    span.text, span.start, span.end
                )
                console.print(Indented(evidence, 5), highlight=False)


@app.command(name="eval")
@command
def eval_command(
    task: Annotated[
        list[str] | None,
        typer.Option(
            help="sst2, mr, cr, rt, subj, agn, rte, trex, google_re, kamel, nq, triviaqa, entity_translation, "
            "temporal, cloze or wikitext2 (repeatable)."
        ),
    ] = None,
    suite: Annotated[str | None, typer.Option(help="quick: every task but cloze, at most 100 examples each.")] = None,
    index_url: Annotated[
        str | None,
        typer.Option(
            "--index", help="Evaluate against this index; default: build each task's reference corpus and index."
        ),
    ] = None,
    corpus: Annotated[
        str | None,
        typer.Option(
            help="Evaluate against this corpus snapshot (indexed with --model) instead of the task's reference corpus."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Encoder of the indexes built here (path, cached name or models:/…).")
    ] = None,
    store: Store = "npm-store",
    data: Annotated[str | None, typer.Option(help="The jsonl file of a cloze task.")] = None,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="Seeded sample of at most this many examples (default 3000; quick suite 100)."),
    ] = None,
    seed: int = 0,
    split: Annotated[
        str, typer.Option(help="test, or dev (tuning data: sst2, trex, google_re, wikitext2; cloze: its --data file).")
    ] = "test",
    system: Annotated[
        list[str] | None,
        typer.Option(
            help="npm, npm-no-bm25, npm-single, the open-set baselines mlm-head (the masked-LM head alone) and "
            "mlm-read (the top BM25 passage, then the head), or the masked-token systems mlm, knn, knn-lm (an encoder "
            "with a trained MLM head; one sweep over --lam, --tau, --fraction per task) (repeatable; default npm)."
        ),
    ] = None,
    exact: Annotated[bool, typer.Option(help="Also search a Flat (exact) index of the same datastore.")] = False,
    lam: Annotated[
        list[float] | None,
        typer.Option(help="knn-lm: weight of p_kNN, strictly between 0 and 1, repeatable (default 0.1 … 0.9)."),
    ] = None,
    fraction: Annotated[
        list[float] | None,
        typer.Option(help="knn, knn-lm: share of the datastore's blocks searched, repeatable (default 1)."),
    ] = None,
    k: Annotated[int, typer.Option(min=1, help="Tokens retrieved per query vector.")] = 4096,
    passages: Annotated[
        int, typer.Option(min=1, help="Open-set npm and npm-single: the top BM25 passages searched (paper: 3).")
    ] = 3,
    l_max: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Longest open-set answer in tokens (default: 20 for entity_translation, whose scripts split into "
            "many pieces; 10 otherwise, the paper's).",
        ),
    ] = None,
    tau: Annotated[
        list[float] | None,
        typer.Option(help="Temperature, repeatable for a sweep (default: 5 closed-set, 1 open-set)."),
    ] = None,
    content_words: Annotated[
        bool,
        typer.Option("--content-words/--any-words", help="Open-set answers start and end with a content word (paper)."),
    ] = True,
    exclude_query_words: ExcludeQueryWords = True,
    scoring: ScoringOption = "evidence",
    calibrate: Annotated[
        bool,
        typer.Option(
            help="Closed-set scores relative to the task's domain premise, e.g. 'It was [MASK].' (kNN-Prompt)."
        ),
    ] = True,
    wiki_files: Annotated[
        list[int] | None,
        typer.Option(
            help="enwiki_sample files added to open-set reference corpora (default 1); repeat to sweep the corpus "
            "size and plot the score against it."
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="End with one JSON line per run: {task, system, tau, factory, n, metric, score, query_copy_rate} "
            "(query_copy_rate: open-set answers repeating a query word; null for closed-set); masked-token systems "
            "add lambda, fraction and perplexity.",
        ),
    ] = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Zero-shot evaluation (flow evaluate): tasks x systems x temperatures, each run logged to MLflow (npm-eval)."""
    from flows.evaluate import QUICK_SUITE, EvalParams, evaluate
    from flows.prefect_api import prefect_api

    if suite not in (None, "quick"):
        raise ValueError(f"unknown suite {suite!r}; the suite is 'quick'")
    tasks = [*(task or []), *(QUICK_SUITE if suite else [])]
    if not tasks:
        raise ValueError("give --task NAME (repeatable) or --suite quick")
    params = EvalParams(
        tasks=tasks,
        store=store,
        index=index_url and absolute_store(index_url),
        corpus=corpus and absolute_store(corpus),
        model=model,
        data=data,
        limit=limit or (100 if suite else 3000),
        seed=seed,
        split=split,
        systems=system or ["npm"],
        exact=exact,
        k=k,
        passages=passages,
        l_max=l_max,
        taus=tau,
        **({"lambdas": lam} if lam else {}),
        fractions=fraction or [1.0],
        content_words=content_words,
        exclude_query_words=exclude_query_words,
        scoring=scoring,
        calibrate=calibrate,
        wiki_files=wiki_files or [1],
        cluster=cluster_params(dask_address, workers),
    )
    with prefect_api():
        rows = evaluate(params)
    console.print(evaluation(rows))
    if json_out:
        for r in rows:
            line = {
                "task": r.task,
                "system": r.system,
                "tau": r.tau,
                "factory": r.factory,
                "n": r.n,
                "metric": r.metric,
                "score": r.score,
                "query_copy_rate": r.query_copy_rate,
            }
            if r.lam is not None:
                line.update(**{"lambda": r.lam, "fraction": r.fraction, "perplexity": r.perplexity})
            if r.breakdown:
                line["breakdown"] = r.breakdown
            print(json.dumps(line, ensure_ascii=False))


@app.command(name="compare")
@command
def compare_command(
    items: Annotated[
        list[str],
        typer.Argument(
            help="Two or more MLflow run ids of npmcore eval, or models (models:/npm-encoder/3, a path, default)."
        ),
    ],
    store: Store = "npm-store",
    experiment: Annotated[str, typer.Option(help="MLflow experiment of the evaluation runs.")] = "npm-eval",
) -> None:
    """Side-by-side scores: runs (one column each) or models (their newest evaluation run per task and system)."""
    from npmcore.tracking import compare, tracking_uri

    if len(items) < 2:
        raise ValueError("compare needs two or more runs or models")
    columns = compare(tracking_uri(absolute_store(store)), experiment, items)
    scores = table("", *map(number, items), title=f"MLflow experiment {experiment}")
    for row in sorted({key for cells in columns.values() for key in cells}):
        scores.add_row(row, *(columns[item].get(row, "–") for item in items))
    show(scores)


@app.command(name="references")
@command
def references_command(
    task: Annotated[str, typer.Option(help="Task whose reference corpus to write (its evaluated examples left out).")],
    out: Annotated[str, typer.Option(help="jsonl file to write, for npmcore ingest.")],
    limit: Annotated[int | None, typer.Option(min=1, help="The same sample as npmcore eval --limit.")] = 3000,
    seed: int = 0,
) -> None:
    """Write a task's reference corpus (documents that never contain its evaluated examples) as jsonl."""
    from npmcore.evaluation.references import write_reference_corpus
    from npmcore.evaluation.tasks import DEFAULT_DATA_DIR, load_task

    print(write_reference_corpus(load_task(task, limit=limit, seed=seed), DEFAULT_DATA_DIR, out))


@app.command(name="snapshots")
@command
def snapshots_command(
    store: Store = "npm-store", kind: Annotated[str, typer.Option(help="Snapshot kind.")] = CORPUS
) -> None:
    """List the complete snapshots of a kind in the store, oldest first: {store}/{kind}/{id}."""
    root = absolute_store(store)
    found = list_snapshots(root, kind)
    keys = list(dict.fromkeys(key for _, manifest in found for key in manifest.counts))
    listed = table("id", "created (UTC)", *map(number, keys), title=f"{kind} snapshots in {shown(join(root, kind))}")
    for _, manifest in found:
        created = manifest.created.replace("T", " ")[:16]  # ISO 8601 in UTC, to the minute
        counts = (f"{manifest.counts[k]:,}" if k in manifest.counts else "–" for k in keys)
        listed.add_row(manifest.id, created, *counts)
    show(listed)


@app.command(name="dask-certs")
@command
def dask_certs_command(
    folder: Annotated[Path, typer.Argument(help="Folder to write ca.pem and a certificate and key per role into.")],
    host: Annotated[list[str], typer.Option(help="Name or IP address of the scheduler and workers (repeatable).")],
) -> None:
    """Write a private certificate authority and scheduler, worker and client certificates for a Dask cluster with
    mutual TLS (see docs/operate.md: a client without a certificate of this authority is refused)."""
    from npmcore.security import write_dask_certificates

    print(write_dask_certificates(folder, host))


@app.command(name="verify")
@command
def verify_command(url: Annotated[str, typer.Argument(help="Snapshot URL.")]) -> None:
    """Check every file of a snapshot against its manifest's sha256."""
    manifest = open_snapshot(absolute_store(url))
    console.print(f"ok: {manifest.kind} snapshot {manifest.id}, {len(manifest.files)} files verified")


def main() -> None:
    """The ``npmcore`` program. What its command made stays until the process ends: exempt from the
    collection at exit, which took 3 s of a cached `npmcore demo` (Prefect's, MLflow's, transformers' objects)."""
    try:
        app()
    finally:
        gc.freeze()
