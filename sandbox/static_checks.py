"""Static rules on a solution's source, checked before any of it runs.

The solution file and every local module it imports (found by following its imports inside
its own folder) are parsed, never executed. Findings carry file, line and the offending
code, so that a model or a person sees exactly what to change.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
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
SENSITIVE_ATTRIBUTES = ("modules", "__import__", "import_module", "__builtins__", "__loader__", "__spec__", "__dict__")
# Modules on which any dynamic attribute lookup (getattr) is treated as an import in disguise.
SENSITIVE_MODULES = ("sys", "builtins", "importlib")
# torch APIs that replay or compile work instead of running it, which the timing would credit
# to the solution: by dotted name, matched on the name itself and everything under it.
CUDA_GRAPH_APIS = ("torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.make_graphed_callables")
TORCH_COMPILE_APIS = ("torch.compile", "torch._dynamo", "torch._inductor")
# The same in C++/CUDA source (native files, or strings handed to load_inline).
CUDA_GRAPH_NATIVE = re.compile(
    r"\b(cudaGraph\w*|cudaStreamBeginCapture\w*|cudaStreamEndCapture|cuGraph\w*|"
    r"cuStreamBeginCapture\w*)\b"
)
NATIVE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp")
# Comments in C++/CUDA source, so that an honest "// no cudaGraphLaunch here" does not trip.
_NATIVE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def api_rule(dotted: str) -> str | None:
    """The rule a use of the dotted torch name breaks, if any."""
    for rule, apis in (("cuda_graph", CUDA_GRAPH_APIS), ("torch_compile", TORCH_COMPILE_APIS)):
        if any(dotted == api or dotted.startswith(api + ".") for api in apis):
            return rule
    return None


def native_graph_calls(source: str) -> list[tuple[int, str]]:
    """(line, API name) of CUDA graph calls in C++/CUDA source, comments ignored."""

    def blank(match: re.Match) -> str:  # keeps line numbers: newlines stay
        return re.sub(r"[^\n]", " ", match.group(0))

    code = _NATIVE_COMMENT.sub(blank, source)
    return [(code.count("\n", 0, m.start()) + 1, m.group(1)) for m in CUDA_GRAPH_NATIVE.finditer(code)]


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    evidence: str


def _top(module: str | None) -> str:
    return (module or "").split(".")[0]


# What an import that may fail is guarded by (an optional dependency, as triton on a CPU).
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


def _installed(top: str) -> bool:
    """Whether the interpreter finds a top-level module of this name (without importing it)."""
    if top in sys.builtin_module_names or top == "__future__":
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _guarded_imports(tree: ast.AST) -> set[int]:
    """The ids of import statements inside a ``try`` that catches their failure."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        names = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            names |= {k.id if isinstance(k, ast.Name) else "Exception" if k is None else "" for k in kinds}
        if names & set(_IMPORT_ERRORS) or any(h.type is None for h in node.handlers):
            guarded |= {
                id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))
            }
    return guarded


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: Path, root: Path, source: str, tree: ast.AST, forbidden: set[str]):
        self.path, self.root, self.forbidden = path, root, forbidden
        self.lines = source.splitlines()
        self.findings: list[Finding] = []
        self.local_imports: list[Path] = []
        self.guarded = _guarded_imports(tree)
        # Every name the sensitive modules are bound to in this file (``import sys as s``).
        self.sensitive_names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name in SENSITIVE_MODULES
        }
        # Every name bound to torch or a part of it, with the dotted name it stands for
        # (``import torch.cuda as tc``: tc -> torch.cuda; ``from torch import cuda``).
        self.torch_names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _top(alias.name) == "torch":
                        if alias.asname:
                            self.torch_names[alias.asname] = alias.name
                        else:
                            self.torch_names["torch"] = "torch"
            elif isinstance(node, ast.ImportFrom) and not node.level and _top(node.module) == "torch":
                for alias in node.names:
                    self.torch_names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        # A file that builds C++/CUDA at run time hands its source over in string literals.
        self.builds_native = any(
            (isinstance(node, ast.Name) and node.id == "load_inline")
            or (isinstance(node, ast.Attribute) and node.attr == "load_inline")
            or (isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"))
            for node in ast.walk(tree)
        )

    def _add(self, node: ast.AST, rule: str, evidence: str | None = None) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        finding = Finding(str(self.path.relative_to(self.root)), line, rule, (evidence or text)[:200])
        # ``torch._dynamo.config`` is seen at each level of its attribute chain: report it once.
        if not any(f.line == line and f.rule == rule for f in self.findings):
            self.findings.append(finding)

    def _dotted(self, node: ast.AST) -> str | None:
        """The torch name an expression like ``torch.cuda.CUDAGraph`` stands for, if any."""
        if isinstance(node, ast.Name):
            return self.torch_names.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _namespace(self, node: ast.AST) -> str | None:
        """The torch name whose attribute dict ``node`` is (``torch.__dict__``, ``vars(torch)``)."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self._dotted(node.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "vars"
            and len(node.args) == 1
        ):
            return self._dotted(node.args[0])
        return None

    def _named_lookup(self, node: ast.AST, base: str, name: ast.AST | None) -> None:
        """An attribute of the torch name ``base`` looked up by the string ``name`` rather than
        written as an attribute: a literal is judged as the dotted name it makes; anything
        built at run time could reach any API, as with getattr."""
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            rule = api_rule(f"{base}.{name.value}")
            if rule:
                self._add(node, rule)
        else:
            self._add(node, "computed_getattr")

    def _module(self, name: str, node: ast.AST) -> None:
        top = _top(name)
        rule = api_rule(name)
        if rule:
            self._add(node, rule)
        if top in self.forbidden:
            self._add(node, "forbidden_import")
        elif top in DYNAMIC_IMPORT_MODULES:
            self._add(node, "dynamic_import")
        local = self._local(name.split("."))
        if local:
            self.local_imports.append(local)
        elif (
            top
            and top not in self.forbidden
            and id(node) not in self.guarded
            and not any(self.root.glob(f"{top}.*"))
            and not (self.root / top).exists()
            and not _installed(top)
        ):
            # Nothing of that name in the solution's folder (source, bytecode, a built
            # extension) and nothing installed: a module the solution writes at run time before
            # it imports it (a copy of the task's file, beyond every rule here).
            self._add(node, "module_made_at_run_time")

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
        for alias in node.names:
            rule = api_rule(f"{node.module}.{alias.name}") if _top(node.module) == "torch" else None
            if rule:
                self._add(node, rule)
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
            base = self._dotted(target)
            if base and node.func.id == "getattr" and name is not None:
                # A name built at run time on torch could reach any API the rules name.
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    self._add(node, "computed_getattr")
                else:
                    rule = api_rule(f"{base}.{name.value}")
                    if rule:
                        self._add(node, rule)
        if isinstance(node.func, ast.Attribute):
            # torch.__dict__.get("compile"), vars(torch).get(...), torch.__getattribute__("compile"),
            # object.__getattribute__(torch, "compile")
            namespace = self._namespace(node.func.value)
            if namespace and node.func.attr in ("get", "pop", "setdefault") and node.args:
                self._named_lookup(node, namespace, node.args[0])
            elif node.func.attr == "__getattribute__" and node.args:
                owner = self._dotted(node.func.value)
                if owner:
                    self._named_lookup(node, owner, node.args[0])
                elif len(node.args) > 1 and (named := self._dotted(node.args[0])):
                    self._named_lookup(node, named, node.args[1])
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        namespace = self._namespace(node.value)  # torch.__dict__["compile"], vars(torch.cuda)["graph"]
        if namespace:
            self._named_lookup(node, namespace, node.slice)
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant):
            return  # a docstring or a bare string: prose, not source handed to a compiler
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if self.builds_native and isinstance(node.value, str):
            for offset, api in native_graph_calls(node.value):
                self._add(node, "cuda_graph", f"{api} in C++ source at line {node.lineno + offset - 1}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        rule = api_rule(dotted) if dotted else None
        if rule:
            self._add(node, rule)
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
    findings.extend(_scan_native(root))
    return findings


def _scan_native(root: Path, limit: int = 200) -> list[Finding]:
    """CUDA graph calls in the C++/CUDA files of the solution's folder (the first ``limit``)."""
    findings = []
    files = sorted(
        p
        for p in root.rglob("*")
        if p.suffix in NATIVE_SUFFIXES
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )[:limit]
    for path in files:
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line, api in native_graph_calls(source):
            findings.append(Finding(str(path.relative_to(root)), line, "cuda_graph", api))
    return findings
