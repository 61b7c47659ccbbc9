"""Index and query commands: a corpus embedded and indexed, and queries answered from the index."""

import json
import sys
from typing import Annotated

import typer
from rich.markup import escape

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
from flows.output import Indented, cited, counts_table, highlight, score_parts, verdict_line
from flows.params import absolute_store
from npmcore.storage import open_snapshot

app = typer.Typer()
PANEL = "Index and query"


@app.command(name="index", rich_help_panel=PANEL)
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
            help="FAISS index-factory string, e.g. Flat, HNSW32, IVF1024,PQ32 (default: 32-byte PQ codes, their "
            "shortlist re-scored from the datastore; above 1M tokens an OPQ rotation and an IVF)."
        ),
    ] = None,
    search_params: Annotated[str | None, typer.Option(help="Default FAISS search parameters, e.g. nprobe=64.")] = None,
    on_disk: Annotated[bool, typer.Option(help="IVF only: memory-mapped inverted lists.")] = False,
    rerank: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="kNN search re-scores the index's top k x N with the datastore's exact vectors (default: 4 for "
            "compressed indexes, 1 for Flat).",
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
            help="Padded tokens per encoder forward while embedding; the default is sized for CPUs; on a GPU 131072 "
            "(an H200 embeds 598k tokens/s at 131072, 217k at 8192).",
        ),
    ] = 2048,  # npmcore.encoder.BATCH_TOKENS (the CLI imports no torch before a command needs it)
    bm25_only: Annotated[
        bool,
        typer.Option(
            "--bm25-only",
            help="Build an index of BM25 alone: nothing embedded, minutes instead of hours on a large corpus; "
            "BM25-restricted queries (system npm) encode their top passages per query, kNN search refuses it.",
        ),
    ] = False,
    precision: Precision = "auto",
    dask_address: DaskAddress = None,
    workers: Workers = None,
) -> None:
    """Embed a corpus snapshot (shards in parallel on Dask) and build its FAISS + BM25 index; prints its URL.

    The log states the index's plan first: its factory and why, its size, memory, training sample and time.
    With --bm25-only: the index of BM25 alone, nothing embedded. A store with no serving pointer serves the
    new index (npmcore api); one with a pointer keeps it (npmcore serving set moves it)."""
    from flows.index import IndexParams, index_corpus
    from flows.prefect_api import prefect_api
    from npmcore.serve.serving import read_serving, serve_if_unset

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
        precision=precision,
        cluster=cluster_params(dask_address, workers),
    )
    with prefect_api():
        url = index_corpus(params, progress=sys.stderr.isatty())
    root = params.store
    serve_if_unset(root, url, "npmcore index: the store's first index")
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
    served = read_serving(root).index
    console.print(
        "served (npmcore api): this index"
        if served == url
        else f"served (npmcore api): {served}; to serve this one: npmcore serving set {url}",
        soft_wrap=True,  # a path is never cut
    )
    print(url)


