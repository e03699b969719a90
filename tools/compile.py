"""Compiling a kernel: nvcc on a .cu file, or a fresh import of a .py file (which builds its
load_inline extensions), with ptxas's per-kernel resource report parsed into a table."""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from kagent.tools.base import (
    Args,
    BaseTool,
    Completed,
    ToolContext,
    ToolError,
    ToolFacts,
    ToolOutcome,
    relative_name,
    resolve_in_workspace,
    run_command,
)

NVCC_TIMEOUT_S = 300.0
IMPORT_TIMEOUT_S = 600.0
MAX_FIRST_ERRORS = 12

# ptxas -v lines (the "ptxas info    :" prefix is dropped before matching).
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_BARRIERS = re.compile(r"used (\d+) barriers")
# Lines of a build log that say what went wrong, in nvcc, gcc, ninja and Python terms.
_ERROR_LINE = re.compile(r"\berror\b|^\w*Error\b|FAILED:", re.IGNORECASE)

# A Python file is imported as the harness would: as module "solution", its folder on sys.path.
_IMPORT_SCRIPT = """
import importlib.util, sys
path = sys.argv[1]
sys.path.insert(0, sys.argv[2])
spec = importlib.util.spec_from_file_location("solution", path)
module = importlib.util.module_from_spec(spec)
sys.modules["solution"] = module
spec.loader.exec_module(module)
"""


