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
