"""No product module over about 600 lines and no class over about 300 (issue 49), unless it says
why: a file with a line that starts ``# Longer than 600 lines:`` and gives the reason, a class
with ``Longer than 300 lines:`` and the reason in its docstring or in the comment directly
above it. A long file or class is then a decision someone wrote down, not one nobody made."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("agent", "tools", "sandbox", "core", "tasks", "prompts")
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 300
FILE_REASON = "# Longer than 600 lines:"
CLASS_REASON = "Longer than 300 lines:"


def _product_files() -> list[Path]:
    files = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO).parts
            # A task's own folder (tasks/<name>/) is the task's data, not kagent's code: its
            # reference model is the oracle a user reads against the spec, one file top to
            # bottom (tasks/02_kimi_linear_decode/reference.py), and its hashes are the task's.
            if parts[0] == "tasks" and len(parts) > 2:
                continue
            files.append(path)
    return files


def _gives_reason(line: str, marker: str) -> bool:
    """Whether ``line`` holds ``marker`` followed by some reason."""
    _, found, reason = line.partition(marker)
    return bool(found) and bool(reason.strip())


def _comment_above(lines: list[str], first: int) -> list[str]:
    """The comment lines directly above line ``first`` (1-based), nearest last."""
    above = []
    at = first - 2
    while at >= 0 and lines[at].strip().startswith("#"):
        above.append(lines[at])
        at -= 1
    return above[::-1]


def oversized(source: str, name: str) -> list[str]:
    """What in ``source`` (the text of file ``name``) is over its size and does not say why."""
    lines = source.splitlines()
    found = []
    if len(lines) > MAX_FILE_LINES and not any(
        line.startswith(FILE_REASON) and _gives_reason(line, FILE_REASON) for line in lines
    ):
        found.append(f"{name}: {len(lines)} lines, and no line '{FILE_REASON} <why>'")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= MAX_CLASS_LINES:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        said = [*(ast.get_docstring(node) or "").splitlines(), *_comment_above(lines, first)]
        if not any(_gives_reason(line, CLASS_REASON) for line in said):
            found.append(
                f"{name}:{node.lineno}: class {node.name} is {length} lines, and neither its docstring nor "
                f"the comment above it says '{CLASS_REASON} <why>'"
            )
    return found


def test_no_product_file_or_class_is_over_its_size_without_saying_why():
    found = [
        problem for path in _product_files() for problem in oversized(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert not found, "split these, or say why they are longer:\n" + "\n".join(found)


def _class(lines: int, docstring: str = "", above: str = "") -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    return f"{above}class Long:\n    {docstring or 'pass'}\n{body}"


def test_a_long_class_without_its_reason_is_found_and_with_it_passes():
    assert oversized(_class(MAX_CLASS_LINES), "short.py") == []
    assert oversized(_class(MAX_CLASS_LINES + 1), "long.py") == [
        f"long.py:1: class Long is {MAX_CLASS_LINES + 1} lines, and neither its docstring nor the comment "
        f"above it says '{CLASS_REASON} <why>'"
    ]
    assert oversized(_class(MAX_CLASS_LINES + 1, f'"""{CLASS_REASON} its steps run in one order."""'), "x.py") == []
    assert oversized(_class(MAX_CLASS_LINES + 1, above=f"# {CLASS_REASON} one protocol.\n"), "x.py") == []
    # A reason not directly above (a blank line between), or a marker with no reason, is none.
    assert oversized(_class(MAX_CLASS_LINES + 1, above=f"# {CLASS_REASON} one protocol.\n\n"), "x.py")
    assert oversized(_class(MAX_CLASS_LINES + 1, above=f"# {CLASS_REASON}\n"), "x.py")


def test_a_long_file_without_its_reason_is_found_and_with_it_passes():
    long_file = "".join(f"x{i} = {i}\n" for i in range(MAX_FILE_LINES + 1))
    assert oversized(long_file, "long.py") == [
        f"long.py: {MAX_FILE_LINES + 1} lines, and no line '{FILE_REASON} <why>'"
    ]
    assert oversized(f"{FILE_REASON} the steps of one protocol.\n" + long_file, "long.py") == []
    assert oversized(f"{FILE_REASON}\n" + long_file, "long.py")  # the marker alone gives no reason
    assert oversized(f"    {FILE_REASON} indented.\n" + long_file, "long.py")  # not at a line's start
    assert oversized("".join(f"x{i} = {i}\n" for i in range(MAX_FILE_LINES)), "short.py") == []
