"""Training commands: train an encoder, its data bundle, its checkpoints evaluated, registered, exported,
mixed and promoted."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import DaskAddress, Store, Workers, cluster_params, command, console, show
from flows.output import number, table
from flows.params import absolute_store

app = typer.Typer()
PANEL = "Training"


@app.command(name="train", rich_help_panel=PANEL)
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
    batches: Annotated[
        str,
        typer.Option(
            help="document: a batch is a document's consecutive blocks (the paper's); bm25: seed blocks with their "
            "BM25 neighbours in other documents, whose positives other articles write."
        ),
    ] = "document",
    side: Annotated[
        str,
        typer.Option(
            help="both: one encoder of queries and passages (NPM training); query: a query encoder against the "
            "frozen vectors of --index (nothing re-embedded), registered as npm-query-encoder."
        ),
    ] = "both",
    index: Annotated[
        str | None,
        typer.Option(help="--side query: the index whose top BM25 passages a query reads (default: the served one)."),
    ] = None,
    queries: Annotated[
        str | None,
        typer.Option(
            help='--side query: a jsonl of {"query", "answers"} (a query log); default: cloze queries drawn from the '
            "index's corpus (zero-shot)."
        ),
    ] = None,
    count: Annotated[
        int, typer.Option(min=1, help="--side query: cloze queries drawn, or a sample of a larger query log.")
    ] = 4000,
    passages: Annotated[int, typer.Option(min=1, help="--side query: top BM25 passages a query reads.")] = 10,
    alias: Annotated[str | None, typer.Option(help="Registry alias for the new version, e.g. candidate.")] = None,
    promote: Annotated[
        bool, typer.Option(help="Make it npm-encoder@champion if it beats the champion on dev data.")
    ] = False,
    seed: int = 0,
) -> None:
    """Train an encoder (NPM, or the masked-LM stage before it), or a query encoder (--side query); logs to MLflow
    and registers npm-encoder (npm-query-encoder)."""
    from flows.train import QueryTrainParams, TrainParams, train_encoder, train_query_encoder

    if side not in ("both", "query"):
        raise ValueError(f"--side must be both or query, got {side!r}")
    if side == "query":
        both_only = {"--corpus": corpus, "--preset": preset != "cpu-small" or None, "--objective": objective,
                     "--mlm-weight": mlm_weight, "--rare-boost": rare_boost, "--prebatch": prebatch,
                     "--batches": batches != "document" or None, "--promote": promote or None}  # fmt: skip
        given = [name for name, value in both_only.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: for --side both only (query-side training has its own settings)")
        given = {"steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": warmup_steps}
        query = QueryTrainParams(
            store=store,
            index=index and absolute_store(index),
            queries=queries,
            count=count,
            passages=passages,
            encoder=encoder,
            alias=alias,
            seed=seed,
            **{k: v for k, v in given.items() if v is not None},  # else query-side training's own defaults
        )
        print(train_query_encoder(query, progress=sys.stderr.isatty()))
        return
    if index or queries:
        raise ValueError("--index and --queries are for --side query")
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
        batches=batches,
        seed=seed,
    )
    print(train_encoder(params, progress=sys.stderr.isatty()))


@app.command(name="promote", rich_help_panel=PANEL)
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


@app.command(name="register", rich_help_panel=PANEL)
@command
def register_command(
    source: Annotated[str, typer.Argument(help="A training run folder (its newest checkpoint) or an encoder folder.")],
    store: Store = "npm-store",
    alias: Annotated[str | None, typer.Option(help="Registry alias for the new version, e.g. champion.")] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "npm-train",
) -> None:
    """Log a trained encoder to MLflow and register it as npm-encoder.

    From a run folder (e.g. of torchrun -m npmcore.model.train): its newest checkpoint.
    Or an encoder folder (e.g. returned by a GPU run)."""
    from npmcore.tracking import register_checkpoint, register_encoder
    from npmcore.tracking_store import tracking_uri

    uri, path = tracking_uri(absolute_store(store)), absolute_store(source)
    if run_folder(path):
        print(register_checkpoint(path, uri, experiment, alias))
    else:
        print(register_encoder(path, uri, experiment, alias))


@app.command(name="export", rich_help_panel=PANEL)
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
    from npmcore.model.trained import export_checkpoint

    part_bytes = int(part_mib * 2**20) if part_mib else None
    path = absolute_store(source)
    if run_folder(path):
        print(export_checkpoint(path, step, out, part_bytes))
    else:
        print(export_fp16(path, out, part_bytes))


@app.command(name="interpolate", rich_help_panel=PANEL)
@command
def interpolate_command(
    first: Annotated[str, typer.Argument(help="Encoder folder A (with a trained MLM head).")],
    second: Annotated[str, typer.Argument(help="Encoder folder B: A's lineage (same architecture and tokenizer).")],
    weight: Annotated[float, typer.Option(help="Share of B: the result is (1 - weight) * A + weight * B.")],
    out: Annotated[Path, typer.Option(help="Encoder folder to write.")],
) -> None:
    """Mix the weights of two encoders of one lineage (fp16, MLM head included).

    E.g. the shipped encoder and a longer-trained continuation of it."""
    from npmcore.encoder import interpolate

    print(interpolate(absolute_store(first), absolute_store(second), weight, out))


def run_folder(path: str) -> bool:
    """Whether ``path`` is a training run folder (it holds checkpoints) rather than an encoder folder."""
    import fsspec

    fs, local = fsspec.core.url_to_fs(path)
    return fs.exists(f"{local.rstrip('/')}/checkpoints")


@app.command(name="bundle", rich_help_panel=PANEL)
@command
def bundle_command(
    corpus: Annotated[str, typer.Argument(help="Corpus snapshot URL.")],
    out: Annotated[Path, typer.Option(help="File to write, named *.bundle.parquet.")],
    max_tokens: Annotated[
        int | None, typer.Option(min=1, help="Keep the first whole documents within this many tokens (default: all).")
    ] = None,
) -> None:
    """Write a corpus snapshot's training fields (token ids, documents, title lengths) into one compact file."""
    from npmcore.corpus.bundle import write_bundle

    info = write_bundle(absolute_store(corpus), out, max_tokens)
    size = out.stat().st_size
    console.print(f"{info.docs:,} documents, {info.blocks:,} blocks, {info.tokens:,} tokens: {size / 2**20:.1f} MiB")
    print(out)


@app.command(name="learning-curve", rich_help_panel=PANEL)
@command
def learning_curve_command(
    run_id: Annotated[str, typer.Argument(help="MLflow run id of a training run (experiment npm-train).")],
    store: Store = "npm-store",
    task: Annotated[
        list[str] | None, typer.Option(help="Task evaluated at every checkpoint (repeatable; default mr and cloze).")
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(help="The jsonl file of the cloze task; default: the default corpus's cloze facts of --split."),
    ] = None,
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
