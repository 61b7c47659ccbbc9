"""Evaluation commands: zero-shot evaluation, its runs compared, a task's reference corpus."""

import json
from typing import Annotated

import typer

from flows.cli.common import (
    DaskAddress,
    ExcludeQueryWords,
    Precision,
    ScoringOption,
    Store,
    Workers,
    cluster_params,
    command,
    console,
    show,
)
from flows.output import evaluation, number, table
from flows.params import absolute_store

app = typer.Typer()
PANEL = "Evaluation"


@app.command(name="eval", rich_help_panel=PANEL)
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
    data: Annotated[
        str | None,
        typer.Option(
            help="The jsonl file of a cloze task; default: the default corpus's cloze facts of --split "
            "(bench/data/cloze-dev.jsonl, cloze-test.jsonl)."
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help="Seeded sample of at most this many examples (default 3000; quick suite 100)."),
    ] = None,
    seed: int = 0,
    split: Annotated[
        str,
        typer.Option(
            help="test, or dev (tuning data: a fixed fifth of trex, google_re, nq, triviaqa and wikitext2; the dev "
            "files of sst2, kamel, entity_translation and temporal; cloze: its --data file, else its own dev facts)."
        ),
    ] = "test",
    ask_as: Annotated[
        str | None,
        typer.Option(
            "--ask",
            help="How the questions of kamel, nq, triviaqa and a cloze file are asked: statements (as the query "
            "service asks them: a question's statements; KAMEL's relations stated) or paper (the paper's question "
            "form); default: each task's own (the paper's for kamel, nq and triviaqa, the service's for a cloze file).",
        ),
    ] = None,
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
    precision: Precision = "auto",
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
        ask=ask_as,
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
        precision=precision,
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
                # the lines or examples not evaluated, by why (skipped_explanation: a question asking why or how)
                "skipped": {k.removeprefix("skipped_"): v for k, v in r.notes.items() if k.startswith("skipped_")},
            }
            if r.lam is not None:
                line.update(**{"lambda": r.lam, "fraction": r.fraction, "perplexity": r.perplexity})
            if r.calibration is not None:
                line["calibration"] = r.calibration
            if r.shown is not None:
                line["shown"] = r.shown  # the share shown as sure, right when sure, right but greyed
            if r.breakdown:
                line["breakdown"] = r.breakdown
            print(json.dumps(line, ensure_ascii=False))


@app.command(name="compare", rich_help_panel=PANEL)
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
    from npmcore.tracking import compare
    from npmcore.tracking_store import tracking_uri

    if len(items) < 2:
        raise ValueError("compare needs two or more runs or models")
    columns = compare(tracking_uri(absolute_store(store)), experiment, items)
    scores = table("", *map(number, items), title=f"MLflow experiment {experiment}")
    for row in sorted({key for cells in columns.values() for key in cells}):
        scores.add_row(row, *(columns[item].get(row, "–") for item in items))
    show(scores)


@app.command(name="references", rich_help_panel=PANEL)
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
