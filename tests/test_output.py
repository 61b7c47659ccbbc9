"""What the CLI prints, read as a user reads it: an 80-column console that is not a terminal (a CI log, a pipe).
No table may cut a word: every word of every cell appears whole in the output, and no line is wider than 80."""

import io
from pathlib import Path

import pytest
from rich.console import Console, Group
from rich.table import Table

from flows.output import Legible, counts_table, evaluation, number, rows_table, table
from flows.results import Answered, EvalRow, PipelineResult, ShownAnswer
from npmcore.sources import Citation
from npmcore.storage import Manifest

FACTORY = "OPQ48,PQ48np"
CORPUS = {"docs": 398, "blocks": 3015, "tokens": 689_972}
DEMO_QUERY = "Anarchism is a political philosophy that advocates [MASK] societies."


def manifest(counts: dict[str, int]) -> Manifest:
    return Manifest(kind="corpus", id="90f09899a83ed471", inputs=[], config={}, counts=counts, files={})


def rendered(renderable, width: int = 80) -> str:
    console = Console(width=width, force_terminal=False, file=io.StringIO())
    console.print(Legible(renderable) if isinstance(renderable, Table) else renderable, crop=False)  # as the CLI
    return console.file.getvalue()


def cells(t: Table) -> list[str]:
    return [str(cell) for column in t.columns for cell in [column.header, *column.cells]]


def assert_legible(text: str, words: list[str], width: int = 80) -> None:
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text
    shown = set(text.split())
    cut = [w for cell in words for w in cell.split() if w not in shown]
    assert not cut, f"cut or missing: {cut}\n{text}"


def row(task: str, system: str = "npm", **fields) -> EvalRow:
    defaults = {"tau": 1.0, "factory": FACTORY, "corpus_tokens": 683_959, "n": 110, "metric": "exact_match"}
    return EvalRow(task=task, system=system, **{**defaults, "score": 0.0909, "notes": {}, **fields})


DEMO_ROWS = [row("cloze", query_copy_rate=0.05)]
SUITE_ROWS = [  # npmcore eval --suite quick --system npm --system npm-no-bm25 --exact
    *(row(t, tau=5.0, metric="accuracy", corpus_tokens=212_408, n=100) for t in ("sst2", "mr", "cr", "rt", "subj")),
    row("agn", tau=5.0, metric="accuracy", n=100, notes={"skipped_long": 3}),
    row("trex", query_copy_rate=0.12, notes={"skipped_no_answer": 2}),
    row("trex", "npm-no-bm25", factory="Flat", query_copy_rate=0.2),
]
MASKED_ROWS = [  # npmcore eval --task wikitext2 --system mlm --system knn-lm --fraction 0.1 --exact
    row("wikitext2", "mlm", metric="accuracy", factory="-", perplexity=288.31, notes={"skipped_multi_token": 64}),
    row("wikitext2", "knn-lm", lam=0.1, fraction=0.1, metric="accuracy", perplexity=239.4),
    row("wikitext2", "knn-lm", lam=0.25, factory="Flat", metric="accuracy", perplexity=234.5),
]


@pytest.mark.parametrize("rows", [DEMO_ROWS, SUITE_ROWS, MASKED_ROWS], ids=["demo", "suite", "masked"])
def test_the_evaluation_cuts_no_word_at_80_columns(rows):
    text = rendered(evaluation(rows))
    notes = [f"{k}={v}" for r in rows for k, v in r.notes.items()]
    assert_legible(text, [*cells(rows_table(rows)), *notes])


def test_the_quick_suite_fits_in_rows_with_its_notes_below():
    text = rendered(evaluation(SUITE_ROWS))
    lines = text.splitlines()
    assert [line.split()[0] for line in lines[4:12]] == ["sst2", "mr", "cr", "rt", "subj", "agn", "trex", "trex"]
    assert lines[12:] == ["agn npm tau=5: skipped_long=3", "trex npm tau=1: skipped_no_answer=2"]


def test_the_demo_evaluation_fits_in_one_row_with_its_query_copies():
    text = rendered(rows_table(DEMO_ROWS))
    assert any(
        line.split()[:2] == ["cloze", "npm"] and FACTORY in line and "0.05" in line for line in text.splitlines()
    )
    assert "notes" not in text and "perplexity" not in text  # columns only when a row has them


def test_a_table_too_wide_to_wrap_is_printed_vertically_one_block_per_row():
    runs = ["8eb96a2bbe98434f9093ff4130430fcd", "3c1d7a0e5f2b4a6c8d9e0f1a2b3c4d5e", "models:/npm-encoder/12"]
    scores = table("", *map(number, runs), title="MLflow experiment npm-eval")
    scores.add_row("cloze/npm exact_match", "0.0909", "0.1000", "0.1182")
    scores.add_row("corpus tokens", "683959", "683959", "683959")
    text = rendered(scores)
    assert_legible(text, cells(scores))
    block = text.split("\n\n")[1].splitlines()  # title, blank, then the first row's block
    assert [line.split()[-1] for line in block] == ["exact_match", "0.0909", "0.1000", "0.1182"]


