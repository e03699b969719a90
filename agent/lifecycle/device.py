"""The torch device a run or an evaluation uses, resolved and checked before anything starts.

Knowing whether torch sees a CUDA device means importing torch, 2-4 s that a `kagent eval`
would pay before its evaluation even starts (whose processes import torch again). So "cpu"
needs no torch at all, and what torch saw of CUDA is kept in a small file under kagent's
home, valid while this machine's fingerprint stays the same: the interpreter, torch's
installed files, the NVIDIA driver, the device nodes and the variables that hide devices.
Any of those changing makes the next command ask torch again. A GPU lost without any of
them changing is still caught: the evaluation's harness checks the device again with torch
and says so (harness/base.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ValidationError

from kagent.core.errors import KagentError
from kagent.core.paths import kagent_home

DEVICE_FORM = re.compile(r"cpu|cuda(:\d+)?")
PROBE_FILE = "device_probe.json"
# Variables that change which devices torch sees.
_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


class DeviceProbe(BaseModel):
    """What torch saw of CUDA on this machine, and the fingerprint it is valid for."""

    version: Literal[1] = 1
    fingerprint: str
    torch_version: str
    cuda_available: bool
    device_count: int


def check_device_name(device: str) -> None:
    """A device name kagent knows (auto, cpu, cuda, cuda:N), without importing torch."""
    if device != "auto" and not DEVICE_FORM.fullmatch(device):
        raise KagentError(f"unknown device {device!r}", hint="use auto, cpu, cuda or cuda:N")


def resolve_device(device: str) -> str:
    """``auto`` made concrete (cuda where torch sees a GPU, else cpu), and a CUDA device
    checked to exist here: on a machine without one every evaluation would fail the same way."""
    check_device_name(device)
    if device == "cpu":
        return device
    seen = probe()
    if device == "auto":
        return "cuda" if seen.cuda_available else "cpu"
    if not seen.cuda_available:
        raise KagentError(
            f"device {device} asked for, but torch {seen.torch_version} sees no CUDA device",
            hint="use --device cpu, or install the torch build for your CUDA driver",
        )
    index = int(device.partition(":")[2] or 0)
    if index >= seen.device_count:
        raise KagentError(
            f"device {device} asked for, but torch sees {seen.device_count} CUDA device(s)", hint="cuda:0 is the first"
        )
    return device


def probe(home: Optional[Path] = None) -> DeviceProbe:
    """What torch sees of CUDA: from the file under kagent's home where its fingerprint still
    matches this machine's, else from torch (imported now), kept for the next command."""
    path = (home or kagent_home()) / PROBE_FILE
    fingerprint = machine_fingerprint()
    if fingerprint is not None:
        try:
            kept = DeviceProbe.model_validate_json(path.read_text())
            if kept.fingerprint == fingerprint:
                return kept
        except (OSError, ValidationError):
            pass  # none yet, or not one of ours: ask torch
    import torch

    available = torch.cuda.is_available()
    seen = DeviceProbe(
        fingerprint=fingerprint or "",
        torch_version=torch.__version__,
        cuda_available=available,
        device_count=torch.cuda.device_count() if available else 0,
    )
    if fingerprint is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_name(f"{path.name}.{os.getpid()}")
            staged.write_text(seen.model_dump_json())
            staged.replace(path)
        except OSError:
            pass  # a home kagent cannot write: the next command asks torch again
    return seen


def machine_fingerprint() -> Optional[str]:
    """A hash of what decides what torch sees of CUDA here, read without importing torch;
    None where torch cannot be found that way."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    try:
        # Rewritten by every install of torch, whichever build.
        installed = (torch_dir / "version.py").stat()
    except OSError:
        return None
    try:
        driver = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        driver = "no NVIDIA driver"
    nodes = sorted(p.name for p in Path("/dev").glob("nvidia*"))
    parts = [
        sys.executable,
        str(torch_dir),
        f"{installed.st_mtime_ns} {installed.st_size}",
        driver,
        *nodes,
        *(f"{name}={os.environ.get(name)}" for name in _VISIBILITY),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# What the run's first message says of the machine, found by the evaluating interpreter (the
# one the solution runs in): the GPU, a copy's bandwidth timed as the harness times it, the
# bytes floor of the task's shapes at that bandwidth, the libraries' versions. Every winning
# public run spent its first calls probing for these.
_FACTS_SCRIPT = r"""
import importlib.util, json, os, shutil, sys
device, task_dir = sys.argv[1], sys.argv[2]
import torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda}
try:
    import triton
    out["triton"] = triton.__version__
except Exception:
    out["triton"] = None
out["ncu"] = shutil.which("ncu")
try:
    params = open("/proc/driver/nvidia/params").read()
    out["counters_admin_only"] = "RmProfilingAdminOnly: 1" in params
except OSError:
    out["counters_admin_only"] = None
