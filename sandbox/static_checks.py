"""Static rules on a solution's source, checked before any of it runs.

The solution file and every local module it imports (found by following its imports inside
its own folder) are parsed, never executed. Findings carry file, line and the offending
code, so that a model or a person sees exactly what to change.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# Always forbidden, whatever the task says: the harness itself and the task's own modules.
ALWAYS_FORBIDDEN = ("kagent", "kagent_harness", "reference", "baseline")
# Modules whose only use in a solution would be to import something the rules cannot see.
DYNAMIC_IMPORT_MODULES = ("importlib", "imp", "runpy", "pkgutil", "zipimport", "builtins")
# Names that run Python code built at run time, where a forbidden import could hide;
# flagged when called and when merely referenced (``f = eval``).
DYNAMIC_CODE_NAMES = ("exec", "eval", "compile")
# Attributes through which a loaded module or the import machinery can be reached.
SENSITIVE_ATTRIBUTES = ("modules", "__import__", "import_module", "__builtins__", "__loader__", "__spec__",
                        "__dict__")
# Modules on which any dynamic attribute lookup (getattr) is treated as an import in disguise.
SENSITIVE_MODULES = ("sys", "builtins", "importlib")


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    evidence: str


def _top(module: str | None) -> str:
    return (module or "").split(".")[0]


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: Path, root: Path, source: str, tree: ast.AST, forbidden: set[str]):
        self.path, self.root, self.forbidden = path, root, forbidden
        self.lines = source.splitlines()
        self.findings: list[Finding] = []
        self.local_imports: list[Path] = []
        # Every name the sensitive modules are bound to in this file (``import sys as s``).
        self.sensitive_names = {alias.asname or alias.name for node in ast.walk(tree)
                                if isinstance(node, ast.Import) for alias in node.names
                                if alias.name in SENSITIVE_MODULES}

    def _add(self, node: ast.AST, rule: str) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(str(self.path.relative_to(self.root)), line, rule, text[:200]))

    def _module(self, name: str, node: ast.AST) -> None:
        top = _top(name)
        if top in self.forbidden:
            self._add(node, "forbidden_import")
        elif top in DYNAMIC_IMPORT_MODULES:
            self._add(node, "dynamic_import")
        local = self._local(name.split("."))
        if local:
            self.local_imports.append(local)

    def _local(self, parts: list[str]) -> Path | None:
        base = self.root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # relative: a module of the solution's own folder
            folder = self.path.parent
            for _ in range(node.level - 1):
                folder = folder.parent
            parts = list(folder.relative_to(self.root).parts) + (node.module.split(".") if node.module else [])
            for alias in node.names:
                for target in (self._local(parts + [alias.name]), self._local(parts)):
                    if target:
                        self.local_imports.append(target)
            return
        self._module(node.module or "", node)
        if node.module in SENSITIVE_MODULES and any(a.name in SENSITIVE_ATTRIBUTES for a in node.names):
            self._add(node, "sys_modules" if node.module == "sys" else "dynamic_import")
        for alias in node.names:  # `from pkg import mod` may name a local submodule
            local = self._local((node.module or "").split(".") + [alias.name])
            if local:
                self.local_imports.append(local)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars") and node.args:
            target = node.args[0]
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(target, ast.Name) and target.id in self.sensitive_names:
                self._add(node, "dynamic_code")
            elif isinstance(name, ast.Constant) and name.value in SENSITIVE_ATTRIBUTES:
                self._add(node, "dynamic_code")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        on_sensitive = isinstance(node.value, ast.Name) and node.value.id in self.sensitive_names
        if node.attr in ("modules", "__dict__"):  # only sensitive on sys and friends
            if on_sensitive:
                self._add(node, "sys_modules")
        elif node.attr in SENSITIVE_ATTRIBUTES:
            self._add(node, "dynamic_import")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__", "__import__"):
            self._add(node, "dynamic_import")
        elif node.id in DYNAMIC_CODE_NAMES:
            self._add(node, "dynamic_code")


def scan(solution: Path, forbidden_imports: list[str] | tuple[str, ...] = ()) -> list[Finding]:
    """Findings over ``solution`` and the local modules it imports, in its own folder.

    A file that does not parse is left to the run, which reports the SyntaxError in full.
    """
    solution = solution.resolve()
    root = solution.parent
    forbidden = {_top(m) for m in forbidden_imports} | set(ALWAYS_FORBIDDEN)
    findings: list[Finding] = []
    queue, seen = [solution], set()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
            tree = ast.parse(source, filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        visitor = _Visitor(path, root, source, tree, forbidden)
        visitor.visit(tree)
        findings.extend(visitor.findings)
        queue.extend(p.resolve() for p in visitor.local_imports)
    return findings