@pytest.mark.parametrize("width", [60, 40])
def test_narrower_consoles_cut_no_word_either(width):
    for rows in (DEMO_ROWS, SUITE_ROWS, MASKED_ROWS):
        runs = rows_table(rows)
        assert_legible(rendered(runs, width), cells(runs), width)


def test_a_table_that_fits_is_printed_as_it_is():
    counts = counts_table(manifest(CORPUS))
    text = rendered(counts)
    assert_legible(text, cells(counts))
    header, rule, values = text.splitlines()[1:4]
    assert header.split() == ["docs", "blocks", "tokens"] and set(rule.strip()) == {"─"}
    assert values.split() == ["398", "3,015", "689,972"]


def demo_output() -> str:
    """The demo's story of a realistic pipeline result, as printed at 80 columns (the store in the working folder)."""
    from flows.output import demo_story

    store = Path.cwd() / "npm-store"
    passage = (
        "Anarchism. Anarchism is a political philosophy and movement that is skeptical of all justifications for "
        "authority. Anarchism is a political philosophy that advocates self-governed societies based on voluntary "
        "institutions. These are often described as stateless societies."
    )
    start = passage.index("self-governed")
    source = Citation(
        "en.wikipedia.org", "en.wikipedia.org", None, "Anarchism", "https://en.wikipedia.org/wiki/Anarchism"
    )
    answers = [
        ShownAnswer(
            answer="self-governed",
            score=0.41,
            block_id="en.wikipedia.org:12#0",
            passage=passage,
            start=start,
            end=start + 13,
            source=source,
        ),
        ShownAnswer(
            answer="stateless",
            score=0.2,
            block_id="en.wikipedia.org:12#0",
            passage=passage,
            start=0,
            end=9,
            source=source,
        ),
    ]
    result = PipelineResult(
        corpus=f"{store}/corpus/90f09899a83ed471",
        encoder=None,
        index=f"{store}/index/5b7c0d9e1f2a3b4c",
        factory=FACTORY,
        tokens=683_959,
        rows=DEMO_ROWS,
        answered=[Answered(query=DEMO_QUERY, answers=answers)],
        run_id="8eb96a2bbe98434f9093ff4130430fcd",
        serving=f"{store}/index/5b7c0d9e1f2a3b4c",
    )
    cloze = Path.cwd() / "bench" / "data" / "cloze-test.jsonl"
    uri = f"sqlite:///{store}/mlflow.db"
    return rendered(demo_story(result, manifest(CORPUS), "the shipped encoder", str(cloze), uri))


def test_the_demo_story_names_what_was_built_the_answer_its_evidence_and_what_to_run_next():
    text = demo_output()
    assert_legible(text, cells(rows_table(DEMO_ROWS)))
    assert "398 documents, 3,015 blocks, 689,972 tokens" in text
    assert "npm-store/corpus/90f09899a83ed471" in text and "npm-store/index/5b7c0d9e1f2a3b4c" in text
    assert "self-governed (0.41)" in text and "stateless (0.20)" in text
    # the answer names where it comes from: the article, its wiki and its address
    assert "from Anarchism · en.wikipedia.org:" in text and "    https://en.wikipedia.org/wiki/Anarchism\n" in text
    # the evidence is the sentence that holds the answer, not the passage's first sentence
    sentence = " ".join(text.split("self-governed (0.41)")[1].split())
    assert "advocates «self-governed» societies based on voluntary institutions." in sentence
    padded = [line for line in text.splitlines() if line.endswith(" ") and "zero-shot evaluation" not in line]
    assert not padded, f"lines padded with spaces (copied text would carry them): {padded}"
    assert "skeptical" not in sentence.split("then stateless")[0]
    assert 'npmcore query --index npm-store/index/5b7c0d9e1f2a3b4c "… [MASK] …"' in text
    assert "5b7c0d9e1f2a3b4c (served by npmcore api)" in text
    assert "    npmcore api --store npm-store" in text
    assert "mlflow ui --backend-store-uri sqlite:///npm-store/mlflow.db" in text
    assert "prefect server start" in text and "npmcore serve" in text


def test_the_next_commands_follow_the_store_and_the_servers_in_use(tmp_path, monkeypatch):
    from flows.output import next_commands

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFECT_API_URL", "http://prefect.internal:4200/api")  # a running server
    index = f"{tmp_path}/other-store/index/5b7c0d9e1f2a3b4c"
    lines = rendered(Group(*next_commands(index, "http://mlflow:5000")), width=40).splitlines()
    assert '    npmcore query --index other-store/index/5b7c0d9e1f2a3b4c "… [MASK] …"' in lines  # whole, to be copied
    assert "    NPM_STORE=other-store npmcore serve" in lines  # it trains on the demo's store
    text = " ".join(" ".join(lines).split())  # the rest is wrapped at 40 columns
    assert "the runs, in the MLflow UI: http://mlflow:5000" in text and "mlflow ui" not in text
    assert "then http://prefect.internal:4200 › Deployments › train › Run" in text
    assert "prefect server start" not in text
