"""The README and docs/ stay true: the README's first screen has the two commands and what the demo prints,
every command line they show names options the CLI has (and every option of the CLI is shown), every
link leads to a file and heading that exist."""

import re
from pathlib import Path

import pytest
import typer.main
from conftest import ROOT

from flows.cli import app

README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [README, *PAGES]
STAGES = {"ingest", "train", "index-and-query", "evaluate", "operate", "gpu"}


def fenced(path: Path, language: str) -> list[str]:
    """The fenced code blocks of one language in a markdown file."""
    return re.findall(rf"^```{language}\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def synopses() -> dict[str, set[str]]:
    """Command name -> the options its command lines show (``text`` blocks: a line ``npmcore CMD …``,
    then its indented continuation lines)."""
    shown: dict[str, set[str]] = {}
    for path in DOCS:
        for block in fenced(path, "text"):
            command = None
            for line in block.splitlines():
                if line.startswith("npmcore "):
                    command = line.split()[1]
                elif not line.startswith(" "):
                    command = None
                if command:
                    shown.setdefault(command, set()).update(re.findall(r"--[a-z][a-z0-9-]*", line))
    return shown


def test_the_readme_starts_with_the_two_commands_and_what_the_demo_prints():
    first_screen = "\n".join(README.read_text().splitlines()[:60])
    assert "make demo" in first_screen and "make test" in first_screen
    assert all(f"(docs/{stage}.md)" in first_screen for stage in STAGES)  # where to go next
    excerpt = fenced(README, "text")[0]
    assert excerpt in first_screen
    from test_output import demo_output  # the demo's story of a realistic result

    def outline(text: str) -> list[list[str]]:  # the first two words of every line that is not indented
        return [line.split()[:2] for line in text.splitlines() if line.strip() and not line.startswith(" ")]

    assert outline(excerpt) == outline(demo_output())


def test_docs_has_one_page_per_stage():
    assert {p.stem for p in PAGES} >= STAGES


@pytest.mark.parametrize("command", sorted(typer.main.get_command(app).commands))
def test_every_command_line_shown_is_the_clis_and_shows_all_its_options(command):
    cli = typer.main.get_command(app).commands[command]
    commands = [cli, *getattr(cli, "commands", {}).values()]  # a group (npmcore serving): its subcommands' options
    options = [param for c in commands for param in c.params if param.param_type_name == "option"]
    known = {opt for param in options for opt in [*param.opts, *param.secondary_opts]}
    shown = synopses()
    assert command in shown, f"npmcore {command} appears in no command line of README.md or docs/"
    assert shown[command] <= known, f"npmcore {command} has no {sorted(shown[command] - known)}"
    missing = [param.opts[0] for param in options if not {*param.opts, *param.secondary_opts} & shown[command]]
    assert not missing, f"npmcore {command}: {missing} shown nowhere"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_link_leads_to_a_file_and_heading_that_exist(path):
    for target in re.findall(r"\]\(([^)]+)\)", path.read_text()):
        if "://" in target:
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{path.name}: {target}"
        if anchor:
            headings = {slug(h) for h in re.findall(r"^#+ (.*)$", linked.read_text(), flags=re.M)}
            assert anchor in headings, f"{path.name}: {target}"