@app.command(name="query", rich_help_panel=PANEL)
@command
def query_command(
    queries: Annotated[
        list[str],
        typer.Argument(
            help='Queries with one [MASK] each, e.g. "Thessaloniki is a city in [MASK].", questions, e.g. "Where '
            'was Lionel Messi born?" (asked as the statements they stand for: "Lionel Messi was born in [MASK]."), '
            'yes/no questions ("Is Paris the capital of France?": answered yes or no from what the corpus says) or '
            'keywords ("capital of australia").'
        ),
    ],
    index_url: Annotated[str, typer.Option("--index", help="Index snapshot URL (from npmcore index).")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Encoder of the queries (default: the one the index was built with): another of the same tokenizer "
            "(BM25-restricted queries only), or a query encoder (its folder or models:/npm-query-encoder/N in the "
            "index's store) trained for the index's encoder."
        ),
    ] = None,
    single: Annotated[
        bool, typer.Option(help="One [MASK] vector, single-token answers (NPM single's inference).")
    ] = False,
    ask_as: Annotated[
        str,
        typer.Option(
            "--ask",
            help="How a question is asked: statements (the statements it stands for, its answers of the kind it "
            'asks for), or paper (as the paper asks NQ: "Who taught Aristotle? The answer is [MASK]."; also where '
            "no statement can be made of it).",
        ),
    ] = "statements",
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
    min_confidence: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Evidence scoring: below this confidence of its first answer a query's answers are shown as unsure "
            "(default: the one chosen on dev for answers shown as sure to be right 9 times in 10); 'not in this "
            "corpus' where nothing was found.",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print JSON: a list of one result per query, as the query service's /v1/predict gives it: how it "
            "was asked, whether anything was found and whether it is unsure, its answers (each with its other forms, "
            "confidence and evidence; with --explain their parts), a yes/no question's verdict, a why's note.",
        ),
    ] = False,
) -> None:
    """Fill the [MASK] of each query, or answer each question, with phrases retrieved from the index, with their
    evidence and where it comes from (source, dump date, article and its address)."""
    from npmcore.answer.answering import Reply, replies, reply_json, sure_from
    from npmcore.answer.confidence import abstention
    from npmcore.answer.inference import NPM, SCORINGS, InferenceConfig
    from npmcore.answer.tokens import predict_tokens
    from npmcore.ask.asking import EXPLANATION, FORMS, ask
    from npmcore.index.indexer import store_root
    from npmcore.tracking import resolve_encoder

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
    if ask_as not in FORMS:
        raise ValueError(f"--ask must be one of {', '.join(FORMS)}, got {ask_as!r}")
    asked = [ask(q, ask_as) for q in queries]
    index_url = absolute_store(index_url)
    npm = NPM(index_url, encoder=resolve_encoder(model, store_root(index_url)))
    if single:  # one query each: a question's first statement
        firsts = [a.queries[0] if a.queries else a.text for a in asked]
        found_single = predict_tokens(npm, firsts, config)
        answered = [Reply(a, q, f) for a, q, f in zip(asked, firsts, found_single, strict=True)]
    else:
        answered = replies(npm, asked, config)
    if json_out:
        print(json.dumps([reply_json(npm, reply, min_confidence, explain) for reply in answered], ensure_ascii=False))
        return
    rows = [[(a, [npm.evidence.span(e) for e in a.evidence]) for a in reply.answers] for reply in answered]
    threshold = sure_from(npm) if min_confidence is None else min_confidence
    withheld = [abstention(npm.calibrator, reply.answers, threshold) for reply in answered]
    for reply, found, abstained in zip(answered, rows, withheld, strict=True):
        how = reply.asked
        console.print(f"[bold]{escape(how.text)}[/]")
        if how.how == "explanation":
            console.print(f"  [yellow]{escape(EXPLANATION)}[/]")
            continue
        if how.how != "mask":
            for asked_as in how.queries:  # the one its answers come from marked where there are several
                mark = "  ◂ answers" if asked_as == reply.query and len(how.queries) > 1 else ""
                console.print(f"  [dim]asked as: {escape(asked_as)}{mark}[/]")
        if not found:
            console.print("  [bold yellow]not in this corpus[/]: nothing found in the passages searched")
        elif reply.yes_no is not None:
            console.print(f"  {verdict_line(reply.yes_no, abstained['abstained'])}")
        elif abstained["abstained"]:
            best = f"confidence {found[0][0].confidence:.2f} < {abstained['min_confidence']:.2f}"
            console.print(f"  [bold yellow]unsure[/] (the best answer's {best})")
        style = "dim" if abstained["abstained"] else "bold green"
        for rank, (answer, spans) in enumerate(found, 1):
            sure = "" if answer.confidence is None else f"  confidence {answer.confidence:.2f}"
            forms = f"  [dim](also written {escape(', '.join(answer.forms))})[/]" if answer.forms else ""
            console.print(f"  {rank}. [{style}]{escape(answer.text)}[/]  {answer.score:.3f}{sure}{forms}")
            if explain and answer.parts is not None:
                console.print(Indented(score_parts(answer.parts), 5), highlight=False)
            for span in spans:  # wrapped lines keep the indentation
                console.print(Indented(f"[italic]{escape(cited(span.source))}[/]", 5), highlight=False)
                console.print(Indented(highlight(span.text, span.start, span.end), 7), highlight=False)