def parse_ptxas(log: str) -> list[dict[str, Any]]:
    """Per function, in order: the resources ptxas -v reported. Entry functions (kernels)
    carry ``entry: True``; device functions compiled apart appear only with a stack frame."""
    functions: dict[tuple[str, str], dict[str, Any]] = {}
    current_entry: Optional[dict[str, Any]] = None
    current_props: Optional[dict[str, Any]] = None
    arch = ""
    for raw in log.splitlines():
        line = raw.split(":", 1)[1] if raw.lstrip().startswith("ptxas") and ":" in raw else raw
        if m := _ENTRY.search(line):
            arch = m.group(2)
            current_entry = functions.setdefault((m.group(1), arch), _blank(m.group(1), arch))
            current_entry["entry"] = True
        elif m := _PROPERTIES.search(line):
            name = m.group(1)
            current_props = functions.setdefault((name, arch), _blank(name, arch))
        elif (m := _FRAME.search(line)) and current_props is not None:
            current_props.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                                 spill_loads=int(m.group(3)))
        elif (m := _USED.search(line)) and current_entry is not None:
            current_entry["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                current_entry["shared_mem"] = int(s.group(1))
            if b := _BARRIERS.search(line):
                current_entry["barriers"] = int(b.group(1))
            current_entry["constant_mem"] = sum(int(c.group(1)) for c in _CMEM.finditer(line))
    return list(functions.values())


def _blank(name: str, arch: str) -> dict[str, Any]:
    return {"name": name, "arch": arch, "entry": False, "registers": None, "spill_stores": 0, "spill_loads": 0,
            "shared_mem": 0, "stack_frame": 0, "constant_mem": 0, "barriers": 0}


def demangle(names: list[str], ctx: ToolContext) -> dict[str, str]:
    """Readable names through cu++filt when it is there; mangled ones otherwise."""
    tool = shutil.which("cu++filt", path=ctx.command_env().get("PATH"))
    if not tool or not names:
        return {n: n for n in names}
    done = run_command([tool, *names], ctx, 30.0)
    readable = done.output.splitlines()
    if done.exit_code != 0 or len(readable) != len(names):
        return {n: n for n in names}
    return dict(zip(names, readable, strict=True))


def resource_table(kernels: list[dict[str, Any]]) -> str:
    if not kernels:
        return ""
    rows = ["kernel | arch | regs | spill st/ld B | smem B | stack B | cmem B"]
    for k in kernels:
        spill = f"{k['spill_stores']}/{k['spill_loads']}"
        warn = "  <- spills" if k["spill_stores"] or k["spill_loads"] else ""
        regs = "-" if k["registers"] is None else str(k["registers"])
        name = k.get("display_name", k["name"])
        rows.append(f"{name} | {k['arch']} | {regs} | {spill} | {k['shared_mem']} | {k['stack_frame']} | "
                    f"{k['constant_mem']}{warn}")
    return "\n".join(rows)


def first_errors(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if _ERROR_LINE.search(line)][:MAX_FIRST_ERRORS]


class CompileArgs(Args):
    path: str = Field(description="A .cu file (compiled by nvcc) or a .py file (imported in a fresh process, "
                                  "which builds its load_inline extensions)")
    arch: str = Field("sm_90", pattern=r"^(sm|compute)_\d+[a-z]?$", description="GPU architecture for nvcc")


class Compile(BaseTool):
    name = "compile"
    description = ("Compile without running: a .cu file with nvcc -Xptxas -v, or a .py file by importing it in a "
                   "fresh process (torch load_inline builds; pass extra_cuda_cflags=['-Xptxas','-v'] and "
                   "verbose=True to see resources). Returns per-kernel registers, spills, shared/stack/constant "
                   "memory, then compiler warnings and errors.")
    Arguments = CompileArgs
    # Importing a .py file runs its code, in the workspace.
    facts = ToolFacts(changes_files=True)

    def execute(self, args: CompileArgs, ctx: ToolContext) -> ToolOutcome:
        path = resolve_in_workspace(ctx, args.path)
        shown = relative_name(ctx, path)
        if not path.is_file():
            raise ToolError(f"no file {shown}")
        if path.suffix == ".cu":
            nvcc = shutil.which("nvcc", path=ctx.command_env().get("PATH"))
            if nvcc is None:
                raise ToolError("nvcc is not installed (not on PATH): .cu files cannot be compiled here")
            with tempfile.TemporaryDirectory(prefix="kagent-nvcc-") as tmp:
                argv = [nvcc, "-c", "-o", str(Path(tmp) / "out.o"), f"-arch={args.arch}", "-Xptxas", "-v",
                        "-lineinfo", str(path)]
                done = run_command(argv, ctx, NVCC_TIMEOUT_S, cwd=path.parent, writable=[Path(tmp)])
            what = f"nvcc -arch={args.arch} {shown}"
        elif path.suffix == ".py":
            argv = [ctx.eval_options.python, "-c", _IMPORT_SCRIPT, str(path), str(path.parent)]
            done = run_command(argv, ctx, IMPORT_TIMEOUT_S)
            what = f"import {shown} in a fresh python"
        else:
            raise ToolError(f"cannot compile {shown}: give a .cu or a .py file")
        return self._outcome(what, done, ctx, python=path.suffix == ".py")

    def _outcome(self, what: str, done: Completed, ctx: ToolContext, python: bool) -> ToolOutcome:
        kernels = parse_ptxas(done.output)
        names = demangle([k["name"] for k in kernels], ctx)
        for k in kernels:
            k["display_name"] = names[k["name"]]
        ok = not done.timed_out and done.exit_code == 0
        errors = [] if ok else first_errors(done.output)
        data = {"kernels": kernels, "exit_code": done.exit_code, "timed_out": done.timed_out,
                "seconds": done.seconds, "errors": errors}
        if done.timed_out:
            status = f"{what}: timed out after {done.seconds:.0f} s (process group killed)"
        elif ok:
            status = f"{what}: ok ({done.seconds:.1f} s)"
        else:
            status = f"{what}: FAILED (exit code {done.exit_code})"
        parts = [status]
        table = resource_table(kernels)
        if table:
            parts.append(table)
        elif ok and python:
            parts.append("no ptxas report in the build output (Triton compiles at the first launch; for "
                         "load_inline pass extra_cuda_cflags=['-Xptxas','-v'] and verbose=True)")
        if errors:
            parts.append("first errors:\n" + "\n".join(errors))
        # ptxas's info lines are in the table already; what is left are warnings and errors.
        log = "\n".join(line for line in done.output.splitlines()
                        if not (line.startswith("ptxas info") or _FRAME.search(line))).strip()
        if log:
            parts.append(("full output:\n" if errors else "output:\n") + log)
        return ToolOutcome(content="\n\n".join(parts), is_error=not ok, data=data)
