"""npmcore laid out as the pipeline runs (docs/code-map.md): its imports, read from the code, form no circle between
modules nor between its stage packages, each stage imports only the stages below it, and the shared modules at the
top import no stage (tracking excepted: it registers what the stages make, and no module of npmcore imports it)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "npmcore"
# each stage may import those before it: what is typed is read (ask) before any corpus
STAGES = ("ask", "corpus", "index", "model", "answer", "evaluation", "adapt", "serve")
ABOVE_THE_STAGES = {"npmcore.tracking"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each npmcore module and the npmcore modules it imports, anywhere in it (lazily, for type checking too)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        graph[name] = {m for m in found if m in modules and m != name and m != "npmcore"}
    return graph


def stage(module: str) -> str | None:
    """The stage package of ``module``; None for a shared module at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_finder_of_circles_finds_the_circle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [["a", "b", "c"]] and circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_npmcore_imports_another_that_imports_it_back():
    assert circles(imports()) == []


def test_the_stages_and_the_shared_top_import_only_downward():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(STAGES), "a package of npmcore is not a stage of docs/code-map.md, or one is missing"
    upward = []
    for module, imported in sorted(imports().items()):
        mine = stage(module)
        for other in sorted(imported):
            theirs = stage(other)
            if theirs is None:
                if other in ABOVE_THE_STAGES:
                    upward.append(f"{module} -> {other}")
                continue
            if mine is None and module not in ABOVE_THE_STAGES or mine and STAGES.index(theirs) > STAGES.index(mine):
                upward.append(f"{module} -> {other}")
    assert upward == []


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_says_what_it_holds_and_what_it_may_import(name):
    doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
    assert doc and "Imports" in doc
    for later in STAGES[STAGES.index(name) + 1 :]:
        assert f"npmcore.{later}`" not in doc.split("Imports", 1)[1], f"{name} says it imports {later}, a later stage"


def test_every_module_has_its_row_in_the_module_map():
    """npmcore/README.md names each module of the top and of the stages (evaluation/ in one row), so a new room is
    found where a newcomer looks for it."""
    table = (PACKAGE / "README.md").read_text()
    rooms = sorted(
        module_name(p).removeprefix("npmcore.").replace(".", "/") + ".py"
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "evaluation" not in p.parts and "checkpoints" not in p.parts
    )
    assert [room for room in rooms if f"| `{room}` |" not in table] == []
