"""What the CLI prints: tables legible at any width, answers with their evidence, the demo's story.

A table is printed as it is when it fits the console; with its cells wrapped at spaces when
only that fits (each column at least as wide as its longest word); else vertically, one
block of ``column  value`` lines per row. Rich alone would shrink the widest columns first
and cut their words (``OPQ48,P…``). A console that is not a terminal is 80 columns wide
(``COLUMNS`` says otherwise). This module loads nothing but rich: ``npmcore --help`` stays fast.
"""

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

if TYPE_CHECKING:
    from flows.results import EvalRow, PipelineResult
    from npmcore.answer.verdict import YesNo
    from npmcore.sources import Citation, Source
    from npmcore.storage import Manifest

UNBOUNDED = 10_000  # a console width at which a table measures as wide as it would like to be
# The counts of an ingest of WARC files (npmcore.corpus.warc_shards.deduplicate), in the order a page goes through them
CRAWL_COUNTS = {
    "records": "records",
    "pages": "HTML pages (HTTP 200)",
    "bad_records": "bad records (skipped)",
    "no_article": "pages without article text",
    "other_language": "articles in another language",
    "duplicate_urls": "same URL as an article kept",
    "duplicate_texts": "same text",
    "near_duplicates": "near-duplicate text",
    "articles": "articles kept",
}


def table(*columns: str | Column, title: str | None = None) -> Table:
    """An empty table in the CLI's style: a rule under the header, two spaces between columns, no frame."""
    return Table(*columns, title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)


def number(header: str) -> Column:
    return Column(header, justify="right")


class Legible:
    """A table laid out when it is printed, within the width it is given, without cutting a word: as it
    is, with its cells wrapped at spaces, or vertically."""

    def __init__(self, table: Table):
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield fit(self.table, console, options.max_width)


def fit(table: Table, console: Console, width: int) -> RenderableType:
    """``table`` within ``width`` columns, no word cut: as it is, wrapped (this sets the widths of its
    columns), or :func:`vertical`."""
    for column in table.columns:
        column.width = None
    # rich wraps a title to the table's width: a table narrower than its title would cut the title's words
    title = Measurement.get(console, console.options, table.title).maximum if table.title else 0
    table.min_width = min(width, title)
    measured = Measurement.get(console, console.options.update_width(UNBOUNDED), table)
    if measured.maximum <= width:
        return table
    ranges = [column_range(console, column) for column in table.columns]
    overhead = measured.maximum - sum(r.maximum for r in ranges)  # the padding between columns
    room = width - overhead - sum(r.minimum for r in ranges)
    if room < 0:
        return vertical(table)
    slack = [r.maximum - r.minimum for r in ranges]  # sum(slack) > room: the table did not fit unwrapped
    for column, r, s in zip(table.columns, ranges, slack, strict=True):
        column.width = r.minimum + room * s // sum(slack)
    return table


def column_range(console: Console, column: Column) -> Measurement:
    """The narrowest (its longest word) and widest (its longest line) a column's content can be."""
    options = console.options.update_width(UNBOUNDED)
    cells = [Measurement.get(console, options, cell) for cell in [column.header, *column.cells]]
    return Measurement(max(c.minimum for c in cells), max(c.maximum for c in cells))


def vertical(table: Table) -> Group:
    """The table's rows as blocks of ``column  value`` lines (empty cells left out), under its title."""
    blocks: list[RenderableType] = [Text(str(table.title), style="bold")] if table.title else []
    for row in zip(*(column.cells for column in table.columns), strict=True):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="bold")
        grid.add_column(overflow="fold")  # only a word wider than the console is folded
        for column, cell in zip(table.columns, row, strict=True):
            if cell != "":
                grid.add_row(column.header, cell)
        blocks += [Text(), grid]
    return Group(*blocks)


def counts_table(manifest: "Manifest") -> Table:
    """A snapshot's counts, one column each (those of its WARC files: :func:`crawl_table`)."""
    kept = {k: v for k, v in manifest.counts.items() if k not in CRAWL_COUNTS}
    counts = table(*map(number, kept), title=f"{manifest.kind} {manifest.id}")
    counts.add_row(*(f"{v:,}" for v in kept.values()))
    return counts


def sources_table(sources: list["Source"], status: dict[str, str] | None = None) -> Table:
    """What a corpus holds, a row per source (wiki or file): its dump date, documents, blocks, tokens and checksum;
    ``status``: what an ingest did with each (added, replaced, kept)."""
    rows = table(
        "source", "dump date", *map(number, ("docs", "blocks", "tokens")), "sha256", *([""] if status else []),
        title="sources",
    )  # fmt: skip
    for s in sources:
        done = [status.get(s.name, "")] if status else []
        rows.add_row(s.name, s.dump_date or "–", f"{s.docs:,}", f"{s.blocks:,}", f"{s.tokens:,}", s.sha256[:12], *done)
    return rows


