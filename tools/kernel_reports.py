"""What a build made, kernel by kernel, beyond ptxas's log (tools/compile.py parses that):
Triton's compiled-kernel metadata, and ``cuobjdump -res-usage`` on the shared libraries a
Python solution loaded (torch load_inline extensions, a library of its own), so that neither
needs a flag from the solution. Parsing and tables here; the compile tool's child
(kagent.sandbox.instruments.compile) collects, the tool formats.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

MAX_ROWS = 40

# cuobjdump -res-usage: "arch = sm_90" opens each ELF, "Function NAME:" a kernel, then its line
# "REG:40 STACK:256 SHARED:5120 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0".
_ARCH = re.compile(r"^\s*arch\s*=\s*(\S+)")
_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_RESOURCE = re.compile(r"([A-Z]+)(?:\[(\d+)\])?:(\d+)")


def _table(header: list[str], rows: list[tuple[list[Any], str]]) -> str:
    """Rows of cells ("-" for None), each with its warning, under ``header``; at most MAX_ROWS."""
    lines = [" | ".join(header)]
    lines += [" | ".join("-" if c is None else str(c) for c in cells) + warn for cells, warn in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"... and {len(rows) - MAX_ROWS} more")
    return "\n".join(lines)


def triton_table(kernels: list[dict[str, Any]]) -> str:
    """One row per compiled kernel; registers and spills read "-" for one never loaded."""
    return _table(
        ["kernel", "arch", "regs", "spill B", "smem B", "warps", "stages", "compile s"],
        [
            (
                [
                    k["name"],
                    k.get("arch"),
                    k.get("registers"),
                    k.get("spill_bytes"),
                    k.get("shared_mem"),
                    k.get("num_warps"),
                    k.get("num_stages"),
                    f"{k['compile_s']:.2f}" + (" (from Triton's cache)" if k.get("cached") else ""),
                ],
                "  <- spills" if k.get("spill_bytes") else "",
            )
            for k in kernels
        ],
    )


def parse_res_usage(output: str) -> list[dict[str, Any]]:
    """Per kernel (per architecture it was built for): registers, stack frame, shared, local
    and constant memory in bytes, from ``cuobjdump -res-usage``."""
    kernels: list[dict[str, Any]] = []
    arch, current = "", None
    for line in output.splitlines():
        if m := _ARCH.match(line):
            arch, current = m.group(1), None
        elif m := _FUNCTION.match(line):
            current = {"name": m.group(1), "arch": arch}
            kernels.append(current)
        elif current is not None and "REG:" in line:
            found: dict[str, int] = {}
            for name, _, value in _RESOURCE.findall(line):
                found[name] = found.get(name, 0) + int(value)  # CONSTANT[0], CONSTANT[2], ...
            current.update(
                registers=found.get("REG"),
                stack_frame=found.get("STACK", 0),
                shared_mem=found.get("SHARED", 0),
                local_mem=found.get("LOCAL", 0),
                constant_mem=found.get("CONSTANT", 0),
            )
            current = None
    return kernels


def res_usage_table(kernels: list[dict[str, Any]]) -> str:
    """One row per kernel and architecture. Its shared memory counts what the system reserves
    per block (1 KB on sm_80 and later), which ptxas's report leaves out."""
    return _table(
        ["kernel", "arch", "regs", "stack B", "local B", "smem B (incl. reserved)", "cmem B"],
        [
            (
                [
                    k.get("display_name", k["name"]),
                    k["arch"],
                    k.get("registers"),
                    k.get("stack_frame", 0),
                    k.get("local_mem", 0),
                    k.get("shared_mem", 0),
                    k.get("constant_mem", 0),
                ],
                "  <- local memory (spills or local arrays)" if k.get("stack_frame") or k.get("local_mem") else "",
            )
            for k in kernels
        ],
    )


def find_cuda_tool(name: str, path: Optional[str]) -> Optional[str]:
    """A CUDA binary utility (cuobjdump, nvdisasm) on ``path``, else in the CUDA toolkit, else
    from a Python package: NVIDIA's wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm), or
    the copies Triton ships."""
    found = shutil.which(name, path=path)
    if found:
        return found
    folders = [Path(os.environ[var]) / "bin" for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    folders.append(Path("/usr/local/cuda/bin"))
    nvidia = importlib.util.find_spec("nvidia")
    for root in (nvidia.submodule_search_locations or []) if nvidia else []:
        folders += sorted(Path(root).glob("*/bin"), reverse=True)  # cu13/bin before cu12's
    triton = importlib.util.find_spec("triton")
    if triton is not None and triton.origin:
        folders.append(Path(triton.origin).parent / "backends" / "nvidia" / "bin")
    return next((str(f / name) for f in folders if os.access(f / name, os.X_OK)), None)
