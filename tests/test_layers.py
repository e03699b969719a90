"""kagent's layers, lowest first: a module imports kagent only from its own layer and those below
it (the README's layout table says the same). Imports are read with ast from the source, every
one of them: at the top of a module, inside a function, under TYPE_CHECKING."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]

# Lowest first. A layer is a folder of the repository as a module prefix; a module belongs to the
# longest prefix that holds it, so `agent` alone is agent/'s own modules (settings, outcome),
# which every part of the agent reads.
LAYERS = [
    "core",  # errors, paths, the conversation's types
    "prompts",  # the system prompt's text
    "tasks",  # finding and loading tasks
    "sandbox.harness",  # the GPU side of an evaluation: no kagent import at all (it runs from a copy)
    "sandbox",  # the agent side of an evaluation, containment
    "tools",  # what the model calls
    "agent",  # the run's settings and end states
    "agent.storage",  # what a run keeps on disk: trace, workspace, lock
    "agent.loop",  # the loop, budget, pricing, ledger, models
    "agent.lifecycle",  # start, resume, re-execute a run
    "agent.report",  # a run told for a person: the list of runs, the HTML page and board
    "agent.sweep",  # many runs on every GPU: plan, record, member driver, engines, board
    "agent.cli",  # the command line's wiring, the live view and the replay
]
# The harness imports itself by this name in the pristine copy an evaluation runs from.
HARNESS_OWN_NAME = "kagent_harness"


def layer_of(module: str) -> Optional[str]:
    """The layer of a kagent module ("kagent.agent.loop.models.openai" -> "agent.loop"), or
    None for a module outside kagent."""
    if module != "kagent" and not module.startswith("kagent."):
        return None
    inside = module.removeprefix("kagent").removeprefix(".")
    held = [layer for layer in LAYERS if inside == layer or inside.startswith(layer + ".")]
    return max(held, key=len) if held else "kagent"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["kagent", *parts])


def imported_modules(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, module) for every module ``source`` imports, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # A name imported from a package may be a module of it (`from kagent import prompts`).
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def violations(source: str, path: Path) -> list[str]:
    module = module_name(path)
    own = layer_of(module)
    assert own is not None and own in LAYERS, f"{path} lies in no layer: add its folder to LAYERS"
    found = []
    for line, imported in imported_modules(source, module, path.name == "__init__.py"):
        where = f"{path.relative_to(REPO)}:{line} ({own}) imports {imported}"
        target = layer_of(imported)
        if target is None:
            continue
        if own == "sandbox.harness" and target != own:
            found.append(
                f"{where}: the harness imports nothing of kagent but itself (as `{HARNESS_OWN_NAME}`, or relatively)"
            )
            continue
        if target not in LAYERS or LAYERS.index(target) > LAYERS.index(own):
            found.append(f"{where} ({target}): a layer imports only its own and those below it")
    return found


def sources() -> list[Path]:
    folders = {layer.split(".")[0] for layer in LAYERS}
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


def test_no_layer_imports_a_higher_one():
    found = [problem for path in sources() for problem in violations(path.read_text(), path)]
    assert not found, "\n".join(found)


def test_every_folder_of_the_package_is_in_a_layer():
    import tomllib

    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    # examples/ ships as data (the scripted sessions kagent finds by name), with no module of its own.
    code = {folder.split("/")[0] for folder in package_dirs.values()} - {"examples"}
    assert code == {layer.split(".")[0] for layer in LAYERS}


def test_an_import_from_a_higher_layer_is_caught():
    tool = REPO / "tools" / "example.py"
    assert violations("from kagent.agent.cli.app import main\n", tool)
    assert violations("def later():\n    from kagent.agent.storage import trace\n", tool)
    assert violations("from kagent.tools.base import cap\n", REPO / "sandbox" / "example.py")
    assert violations("from ..agent.loop import budget\n", tool)
    assert violations("from kagent.agent.lifecycle.runs import start_run\n", REPO / "agent" / "loop" / "example.py")
    assert violations("from kagent.core.errors import KagentError\n", REPO / "sandbox" / "harness" / "example.py")
    assert violations("from kagent.agent.cli.replay import replay\n", REPO / "agent" / "report" / "example.py")
    assert violations("from kagent.agent.sweep.board import summarize\n", REPO / "agent" / "report" / "example.py")
    # ... and what is allowed is not
    assert not violations("from kagent.sandbox.results import EvalResult\nfrom kagent.core import paths\n", tool)
    assert not violations(
        "from kagent_harness import launches\nimport torch\n", REPO / "sandbox" / "harness" / "example.py"
    )
    assert not violations("from kagent import prompts\n", REPO / "agent" / "lifecycle" / "example.py")


def import_graph() -> dict[str, set[str]]:
    """Each module of the product -> the product's modules it imports, anywhere in it (a lazy
    import inside a function closes a circle as surely as one at the top). A name imported from
    a package that is no module of it counts as the package; the harness's own name counts as
    the harness."""
    paths = {module_name(path): path for path in sources()}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        edges = graph.setdefault(module, set())
        for _line, imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            if imported == HARNESS_OWN_NAME or imported.startswith(HARNESS_OWN_NAME + "."):
                imported = "kagent.sandbox.harness" + imported.removeprefix(HARNESS_OWN_NAME)
            while imported and imported not in paths:
                imported = imported.rpartition(".")[0]
            if imported and imported != module:
                edges.add(imported)
    return graph


def circle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """A circle of imports in ``graph``, each module followed by one it imports and the first
    repeated at the end, or None where there is none (graphlib finds one when it cannot order
    the modules)."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as err:
        return list(reversed(err.args[1]))  # graphlib lists a module after those it imports
    return None


def test_no_module_imports_itself_round_a_circle():
    found = circle(import_graph())
    assert found is None, "an import circle: " + " -> ".join(found or [])


def test_a_circle_is_caught():
    found = circle({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()})
    assert found is not None and set(found) == {"a", "b", "c"} and found[0] == found[-1]
    assert circle({"a": {"b"}, "b": {"c", "d"}, "c": {"d"}, "d": set()}) is None


# The lab (lab/: the notebook, raw measurements, measurement scripts and research tools) sits
# above everything: it may use the product, and nothing of the product, its tests or its example
# kernel reaches into it, by import or by a path.
LAB_FREE = ["core", "prompts", "tasks", "sandbox", "tools", "agent", "tests", "examples", "scripts"]


def lab_references(source: str) -> list[int]:
    """Lines of ``source`` whose code (docstrings left aside) names the lab: a string that is
    `lab` or holds `lab/`, through which a path into it is built or a module of it found."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (node.value == "lab" or "lab/" in node.value)
    ]


def test_nothing_of_the_product_reaches_into_the_lab():
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for folder in LAB_FREE
        for path in sorted((REPO / folder).rglob("*.py"))
        if "redteam" not in path.parts and path != Path(__file__).resolve()  # its own examples
        for line in lab_references(path.read_text())
    ]
    assert not found, "these name lab/ in code: " + ", ".join(found)


def test_a_path_into_the_lab_is_caught():
    assert lab_references('import sys\nsys.path.insert(0, "lab/scripts")\n') == [2]
    assert lab_references('from pathlib import Path\nNOTES = Path("x") / "lab" / "notebook"\n') == [2]
    assert lab_references('"""A module of the product; the lab/ folder has its figures."""\nx = "label"\n') == []