def crawl_table(counts: dict[str, int]) -> Table:
    """What the WARC files of an ingest held, from records to the articles kept."""
    crawl = table("", number(""), title="WARC files: from records to articles")
    crawl.show_header = False
    for key, what in CRAWL_COUNTS.items():
        crawl.add_row(what, f"{counts[key]:,}", style="bold" if key == "articles" else None)
    return crawl


def evaluation(rows: list["EvalRow"]) -> Group:
    """The evaluation table (:func:`rows_table`), then each run's notes (examples skipped and why) on a line."""
    notes = [
        Text(f"{r.task} {r.system} tau={r.tau:g}: " + ", ".join(f"{k}={v}" for k, v in r.notes.items()))
        for r in rows
        if r.notes
    ]
    return Group(Legible(rows_table(rows)), *notes)


def rows_table(rows: list["EvalRow"]) -> Table:
    """One row per evaluation run; the λ, query copies and perplexity columns only when a row has them."""
    masked = any(r.lam is not None for r in rows)  # masked-token systems
    copies = any(r.query_copy_rate is not None for r in rows)  # open-set answers repeating a query word
    columns = [
        "task",
        "system",
        *([number("λ")] if masked else []),
        number("tau"),
        "index",
        number("corpus tokens"),
        number("n"),
        "metric",
        number("score"),
        *([number("query copies")] if copies else []),
        *([number("perplexity")] if masked else []),
    ]
    runs = table(*columns, title="zero-shot evaluation")
    for r in rows:
        system = r.system if r.fraction == 1 else f"{r.system} ({r.fraction:g} of the datastore)"
        lam = ["" if r.lam is None else f"{r.lam:g}"] if masked else []
        copy = ["" if r.query_copy_rate is None else f"{r.query_copy_rate:.2f}"] if copies else []
        perplexity = ["" if r.perplexity is None else f"{r.perplexity:.2f}"] if masked else []
        cells = [f"{r.tau:g}", r.factory, f"{r.corpus_tokens:,}", str(r.n), r.metric, f"{r.score:.4f}"]
        runs.add_row(r.task, system, *lam, *cells, *copy, *perplexity)
    return runs


def highlight(text: str, start: int, end: int, context: int = 100) -> str:
    """The span in «» and bold with up to ``context`` characters either side (rich markup; the marks show
    where there is no bold, in a log)."""
    lo, hi = max(0, start - context), min(len(text), end + context)
    return (
        ("…" if lo else "")
        + escape(text[lo:start])
        + "[bold yellow]«"
        + escape(text[start:end])
        + "»[/]"
        + escape(text[end:hi])
        + ("…" if hi < len(text) else "")
    )


def score_parts(parts: dict[str, float]) -> str:
    """An answer's evidence-scoring parts (npmcore.answer.ranking) as one line of rich markup, largest first:
    ``why: 14.2 = +9.8 left_run, +3.1 right_run, …`` (parts under 0.005 in size left out)."""
    shown_parts = sorted(((k, v) for k, v in parts.items() if abs(v) >= 0.005), key=lambda kv: -abs(kv[1]))
    terms = ", ".join(f"{v:+.2f} {escape(k)}" for k, v in shown_parts)
    return f"[dim]why: {sum(parts.values()):.2f} = {terms}[/]"


def verdict_line(verdict: "YesNo", unsure: bool) -> str:
    """A yes/no question's verdict as the page words it (rich markup): "Yes: the corpus says Paris (confidence
    0.94).", "No (unsure): …", "The corpus does not say: its best guess is X (confidence 0.12), unsure."."""
    confidence = "" if verdict.confidence is None else f" (confidence {verdict.confidence:.2f})"
    if verdict.verdict == "unknown":
        if verdict.corpus_says is None:
            return "[bold]The corpus does not say[/]."
        return f"[bold]The corpus does not say[/]: its best guess is {escape(verdict.corpus_says)}{confidence}, unsure."
    said = f"[bold]{verdict.verdict.capitalize()}[/]" + (" (unsure)" if unsure else "")
    return f"{said}: the corpus says {escape(verdict.corpus_says or '')}{confidence}."


def evidence_sentence(passage: str, start: int, end: int, context: int = 150) -> str:
    """The sentence of ``passage`` holding ``passage[start:end]``, the span highlighted (rich markup);
    at most ``context`` characters either side of the span."""
    from npmcore.corpus.blocks import sentence_starts  # blingfire, as the blocks were cut

    starts = sentence_starts(passage)
    first = max(s for s in starts if s <= start)
    last = min([s for s in starts if s >= end] or [len(passage)])
    sentence = passage[first:last].rstrip()
    return highlight(sentence, start - first, end - first, context)


def cited(citation: "Citation") -> str:
    """Where a passage comes from, on one line (plain text): ``Alan Turing · simple.wikipedia.org, dump of
    2021-12-01 · https://simple.wikipedia.org/wiki/Alan_Turing``; what a source does not know is left out."""
    where = citation.source + (f", dump of {citation.dump_date}" if citation.dump_date else "")
    return " · ".join(part for part in (citation.title, where, citation.url) if part)


