"""The compile tool's child (kagent.tools.compile), run contained by the evaluating interpreter: import a Python file
as the harness would (module ``solution``, its folder on the import path); where it defines
the task's model, build it with the reference's weights and run one warm-up step, as the
profiler does, so that Triton compiles its kernels (at their first launch) and load_inline
builds what it builds lazily. Then write what was built to the job's result file: every
Triton kernel compiled (timed, with its metadata) and the shared libraries of the workspace
or the build home the process loaded, for the tool to read their device code with cuobjdump.
The result is written even when the import or the step raises (the traceback goes to
stderr, which the tool shows).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kagent.sandbox.instruments.job import ChildJob


class TritonCompiles:
    """Every Triton compile in this process, timed: ``triton.compiler.compile`` (which each
    kernel's first launch calls) is wrapped before the solution is imported."""

    def __init__(self) -> None:
        import triton
        import triton.compiler

        self.version = getattr(triton, "__version__", None)
        self.cache = _triton_cache_dir()
        self.compiled: list[tuple[Any, float, bool]] = []
        original = triton.compiler.compile

        def compile(*args: Any, **kwargs: Any) -> Any:
            before = _entries(self.cache)
            began = time.perf_counter()
            kernel = original(*args, **kwargs)
            # Nothing new in the cache: the kernel was found there, not compiled.
            self.compiled.append((kernel, time.perf_counter() - began, not (_entries(self.cache) - before)))
            return kernel

        for owner in (triton, triton.compiler, getattr(triton.compiler, "compiler", None)):
            if owner is not None and getattr(owner, "compile", None) is original:
                owner.compile = compile

    def records(self, on_gpu: bool) -> list[dict[str, Any]]:
        records = []
        for kernel, seconds, cached in self.compiled:
            if on_gpu and getattr(kernel, "n_regs", None) is None:
                _load(kernel)  # compiled but not launched: loading it gives the registers
            records.append(triton_kernel_record(kernel, seconds, cached))
        return records


def triton_kernel_record(kernel: Any, compile_s: float, cached: bool) -> dict[str, Any]:
    """One Triton CompiledKernel as plain JSON: its metadata (name, shared memory, warps,
    stages), and, once the driver has loaded it (at its first launch), registers and spills.
    Triton's n_spills is the driver's local memory per thread in 4-byte words."""
    meta = kernel.metadata
    registers = getattr(kernel, "n_regs", None)
    spills = getattr(kernel, "n_spills", None)
    target = getattr(meta, "target", None)
    arch = getattr(meta, "arch", None) or (f"sm{getattr(target, 'arch', '')}" if target is not None else None)
    return {
        "name": getattr(meta, "name", None) or getattr(kernel, "name", "?"),
        "registers": registers,
        "spill_bytes": None if spills is None else 4 * int(spills),
        "shared_mem": getattr(meta, "shared", None),
        "num_warps": getattr(meta, "num_warps", None),
        "num_stages": getattr(meta, "num_stages", None),
        "num_ctas": getattr(meta, "num_ctas", None),
        "arch": arch,
        "cooperative_launch": getattr(meta, "launch_cooperative_grid", None),
        "compile_s": round(compile_s, 3),
        "cached": cached,
    }


def _load(kernel: Any) -> None:
    try:
        kernel._init_handles()
    except Exception:  # a kernel too large for the device, say: its row shows no registers
        pass


def _triton_cache_dir() -> Path:
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    return Path(os.environ.get("TRITON_HOME") or Path.home()) / ".triton" / "cache"


def _entries(folder: Path) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def loaded_libraries(roots: list[Path], skipped: list[Path]) -> list[str]:
    """Shared libraries this process has mapped from under ``roots``, except under ``skipped``."""
    found: set[str] = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6:
                continue
            path = fields[5].strip().removesuffix(" (deleted)")
            if ".so" not in Path(path).name:
                continue
            resolved = Path(path)
            if any(_under(resolved, r) for r in roots) and not any(_under(resolved, s) for s in skipped):
                found.add(path)
    return sorted(found)


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def main(job_file: str) -> None:
    job = ChildJob.read(job_file)
    triton = TritonCompiles() if importlib.util.find_spec("triton") is not None else None
    solution = Path(str(job.solution))
    result: dict[str, Any] = {
        "device": job.device,
        "model_class": None,
        "stepped": False,
        "step_seconds": None,
        "context_len": None,
        "triton_installed": triton is not None,
        "triton_version": triton.version if triton else None,
    }
    on_gpu = job.device.startswith("cuda")
    try:
        _import_and_step(job, solution, result)
    except BaseException:
        traceback.print_exc()
        raise SystemExit(1) from None
    finally:
        result["triton"] = triton.records(on_gpu) if triton else []
        extensions = os.environ.get("TORCH_EXTENSIONS_DIR")
        roots = [solution.parent.resolve(), Path.home().resolve(), *([Path(extensions)] if extensions else [])]
        result["libraries"] = loaded_libraries(roots, skipped=[triton.cache.resolve()] if triton else [])
        Path(job.result).write_text(json.dumps(result))


def _import_and_step(job: ChildJob, solution: Path, result: dict[str, Any]) -> None:
    sys.path.insert(0, str(solution.parent))  # its own helper modules, as in the harness
    # As the harness's loading.load_module does, without importing torch for a file that
    # does not (a helper, a scratch file) by importing the harness.
    spec = importlib.util.spec_from_file_location("solution", solution)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {solution}")
    module = sys.modules["solution"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model_class = job.kind.model_class
    if not isinstance(getattr(module, model_class, None), type):
        return  # a helper or a scratch file: importing it was the build
    result["model_class"] = model_class
    import torch  # only for a file that builds a model (its kind's steps import torch too)

    device = torch.device(job.device)
    with torch.no_grad():
        _, step, result["context_len"] = job.kind.instrument_steps().solution_step(job, device, module)
        began = time.perf_counter()
        _run_step(step, device)
        result.update(stepped=True, step_seconds=round(time.perf_counter() - began, 3))


def _run_step(step: Callable[[], Any], device: Any) -> None:
    import torch

    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
