"""Compiling a kernel: nvcc on a .cu file, with ptxas's per-kernel resource report parsed into a
table; or a .py file imported in a fresh process and, when it defines the task's model, run for
one warm-up step (its child: kagent.sandbox.instruments.compile), with a report of each Triton
kernel it compiled and of the device code in each library it loaded (kernel_reports.py)."""

from __future__ import annotations

import json
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
from kagent.tools.children import child_command, child_files, child_job
from kagent.tools.kernel_reports import find_cuda_tool, parse_res_usage, res_usage_table, triton_table

NVCC_TIMEOUT_S = 300.0
IMPORT_TIMEOUT_S = 600.0
CUOBJDUMP_TIMEOUT_S = 60.0
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

# The child that imports a Python file, runs its warm-up step and says what it built
# (kagent.sandbox.instruments.compile).
COMPILE_CHILD = "kagent.sandbox.instruments.compile.main"


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
            current_props.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif (m := _USED.search(line)) and current_entry is not None:
            current_entry["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                current_entry["shared_mem"] = int(s.group(1))
            if b := _BARRIERS.search(line):
                current_entry["barriers"] = int(b.group(1))
            current_entry["constant_mem"] = sum(int(c.group(1)) for c in _CMEM.finditer(line))
    return list(functions.values())


def _blank(name: str, arch: str) -> dict[str, Any]:
    return {
        "name": name,
        "arch": arch,
        "entry": False,
        "registers": None,
        "spill_stores": 0,
        "spill_loads": 0,
        "shared_mem": 0,
        "stack_frame": 0,
        "constant_mem": 0,
        "barriers": 0,
    }


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
        rows.append(
            f"{name} | {k['arch']} | {regs} | {spill} | {k['shared_mem']} | {k['stack_frame']} | "
            f"{k['constant_mem']}{warn}"
        )
    return "\n".join(rows)


def first_errors(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if _ERROR_LINE.search(line)][:MAX_FIRST_ERRORS]


class CompileArgs(Args):
    path: str = Field(
        description="A .cu file (compiled by nvcc) or a .py file (imported in a fresh process; if it "
        "defines the task's model, one warm-up step is run)"
    )
    arch: str = Field("sm_90", pattern=r"^(sm|compute)_\d+[a-z]?$", description="GPU architecture for nvcc")


class Compile(BaseTool):
    name = "compile"
    description = (
        "Compile without timing: a .cu file with nvcc -Xptxas -v; a .py file by importing it in a fresh "
        "process and, if it defines the task's model, building it with the reference's weights and "
        "running one warm-up step (Triton compiles at a kernel's first launch, load_inline when "
        "called). Returns per-kernel registers, spills, shared/stack/constant memory: from ptxas for "
        ".cu, from Triton's compiled-kernel metadata for each Triton kernel (with its warps and "
        "compile seconds; on a CUDA device), and from cuobjdump -res-usage for the device code of "
        "every library the file loaded (load_inline extensions; no flags needed); then compiler "
        "warnings and errors."
    )
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
                argv = [
                    nvcc,
                    "-c",
                    "-o",
                    str(Path(tmp) / "out.o"),
                    f"-arch={args.arch}",
                    "-Xptxas",
                    "-v",
                    "-lineinfo",
                    str(path),
                ]
                done = run_command(argv, ctx, NVCC_TIMEOUT_S, cwd=path.parent, writable=[Path(tmp)])
            return self._outcome(f"nvcc -arch={args.arch} {shown}", done, ctx, [], {})
        if path.suffix == ".py":
            return self._python(path, shown, ctx)
        raise ToolError(f"cannot compile {shown}: give a .cu or a .py file")

    def _python(self, path: Path, shown: str, ctx: ToolContext) -> ToolOutcome:
        """Import (and step) the file in the compile child; report what it built."""
        with tempfile.TemporaryDirectory(prefix="kagent-compile-") as folder:
            tmp = Path(folder)
            result = tmp / "built.json"
            writable, show = child_files(ctx, tmp)
            done = run_command(
                child_command(ctx, COMPILE_CHILD, child_job(ctx, path, result), tmp / "job.json"),
                ctx,
                IMPORT_TIMEOUT_S,
                writable=writable,
                show=show,
            )
            built = json.loads(result.read_text()) if result.exists() else {}
        what = f"import {shown} in a fresh python"
        if built.get("model_class"):
            what += f", then one warm-up step of its {built['model_class']} on {built['device']}" + (
                f" (context {built['context_len']})" if built.get("context_len") else ""
            )
        libraries = [self._device_code(library, ctx) for library in built.get("libraries", [])]
        sections = [*_triton_sections(built), *_library_sections(libraries, ctx)]
        data = {
            "triton": built.get("triton", []),
            "libraries": libraries,
            "stepped": built.get("stepped", False),
            "step_seconds": built.get("step_seconds"),
        }
        return self._outcome(what, done, ctx, sections, data)

    def _device_code(self, library: str, ctx: ToolContext) -> dict[str, Any]:
        """The kernels in ``library``'s device code, by cuobjdump -res-usage."""
        tool = find_cuda_tool("cuobjdump", ctx.command_env().get("PATH"))
        if tool is None:
            return {
                "path": library,
                "kernels": [],
                "note": "cuobjdump not found (on PATH, in the CUDA toolkit, "
                "or from pip install nvidia-cuda-cuobjdump): its device code is not reported",
            }
        done = run_command([tool, "-res-usage", library], ctx, CUOBJDUMP_TIMEOUT_S)
        kernels = parse_res_usage(done.output)
        names = demangle([k["name"] for k in kernels], ctx)
        for k in kernels:
            k["display_name"] = names[k["name"]]
        if kernels:
            return {"path": library, "kernels": kernels, "note": ""}
        why = (
            "no device code"
            if done.exit_code == 0 or "does not contain device code" in done.output
            else (f"cuobjdump failed (exit code {done.exit_code}): {done.output.strip()[-300:]}")
        )
        return {"path": library, "kernels": [], "note": why}

    def _outcome(
        self, what: str, done: Completed, ctx: ToolContext, sections: list[str], extra: dict[str, Any]
    ) -> ToolOutcome:
        kernels = parse_ptxas(done.output)
        names = demangle([k["name"] for k in kernels], ctx)
        for k in kernels:
            k["display_name"] = names[k["name"]]
        ok = not done.timed_out and done.exit_code == 0
        errors = [] if ok else first_errors(done.output)
        data = {
            "kernels": kernels,
            "exit_code": done.exit_code,
            "timed_out": done.timed_out,
            "seconds": done.seconds,
            "errors": errors,
            **extra,
        }
        if done.timed_out:
            status = f"{what}: timed out after {done.seconds:.0f} s (process group killed)"
        elif ok:
            status = f"{what}: ok ({done.seconds:.1f} s)"
        else:
            status = f"{what}: FAILED (exit code {done.exit_code})"
        parts = [status]
        table = resource_table(kernels)
        if table:
            parts.append("ptxas:\n" + table if sections else table)
        parts += sections
        if errors:
            parts.append("first errors:\n" + "\n".join(errors))
        # ptxas's info lines are in the table already; what is left are warnings and errors.
        log = "\n".join(
            line for line in done.output.splitlines() if not (line.startswith("ptxas info") or _FRAME.search(line))
        ).strip()
        if log:
            parts.append(("full output:\n" if errors else "output:\n") + log)
        return ToolOutcome(content="\n\n".join(parts), is_error=not ok, data=data)


def _triton_sections(built: dict[str, Any]) -> list[str]:
    if built.get("triton"):
        return [
            f"Triton kernels (Triton {built.get('triton_version')}; registers and spills once loaded on the "
            f"device):\n" + triton_table(built["triton"])
        ]
    if built.get("model_class") and not str(built.get("device", "")).startswith("cuda"):
        return [
            "no GPU here: the warm-up step ran on the CPU, so no Triton kernel was compiled or launched "
            "(Triton's registers, spills, shared memory and warps are reported on a CUDA device)"
        ]
    return []


def _library_sections(libraries: list[dict[str, Any]], ctx: ToolContext) -> list[str]:
    sections = []
    for library in libraries:
        name = _shown_path(Path(library["path"]), ctx)
        if library["kernels"]:
            sections.append(f"device code of {name} (cuobjdump -res-usage):\n" + res_usage_table(library["kernels"]))
        elif library["note"] != "no device code":
            sections.append(f"{name}: {library['note']}")
    return sections


def _shown_path(path: Path, ctx: ToolContext) -> str:
    for root, label in ((ctx.workspace.resolve(), ""), (ctx.home.resolve(), "$HOME/")):
        if path == root or root in path.parents:
            return label + str(path.relative_to(root))
    return str(path)
