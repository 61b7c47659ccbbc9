"""The ``npmcore`` command line: launches the Prefect flows and inspects the store."""

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from flows.params import ClusterParams, IngestParams, absolute_store
from npmcore.cluster import ClusterError, check_scheduler
from npmcore.corpus import FORMATS, CorpusError
from npmcore.encoder import EncoderError
from npmcore.ingest import KIND as CORPUS
from npmcore.storage import Manifest, SnapshotError, list_snapshots, open_snapshot
from npmcore.tracking import TrackingError

app = typer.Typer(help="NPM, the Nonparametric Masked Language Model: pipeline commands.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)

Store = Annotated[str, typer.Option("--store", envvar="NPM_STORE", help="Store root: a path, file:// or s3:// URL.")]
DaskAddress = Annotated[
    str | None,
    typer.Option("--dask-address", envvar="DASK_SCHEDULER_ADDRESS", help="Existing Dask scheduler; default: a local cluster."),
]
Workers = Annotated[int | None, typer.Option("--workers", min=1, help="Local Dask workers (default: one per core).")]
USER_ERRORS = (CorpusError, SnapshotError, EncoderError, ClusterError, TrackingError, ValueError, FileNotFoundError)


def cluster_params(dask_address: str | None, workers: int | None) -> ClusterParams:
    """The cluster options of a command; a given scheduler must answer within 10 s, before any flow starts."""
    params = ClusterParams(dask_address=dask_address, n_workers=workers)
    if params.dask_address:
        check_scheduler(params.dask_address)
    return params


def fail(error: Exception) -> NoReturn:
    errors.print(f"[bold red]error:[/] {error}")
    raise typer.Exit(2)


def counts_table(url: str, manifest: Manifest) -> Table:
    table = Table(title=f"{manifest.kind} snapshot {manifest.id}", caption=url)
    for key in manifest.counts:
        table.add_column(key, justify="right")
    table.add_row(*(f"{v:,}" for v in manifest.counts.values()))
    return table


@app.command()
def ingest(
    inputs: Annotated[list[str] | None, typer.Argument(help="Files, folders or globs; none: the embedded default corpus.")] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"auto or one of {', '.join(FORMATS)}.")] = "auto",
    store: Store = "npm-store",
    encoder: Annotated[str | None, typer.Option(help="Tokenizer path or cached name (default: the default encoder's).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Maximum block length in encoder tokens.")] = 256,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Ingest Wikipedia dumps, WikiExtractor output or news into a verified corpus snapshot."""
    from flows.ingest import ingest_corpus

    if fmt != "auto" and fmt not in FORMATS:
        fail(ValueError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}"))
    try:
        params = IngestParams(
            inputs=inputs or [], format=fmt, store=store, encoder=encoder, max_tokens=max_tokens,
            cluster=cluster_params(dask_address, workers),
        )
        url = ingest_corpus(params, progress=sys.stderr.isatty())
        console.print(counts_table(url, open_snapshot(url, verify=False)))
    except USER_ERRORS as e:
        fail(e)
    print(url)


DEMO_BATCH = 8  # --train-steps: a short run from scratch shows the training stage, not a useful encoder
DEMO_QUERY = "Anarchism is a political philosophy that advocates [MASK] societies."


@app.command()
def demo(
    store: Store = "npm-store",
    train_steps: Annotated[int, typer.Option(min=0, help="Train an encoder from scratch (MiniLM-L6 as published) for this many steps; 0: the shipped NPM-trained encoder.")] = 0,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """The main job (flow pipeline) on the embedded default corpus: ingest, (optionally) train, index, evaluate, a query."""
    from flows.evaluate import EvalParams
    from flows.index import IndexParams
    from flows.pipeline import CLOZE_TEST, PipelineParams, pipeline
    from flows.prefect_api import prefect_api
    from flows.train import TrainParams, tracking_uri
    from npmcore.inference import NPM

    try:
        cluster = cluster_params(dask_address, workers)
        params = PipelineParams(
            ingest=IngestParams(store=store, cluster=cluster, pages_per_partition=25),  # shards to embed in parallel
            train=TrainParams(store=store, steps=train_steps, batch_size=DEMO_BATCH, warmup_steps=max(1, train_steps // 10)) if train_steps else None,
            index=IndexParams(store=store),
            evaluate=EvalParams(tasks=["cloze"], data=str(CLOZE_TEST), store=store),
        )
        with prefect_api():
            result = pipeline(params, progress=sys.stderr.isatty())
        manifest = open_snapshot(result.corpus)
        npm = NPM(result.index)
        answers = npm.predict([DEMO_QUERY])[0]
    except USER_ERRORS as e:
        fail(e)
    console.print(counts_table(result.corpus, manifest))
    console.print(f"corpus snapshot: [bold]{result.corpus}[/] (verified)")
    trained = f"{result.encoder} ({train_steps} steps of {DEMO_BATCH} sequences from MiniLM-L6; MLflow experiment npm-train)"
    console.print(f"encoder: [bold]{trained if train_steps else 'the shipped NPM-trained MiniLM-L6 (npmcore/checkpoints/npm-minilm-l6)'}[/]")
    console.print(f"index: [bold]{result.index}[/] ({npm.manifest.config['factory']}, {npm.manifest.counts['tokens']:,} tokens)")
    console.print(f"[bold]{DEMO_QUERY}[/]")
    for rank, answer in enumerate(answers[:3], 1):
        ev = npm.evidence_dict(answer.evidence[0])
        console.print(f"  {rank}. [bold green]{answer.text}[/] {answer.score:.3f}  [dim]{ev['block_id']}[/] {_highlight(ev['text'], ev['start'], ev['end'], 60)}", highlight=False)
    console.print(rows_table(result.rows))
    console.print(f"MLflow: parent run [bold]{result.run_id}[/] (experiment npm-pipeline), tracking URI {tracking_uri(absolute_store(store))}")


@app.command()
def train(
    corpus: Annotated[str | None, typer.Option(help="Corpus snapshot URL; default: the newest in the store.")] = None,
    store: Store = "npm-store",
    preset: Annotated[str, typer.Option(help="cpu-small (a short run), cpu-mlm (the masked-LM stage), cpu-quality (the shipped encoder's NPM recipe) or paper (32 GPUs).")] = "cpu-small",
    objective: Annotated[str | None, typer.Option(help="npm (span masking), npm-single (token masking) or mlm (masked-LM stage); default: the preset's.")] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps (default: the preset's; its warm-up keeps its share).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Sequences per step (default: the preset's).")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate (default: the preset's).")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Linear warm-up steps (default: the preset's share of --steps).")] = None,
    mlm_weight: Annotated[float | None, typer.Option(help="NPM objectives: weight of an auxiliary MLM loss (default 0: none).")] = None,
    encoder: Annotated[str | None, typer.Option(help="Initial encoder: path, cached name or models:/npm-encoder/N (e.g. the MLM stage's).")] = None,
    alias: Annotated[str | None, typer.Option(help="Registry alias for the new version, e.g. champion.")] = None,
    seed: int = 0,
) -> None:
    """Train an encoder on a corpus snapshot (NPM, or the masked-LM stage before it); logs to MLflow and registers npm-encoder."""
    from flows.train import TrainParams, train as train_flow

    try:
        params = TrainParams(
            store=store, corpus=corpus, preset=preset, objective=objective, steps=steps, batch_size=batch_size, lr=lr,
            warmup_steps=warmup_steps, mlm_weight=mlm_weight, encoder=encoder, alias=alias, seed=seed,
        )
        uri = train_flow(params, progress=sys.stderr.isatty())
    except USER_ERRORS as e:
        fail(e)
    print(uri)


@app.command()
def register(
    run_dir: Annotated[str, typer.Argument(help="Run folder of a training run (e.g. from torchrun -m npmcore.train).")],
    store: Store = "npm-store",
    alias: Annotated[str | None, typer.Option(help="Registry alias for the new version, e.g. champion.")] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "npm-train",
) -> None:
    """Log the newest checkpoint of a run to MLflow and register it as npm-encoder."""
    from dataclasses import asdict

    import mlflow

    from flows.train import tracking_uri
    from npmcore.tracking import flat_params, log_encoder, tracking
    from npmcore.train import load_trained

    try:
        tokenizer, model, config = load_trained(absolute_store(run_dir))
        with tracking(tracking_uri(absolute_store(store)), experiment), mlflow.start_run():
            mlflow.log_params(flat_params(asdict(config)))
            mlflow.set_tag("run_dir", absolute_store(run_dir))
            uri = log_encoder(tokenizer, model, alias)
    except USER_ERRORS as e:
        fail(e)
    print(uri)


@app.command()
def export(
    run_dir: Annotated[str, typer.Argument(help="Run folder of a training run (its MLflow run's run_dir tag).")],
    out: Annotated[Path, typer.Option(help="Encoder folder to write.")],
    step: Annotated[int | None, typer.Option(help="Checkpoint step (default: the newest; 0: the initial encoder).")] = None,
) -> None:
    """Write a training checkpoint as an encoder folder: fp16 safetensors and the tokenizer (the shipped default's format)."""
    from npmcore.encoder import base_encoder_path, local_model_dir, save_fp16
    from npmcore.train import load_trained

    try:
        _, model, config = load_trained(absolute_store(run_dir), step)
        print(save_fp16(model, local_model_dir(str(config.encoder or base_encoder_path())), out))
    except USER_ERRORS as e:
        fail(e)


@app.command(name="learning-curve")
def learning_curve(
    run_id: Annotated[str, typer.Argument(help="MLflow run id of a training run (experiment npm-train).")],
    store: Store = "npm-store",
    task: Annotated[list[str] | None, typer.Option(help="Task evaluated at every checkpoint (repeatable; default mr and cloze).")] = None,
    data: Annotated[str | None, typer.Option(help="The jsonl file of the cloze task (use a dev split).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Examples per task.")] = 100,
    corpus: Annotated[str | None, typer.Option(help="Evaluate against this corpus snapshot instead of each task's reference corpus.")] = None,
    step: Annotated[list[int] | None, typer.Option(help="Checkpoint step to evaluate (repeatable; default all, plus 0).")] = None,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Evaluate a training run's checkpoints; logs eval.<task> against the step and a plot into the training run."""
    from flows.learning_curve import CurveParams, learning_curve as curve_flow
    from flows.prefect_api import prefect_api

    try:
        params = CurveParams(
            run_id=run_id, store=store, tasks=task or ["mr", "cloze"], data=data, corpus=corpus and absolute_store(corpus), limit=limit, steps=step,
            cluster=cluster_params(dask_address, workers),
        )
        with prefect_api():
            curve = curve_flow(params)
    except USER_ERRORS as e:
        fail(e)
    names = sorted({t for scores in curve.values() for t in scores})
    table = Table("step", *names, title=f"learning curve of run {run_id} (metrics eval.<task> in MLflow)")
    for s, scores in sorted(curve.items()):
        table.add_row(str(s), *(f"{scores[n]:.4f}" if n in scores else "–" for n in names))
    console.print(table)


@app.command()
def index(
    corpus: Annotated[str | None, typer.Option(help="Corpus snapshot URL; default: the newest in the store.")] = None,
    store: Store = "npm-store",
    model: Annotated[
        str | None, typer.Option(help="Encoder: model folder, cached HF name or models:/npm-encoder@champion (default: the shipped NPM-trained MiniLM-L6).")
    ] = None,
    factory: Annotated[str | None, typer.Option(help="FAISS index-factory string, e.g. Flat, HNSW32, IVF1024,PQ32 (default: the largest PQ within 64 bytes/token; IVF-PQ above 20M tokens).")] = None,
    search_params: Annotated[str | None, typer.Option(help="Default FAISS search parameters, e.g. nprobe=64.")] = None,
    on_disk: Annotated[bool, typer.Option(help="IVF only: memory-mapped inverted lists.")] = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Embed a corpus snapshot (one task per shard on Dask) and build its FAISS + BM25 index; prints the index URL."""
    from flows.index import IndexParams, build_index, dask_runner
    from flows.prefect_api import prefect_api

    try:
        params = IndexParams(
            store=store, corpus=corpus and absolute_store(corpus), model=model, factory=factory, search_params=search_params,
            on_disk=on_disk, cluster=cluster_params(dask_address, workers),
        )
        with prefect_api():
            url = build_index.with_options(task_runner=dask_runner(params.cluster))(params)
        manifest = open_snapshot(url, verify=False)
    except USER_ERRORS as e:
        fail(e)
    console.print(counts_table(url, manifest), style=None)
    console.print(f"factory {manifest.config['factory']} ({manifest.config['search_params'] or 'no search parameters'})")
    print(url)


@app.command()
def backfill(
    dump: Annotated[str, typer.Argument(help="The new pages-articles dump (path or URL).")],
    date: Annotated[str, typer.Option(help="Date of the dump, YYYY-MM-DD.")],
    store: Store = "npm-store",
    model: Annotated[str | None, typer.Option(help="Encoder (path, cached name or models:/npm-encoder@champion; default: the shipped one).")] = None,
    previous: Annotated[str | None, typer.Option(help="Index of the previous dump (default: the newest in the store with this encoder).")] = None,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Ingest a new dump and index it incrementally: only new or changed blocks are embedded (flow backfill_dump)."""
    from flows.backfill import BackfillParams, backfill_dump
    from flows.prefect_api import prefect_api

    try:
        params = BackfillParams(
            dump=dump, dump_date=date, store=store, model=model, previous=previous and absolute_store(previous),
            cluster=cluster_params(dask_address, workers),
        )
        with prefect_api():
            result = backfill_dump(params)
        datastore = open_snapshot(open_snapshot(result["index"], verify=False).inputs[0]["datastore"], verify=False)
    except USER_ERRORS as e:
        fail(e)
    blocks, reused = datastore.counts["blocks"], datastore.counts["reused_blocks"]
    console.print(f"corpus: [bold]{result['corpus']}[/]\nprevious index: {result['previous'] or 'none (full build)'}")
    console.print(f"blocks: {blocks:,}, vectors reused: {reused:,}, embedded: {blocks - reused:,}")
    print(result["index"])


@app.command()
def query(
    queries: Annotated[list[str], typer.Argument(help='Queries with one [MASK] each, e.g. "Thessaloniki is a city in [MASK]."')],
    index_url: Annotated[str, typer.Option("--index", help="Index snapshot URL (from npmcore index).")],
    model: Annotated[str | None, typer.Option(help="Encoder (default: the one the index was built with; must match it).")] = None,
    single: Annotated[bool, typer.Option(help="NPM single: single-token answers from one [MASK] vector.")] = False,
    restrict: Annotated[bool, typer.Option(help="Search only the top BM25 passages, scored exactly (paper's open-set mode).")] = True,
    k: Annotated[int, typer.Option(min=1, help="Tokens retrieved per query vector.")] = 4096,
    l_max: Annotated[int, typer.Option(min=1, help="Longest answer in tokens.")] = 10,
    tau: Annotated[float, typer.Option(min=1e-6, help="Temperature.")] = 1.0,
    passages: Annotated[int, typer.Option(min=1, help="BM25 passages when restricted.")] = 3,
    answers: Annotated[int, typer.Option(min=1, help="Answers per query.")] = 5,
    content_words: Annotated[bool, typer.Option("--content-words/--any-words", help="Answers start and end with a content word, no stopword or punctuation (paper).")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: one list of answers per query.")] = False,
) -> None:
    """Fill the [MASK] of each query with phrases retrieved from the index, with their evidence."""
    import json

    from npmcore.inference import NPM, InferenceConfig

    config = InferenceConfig(k=k, l_max=l_max, tau=tau, restrict=restrict, passages=passages, answers=answers, content_words=content_words)
    try:
        npm = NPM(absolute_store(index_url), encoder=model)
        results = (npm.predict_tokens if single else npm.predict)(queries, config)
    except USER_ERRORS as e:
        fail(e)
    rows = [
        [{"answer": a.text, "score": a.score, "evidence": [npm.evidence_dict(e) for e in a.evidence]} for a in found]
        for found in results
    ]
    if json_out:
        print(json.dumps(rows if len(rows) > 1 else rows[0], ensure_ascii=False))
        return
    for text, found in zip(queries, rows, strict=True):
        console.print(f"[bold]{text}[/]")
        for rank, answer in enumerate(found, 1):
            console.print(f"  {rank}. [bold green]{answer['answer']}[/]  {answer['score']:.3f}")
            for ev in answer["evidence"]:
                snippet = _highlight(ev["text"], ev["start"], ev["end"])
                console.print(f"     [dim]{ev['block_id']}[/] [italic]{ev['title']}[/]: {snippet}", highlight=False)


@app.command(name="eval")
def eval_task(
    task: Annotated[list[str] | None, typer.Option(help="sst2, mr, cr, rt, subj, agn, rte, trex, google_re, nq, triviaqa or cloze (repeatable).")] = None,
    suite: Annotated[str | None, typer.Option(help="quick: every task but cloze, at most 100 examples each.")] = None,
    index_url: Annotated[str | None, typer.Option("--index", help="Evaluate against this index; default: build each task's reference corpus and index.")] = None,
    corpus: Annotated[str | None, typer.Option(help="Evaluate against this corpus snapshot (indexed with --model) instead of the task's reference corpus.")] = None,
    model: Annotated[str | None, typer.Option(help="Encoder of the indexes built here (path, cached name or models:/…).")] = None,
    store: Store = "npm-store",
    data: Annotated[str | None, typer.Option(help="The jsonl file of a cloze task.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Seeded sample of at most this many examples (default 3000; quick suite 100).")] = None,
    seed: int = 0,
    split: Annotated[str, typer.Option(help="test, or dev (tuning data: sst2, trex, google_re; cloze: its --data file).")] = "test",
    system: Annotated[list[str] | None, typer.Option(help="npm, npm-no-bm25 or npm-single (repeatable; default npm).")] = None,
    exact: Annotated[bool, typer.Option(help="Also search a Flat (exact) index of the same datastore.")] = False,
    k: Annotated[int, typer.Option(min=1, help="Tokens retrieved per query vector.")] = 4096,
    tau: Annotated[list[float] | None, typer.Option(help="Temperature, repeatable for a sweep (default: 5 closed-set, 1 open-set).")] = None,
    content_words: Annotated[bool, typer.Option("--content-words/--any-words", help="Open-set answers start and end with a content word (paper).")] = True,
    calibrate: Annotated[bool, typer.Option(help="Closed-set scores relative to the task's domain premise, e.g. 'It was [MASK].' (kNN-Prompt).")] = True,
    wiki_files: Annotated[list[int] | None, typer.Option(help="enwiki_sample files added to open-set reference corpora (default 1); repeat to sweep the corpus size and plot the score against it.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="End with one JSON line per run: {task, n, metric, score}.")] = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Zero-shot evaluation (flow evaluate): tasks x systems x temperatures against reference indexes, each run logged to MLflow (experiment npm-eval)."""
    import json

    from flows.evaluate import QUICK_SUITE, EvalParams, evaluate
    from flows.prefect_api import prefect_api

    if suite not in (None, "quick"):
        fail(ValueError(f"unknown suite {suite!r}; the suite is 'quick'"))
    tasks = [*(task or []), *(QUICK_SUITE if suite else [])]
    if not tasks:
        fail(ValueError("give --task NAME (repeatable) or --suite quick"))
    try:
        params = EvalParams(
            tasks=tasks, store=store, index=index_url and absolute_store(index_url), corpus=corpus and absolute_store(corpus), model=model, data=data,
            limit=limit or (100 if suite else 3000), seed=seed, split=split, systems=system or ["npm"], exact=exact, k=k, taus=tau, content_words=content_words, calibrate=calibrate,
            wiki_files=wiki_files or [1], cluster=cluster_params(dask_address, workers),
        )
        with prefect_api():
            rows = evaluate(params)
    except USER_ERRORS as e:
        fail(e)
    console.print(rows_table(rows))
    if json_out:
        for r in rows:
            print(json.dumps({"task": r.task, "n": r.n, "metric": r.metric, "score": r.score}))


@app.command()
def compare(
    items: Annotated[list[str], typer.Argument(help="Two or more MLflow run ids of npmcore eval, or models (models:/npm-encoder/3, a path, default).")],
    store: Store = "npm-store",
    experiment: Annotated[str, typer.Option(help="MLflow experiment of the evaluation runs.")] = "npm-eval",
) -> None:
    """Side-by-side scores: runs (one column each) or models (their newest evaluation run per task and system)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from flows.train import tracking_uri

    if len(items) < 2:
        fail(ValueError("compare needs two or more runs or models"))
    uri = tracking_uri(absolute_store(store))
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        fail(ValueError(f"no MLflow experiment {experiment!r} at {uri}: run npmcore eval first"))
    columns: dict[str, dict[str, str]] = {}
    for item in items:
        try:
            runs = [client.get_run(item)] if _looks_like_run_id(item) else client.search_runs(
                [found.experiment_id], filter_string=f"params.model = '{item}'", order_by=["attributes.start_time DESC"]
            )
        except MlflowException as e:
            fail(ValueError(f"{item}: {e.message}"))
        if not runs:
            fail(ValueError(f"{item}: no evaluation run in experiment {experiment!r} (run npmcore eval --model {item})"))
        cells: dict[str, str] = {}
        for run in runs:  # newest first: keep the newest score of each task and system
            params, metrics = run.data.params, run.data.metrics
            for name, value in metrics.items():
                if name in ("accuracy", "exact_match", "macro_exact_match"):
                    cells.setdefault(f"{params.get('task')}/{params.get('system')} {name}", f"{value:.4f}")
            cells.setdefault("corpus tokens", params.get("corpus_tokens", ""))
        columns[item] = cells
    table = Table("", *items, title=f"MLflow experiment {experiment}")
    for row in sorted({key for cells in columns.values() for key in cells}):
        table.add_row(row, *(columns[item].get(row, "–") for item in items))
    console.print(table)


def _looks_like_run_id(item: str) -> bool:
    return len(item) == 32 and all(c in "0123456789abcdef" for c in item)


@app.command()
def references(
    task: Annotated[str, typer.Option(help="Task whose reference corpus to write (its evaluated examples left out).")],
    out: Annotated[str, typer.Option(help="jsonl file to write, for npmcore ingest.")],
    limit: Annotated[int | None, typer.Option(min=1, help="The same sample as npmcore eval --limit.")] = 3000,
    seed: int = 0,
) -> None:
    """Write a task's reference corpus (documents that never contain its evaluated examples) as jsonl."""
    from npmcore.evaluation.references import write_reference_corpus
    from npmcore.evaluation.tasks import DEFAULT_DATA_DIR, load_task

    try:
        print(write_reference_corpus(load_task(task, limit=limit, seed=seed), DEFAULT_DATA_DIR, out))
    except USER_ERRORS as e:
        fail(e)


def rows_table(rows) -> Table:
    table = Table("task", "system", "tau", "index", "corpus tokens", "n", "metric", "score", "notes", title="zero-shot evaluation (MLflow experiment npm-eval)")
    for r in rows:
        table.add_row(r.task, r.system, f"{r.tau:g}", r.factory, f"{r.corpus_tokens:,}", str(r.n), r.metric, f"{r.score:.4f}", " ".join(f"{k}={v}" for k, v in r.notes.items()))
    return table


def _highlight(text: str, start: int, end: int, context: int = 100) -> str:
    """The span in bold with up to ``context`` characters either side (rich markup)."""
    from rich.markup import escape

    lo, hi = max(0, start - context), min(len(text), end + context)
    return (
        ("…" if lo else "") + escape(text[lo:start]) + "[bold yellow]" + escape(text[start:end]) + "[/]"
        + escape(text[end:hi]) + ("…" if hi < len(text) else "")
    )


@app.command()
def snapshots(store: Store = "npm-store", kind: Annotated[str, typer.Option(help="Snapshot kind.")] = CORPUS) -> None:
    """List the complete snapshots of a kind in the store."""
    try:
        found = list_snapshots(absolute_store(store), kind)
    except USER_ERRORS as e:
        fail(e)
    table = Table("id", "created", "counts", "url")
    for url, manifest in found:
        table.add_row(manifest.id, manifest.created, " ".join(f"{k}={v:,}" for k, v in manifest.counts.items()), url)
    console.print(table)


@app.command()
def verify(url: Annotated[str, typer.Argument(help="Snapshot URL.")]) -> None:
    """Check every file of a snapshot against its manifest's sha256."""
    try:
        manifest = open_snapshot(absolute_store(url))
    except SnapshotError as e:
        fail(e)
    console.print(f"ok: {manifest.kind} snapshot {manifest.id}, {len(manifest.files)} files verified")
