"""The README is a door and docs/ holds the depth: these tests keep both true to the code.

Every command and flag of the CLI (read from the typer app itself) and every run setting must
be findable in docs/; the tools table must say what each tool declares of itself; the README
must stay short and link only to files that exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

from kagent.agent.cli.app import app
from kagent.agent.settings import Budget, RunSettings
from kagent.tools import all_tools

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MAX_LINES = 250
# A markdown link or image: [text](target) or ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def docs_text() -> str:
    return "\n".join(page.read_text() for page in sorted(DOCS.glob("*.md")))


def commands(group: Any, prefix: str = "kagent") -> dict[str, Any]:
    """Every command of the CLI by its full name ("kagent sweep status"), groups included. Read
    by duck typing: newer typer builds on a click of its own, older typer on click itself."""
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        found[f"{prefix} {name}"] = command
        if hasattr(command, "commands"):
            found.update(commands(command, f"{prefix} {name}"))
    return found


def cli() -> Any:
    group = typer.main.get_command(app)
    assert hasattr(group, "commands"), group
    return group


def test_every_command_is_documented():
    text = docs_text()
    names = commands(cli())
    assert {"kagent run", "kagent eval", "kagent sweep status"} <= names.keys()
    missing = [name for name in names if f"`{name}" not in text]
    assert not missing, f"commands that no page of docs/ names (as `{missing[0]} ...`): {missing}"


def test_every_flag_is_documented():
    text = docs_text()
    group = cli()
    missing = [
        f"{name} {flag}"
        for name, command in {"kagent": group, **commands(group)}.items()
        for param in command.params
        if param.param_type_name == "option"
        for flag in param.opts
        if flag.startswith("--") and flag != "--help" and not re.search(rf"`[^`]*{re.escape(flag)}\b", text)
    ]
    assert not missing, f"flags that no page of docs/ names in code quotes: {missing}"


def test_every_setting_is_documented():
    settings = (DOCS / "settings.md").read_text()
    names = [f"budget.{name}" for name in Budget.model_fields] + [
        name for name in RunSettings.model_fields if name not in ("task", "budget")
    ]
    missing = [name for name in names if f"| `{name}` |" not in settings]
    assert not missing, f"settings missing from docs/settings.md's table: {missing}"


def test_the_tools_table_says_what_each_tool_declares():
    rows = []
    for tool in all_tools():
        facts = tool.facts
        attempt = ("yes, with its score" if facts.scores_attempt else "yes") if facts.records_attempt else "no"
        if facts.needs_loop:
            attempt += " (steers the loop)"
        rerun = "runs again" if facts.rerun_after_crash else "answered as interrupted"
        rows.append(f"| `{tool.spec.name}` | {'yes' if facts.changes_files else 'no'} | {rerun} | {attempt} |")
    table = "\n".join(["| tool | changes files | after a crash | records an attempt |", "|---|---|---|---|", *rows])
    assert table in (DOCS / "tools.md").read_text(), f"docs/tools.md's table should read:\n{table}"


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the depth belongs in docs/"


def test_readme_and_docs_link_only_to_files_that_exist():
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor of the same page
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, f"links to files that do not exist: {broken}"
    assert "docs/evaluation.md" in README.read_text()  # the README is a door into docs/


def test_the_broken_variants_table_names_each_part_as_the_tests_break_it():
    from test_eval_kimi import PARTS

    page = (DOCS / "evaluation.md").read_text()
    missing = [
        part for part, names in PARTS.items() if f"| {part} | {', '.join(f'`{n}`' for n in names)} |" not in page
    ]
    assert not missing, (
        f"parts of the math whose row in docs/evaluation.md does not name its broken variants: {missing}"
    )