out["root"] = os.geteuid() == 0
if device.startswith("cuda") and torch.cuda.is_available():
    d = torch.device(device)
    p = torch.cuda.get_device_properties(d)
    out.update(gpu=p.name, sms=p.multi_processor_count, l2_bytes=getattr(p, "L2_cache_size", None),
               memory_bytes=p.total_memory, capability=f"{p.major}.{p.minor}")
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=d)
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(); dst.copy_(src); end.record(); torch.cuda.synchronize(d)
        if i >= 3:
            times.append(begin.elapsed_time(end) / 1e3)
    times.sort()
    out["bytes_per_s"] = 2 * n / times[len(times) // 2]
    if all(os.path.exists(os.path.join(task_dir, f)) for f in ("roofline.py", "shapes.py")):
        sys.path.insert(0, task_dir)
        try:
            import roofline, shapes
            out["floor_us"] = {
                str(s["context_len"]): roofline.bytes_per_step(shapes.build_config(s), s["context_len"])
                / out["bytes_per_s"] * 1e6
                for s in shapes.SHAPES
            }
        except Exception as err:
            out["floor_error"] = f"{type(err).__name__}: {err}"
print(json.dumps(out))
"""
FACTS_TIMEOUT_S = 120.0


class MachineFacts(BaseModel):
    """What the evaluating interpreter saw of the machine (None where it could not tell)."""

    torch: Optional[str] = None
    cuda: Optional[str] = None
    triton: Optional[str] = None
    gpu: Optional[str] = None
    sms: Optional[int] = None
    l2_bytes: Optional[int] = None
    memory_bytes: Optional[int] = None
    capability: Optional[str] = None
    bytes_per_s: Optional[float] = None
    floor_us: dict[str, float] = {}
    floor_error: Optional[str] = None
    ncu: Optional[str] = None
    counters_admin_only: Optional[bool] = None
    root: bool = False
    error: Optional[str] = None


def machine_facts(device: str, python: str, task_dir: Path) -> MachineFacts:
    """The facts, from a child process of ``python`` (a GPU's take seconds: a 1 GiB copy, timed)."""
    import subprocess

    try:
        done = subprocess.run(
            [python, "-c", _FACTS_SCRIPT, device, str(task_dir)],
            capture_output=True,
            text=True,
            timeout=FACTS_TIMEOUT_S,
        )
        last = done.stdout.strip().splitlines()[-1:] or [""]
        return MachineFacts.model_validate_json(last[0])
    except (OSError, subprocess.TimeoutExpired, ValidationError, ValueError) as err:
        return MachineFacts(error=f"the machine could not be probed: {type(err).__name__}: {str(err)[:200]}")


def describe_machine(facts: MachineFacts, device: str) -> str:
    """The facts as the model reads them in its first message."""
    if facts.error:
        return facts.error
    versions = f"torch {facts.torch} (CUDA {facts.cuda or 'none'}), Triton {facts.triton or 'not installed'}"
    if facts.gpu is None:
        return f"The machine: {device}, no GPU. {versions}."
    l2 = f"{facts.l2_bytes / 2**20:.0f} MiB L2" if facts.l2_bytes else "L2 unknown"
    memory = f"{facts.memory_bytes / 2**30:.0f} GiB" if facts.memory_bytes else "memory unknown"
    lines = [
        f"The machine: {facts.gpu} (compute capability {facts.capability}), {facts.sms} SMs, {l2}, {memory}; "
        f"{versions}."
    ]
    if facts.bytes_per_s:
        floor = ""
        if facts.floor_us:
            floor = (
                "; the bytes floor of a step on this device (the task's bytes at that bandwidth): "
                + " / ".join(f"{us:.1f}" for us in facts.floor_us.values())
                + f" µs at contexts {' / '.join(facts.floor_us)}. Any other floor you read (in the task's text, "
                "the playbook) was worked out for another device: this one is the one to go by"
            )
        lines.append(f"A device copy measured {facts.bytes_per_s / 1e9:.0f} GB/s (bytes read + written){floor}.")
    if facts.ncu is None:
        lines.append("Nsight Compute (ncu) is not installed: no hardware counters (`profile` still times kernels).")
    elif facts.counters_admin_only and not facts.root:
        lines.append("ncu is installed, but the driver opens its counters to admins only: ncu cannot profile here.")
    else:
        lines.append("ncu is installed and may profile (`ncu_kernel`, `profile`).")
    return "\n".join(lines)


def machine_text(device: str, python: str, task_dir: Path) -> str:
    """The first message's paragraph on the machine. On a CPU it says so without a probe: the
    run is a smoke run there, and importing torch once more would cost every such run seconds."""
    if not device.startswith("cuda"):
        return (
            f"The machine: {device}, no GPU. Evaluations run at smoke scale; kernel launches are not counted "
            f"and no bytes floor is known here."
        )
    return describe_machine(machine_facts(device, python, task_dir), device)
