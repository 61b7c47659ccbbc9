"""Data commands: corpora ingested and backfilled, and the snapshots of a store."""

import sys
from typing import Annotated

import typer

from flows.cli.common import (
    DaskAddress,
    Lang,
    Precision,
    Store,
    Strict,
    Workers,
    cluster_params,
    command,
    console,
    show,
)
from flows.output import counts_table, crawl_table, number, shown, sources_table, table
from flows.params import IngestParams, absolute_store
from npmcore.corpus.readers import FORMATS
from npmcore.snapshots import CORPUS, open_corpus
from npmcore.storage import join, list_snapshots, open_snapshot

app = typer.Typer()
PANEL = "Data"


@app.command(name="ingest", rich_help_panel=PANEL)
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
    dump_date: Annotated[
        str | None,
        typer.Option(help="Date of the inputs' dump, YYYY-MM-DD or YYYY-MM: answers name it with their source."),
    ] = None,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Ingest Wikipedia dumps, WikiExtractor output (<doc> or --json), news or CC-News WARC files into a verified
    corpus snapshot. A wiki's pages are its source, named by the wiki (simple.wikipedia.org); other files each
    their own."""
    from npmcore.corpus.inputs import expand_inputs

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
        dump_date=dump_date,
        cluster=cluster_params(dask_address, workers),
    )
    expand_inputs(params.inputs)  # a missing input is said before the flow's imports and its Prefect server

    from flows.ingest import ingest_corpus

    url = ingest_corpus(params, progress=sys.stderr.isatty())
    manifest = open_snapshot(url, verify=False)
    show(counts_table(manifest))
    show(sources_table(open_corpus(url).sources))
    if "articles" in manifest.counts:
        show(crawl_table(manifest.counts))
    print(url)


@app.command(name="backfill", rich_help_panel=PANEL)
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
            help="Index of the previous dump, or whose corpus WARC files extend (default: the served index if it "
            "was made with this encoder, else the newest in the store that was)."
        ),
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            help="Serve the new index (move the serving pointer) when the index it follows was the served one, "
            "or the store serves none."
        ),
    ] = True,
    lang: Lang = "en",
    strict: Strict = False,
    precision: Precision = "auto",
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Ingest a new dump, or add a month of CC-News WARC files to the corpus, and index it incrementally.

    Only new or changed blocks are embedded (flow backfill_dump)."""
    from flows.backfill import BackfillParams, backfill_dump
    from flows.prefect_api import prefect_api

    params = BackfillParams(
        dump=dump,
        dump_date=date,
        store=store,
        model=model,
        previous=previous and absolute_store(previous),
        serve=serve,
        lang=lang,
        strict=strict,
        precision=precision,
        cluster=cluster_params(dask_address, workers),
    )
    with prefect_api():
        result = backfill_dump(params)
    console.print(f"corpus: [bold]{result.corpus}[/]\nprevious index: {result.previous or 'none (full build)'}")
    show(sources_table(open_corpus(result.corpus).sources, result.sources))
    if "articles" in result.counts:
        show(crawl_table(result.counts))
    if result.vectors:
        console.print(
            f"blocks: {result.blocks:,}, vectors reused: {result.reused_blocks:,}, "
            f"embedded: {result.blocks - result.reused_blocks:,}"
        )
    else:
        console.print(f"blocks: {result.blocks:,}, BM25 alone: nothing embedded")
    served = "this index" if result.serving == result.index else result.serving
    console.print(f"served (npmcore api): {served}", soft_wrap=True)  # a path is never cut
    print(result.index)


@app.command(name="snapshots", rich_help_panel=PANEL)
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


@app.command(name="verify", rich_help_panel=PANEL)
@command
def verify_command(url: Annotated[str, typer.Argument(help="Snapshot URL.")]) -> None:
    """Check every file of a snapshot against its manifest's sha256."""
    manifest = open_snapshot(absolute_store(url))
    console.print(f"ok: {manifest.kind} snapshot {manifest.id}, {len(manifest.files)} files verified")