def shown(url: str) -> str:
    """A local snapshot or file as the user would type it: relative to the working folder when inside it."""
    path = Path(url.removeprefix("file://"))
    if "://" in url.removeprefix("file://") or not path.is_absolute():
        return url
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


class Indented:
    """Text (or console markup) indented by ``left`` columns; wrapped lines keep the indentation,
    and no line is padded with spaces to the width of the longest (as rich's ``Padding`` would)."""

    def __init__(self, text: Text | str, left: int = 2) -> None:
        self.text = Text.from_markup(text) if isinstance(text, str) else text
        self.left = left

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.text.wrap(console, max(1, options.max_width - self.left)):
            yield Segment(" " * self.left)
            yield from line.render(console)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        text = Measurement.get(console, options.update_width(options.max_width - self.left), self.text)
        return Measurement(text.minimum + self.left, text.maximum + self.left)


def demo_story(result: "PipelineResult", corpus: "Manifest", encoder: str, data: str, tracking_uri: str) -> Group:
    """What ``npmcore demo`` built (counts, where), a query answered with its evidence, the evaluation
    and the commands to run next."""
    counts = corpus.counts
    lines: list[RenderableType] = [
        Text("What was built", style="bold"),
        Indented(f"corpus   {counts['docs']:,} documents, {counts['blocks']:,} blocks, {counts['tokens']:,} tokens"),
        Indented(f"         {shown(result.corpus)}"),
        Indented(f"encoder  {escape(encoder)}"),
        Indented(f"index    {result.tokens:,} token vectors in FAISS {result.factory}, and BM25 over the blocks"),
        Indented(
            f"         {shown(result.index)} (served by npmcore api)"
            if result.serving == result.index
            else f"         {shown(result.index)} (not served: the store serves {shown(result.serving or 'no index')})"
        ),
    ]
    for answered in result.answered:
        lines += [Text(), Text("A query, answered from the corpus", style="bold"), Indented(escape(answered.query))]
        best, *others = answered.answers
        where = cited(replace(best.source, url=None))  # the address on a line of its own: copied whole
        answer = f"→ [bold green]{escape(best.answer)}[/] ({best.score:.2f}), from {escape(where)}:"
        lines.append(Indented(answer, 2))
        lines.append(Indented(evidence_sentence(best.passage, best.start, best.end), 4))
        if best.source.url:
            lines.append(Indented(escape(best.source.url), 4))
        if others:
            lines.append(Indented("then " + ", ".join(f"{escape(a.answer)} ({a.score:.2f})" for a in others), 2))
    lines += [
        Text(),
        Text(f"Evaluated on {result.rows[0].n} cloze facts of the corpus ({shown(data)})", style="bold"),
        evaluation(result.rows),
        Text(f"MLflow: parent run {result.run_id}, experiment npm-pipeline"),
        Text(),
        *next_commands(result.index, tracking_uri),
    ]
    return Group(*lines)


def next_commands(index: str, tracking_uri: str) -> list[RenderableType]:
    """Query your own sentence, browse the runs in the MLflow UI, train from the Prefect UI. A command is
    one line, never wrapped, so that it can be copied whole (print with ``crop=False``)."""
    bin_dir = Path(sys.executable).parent
    on_path = str(bin_dir) in os.environ.get("PATH", "").split(os.pathsep)
    first = "" if on_path else f" (first: source {shown(str(bin_dir / 'activate'))})"
    store = shown(index.rstrip("/").rsplit("/", 2)[0])
    serve = "npmcore serve" if store == "npm-store" else f"NPM_STORE={store} npmcore serve"  # the store it trains on
    mlflow: list[str] = []  # a tracking server is open already; the store's own database needs a UI
    mlflow_ui = tracking_uri
    if tracking_uri.startswith("sqlite:///"):
        mlflow, mlflow_ui = (
            [f"mlflow ui --backend-store-uri sqlite:///{shown(tracking_uri[10:])}"],
            "http://127.0.0.1:5000",
        )
    prefect, prefect_ui = ["prefect server start", serve], "http://127.0.0.1:4200"
    if api := os.environ.get("PREFECT_API_URL"):  # a running server: the demo's runs are in its UI already
        prefect, prefect_ui = [serve], api.removesuffix("/api")
    steps = [
        ("your own sentence:", [f'npmcore query --index {shown(index)} "… [MASK] …"'], None),
        ("the query service, its page at http://127.0.0.1:8000:", [f"npmcore api --store {store}"], None),
        ("the runs, in the MLflow UI:", mlflow, f"{mlflow_ui} › Model training"),  # its toggle, remembered
        (
            "train from the Prefect UI" + (", in two terminals:" if len(prefect) > 1 else ":"),
            prefect,
            f"{prefect_ui} › Deployments › train › Run",
        ),
    ]
    lines: list[RenderableType] = [Text(f"Next{first}", style="bold")]
    for what, commands, ui in steps:
        lines.append(Indented(Text(what, style="dim")))
        lines += [Text(f"    {command}", no_wrap=True, overflow="ignore") for command in commands]
        if ui:
            lines.append(Indented(Text(f"then {ui}" if commands else ui), 4))
    return lines
