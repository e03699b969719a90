"""What machine and software a measurement was made on."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from typing import Any

import torch


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def gpu_clocks(index: int) -> dict:
    """Clocks, temperature and power right now, from nvidia-smi (empty if it is missing)."""
    fields = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.split(",")]
    if len(values) != 6:
        return {}
    keys = ["driver", "sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "temperature_c", "power_w"]
    return dict(zip(keys, values, strict=True))


def gpu_uuid(device: torch.device) -> str | None:
    """The CUDA device's UUID as torch reports it (without nvidia-smi's "GPU-"), or None."""
    return str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) or None


def describe(device: torch.device) -> dict:
    """A plain-JSON record of the device and the software stack."""
    record: dict[str, Any] = {
        "device": str(device),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _package_version("triton"),
        "numpy": _package_version("numpy"),
        "cuda": torch.version.cuda,
    }
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        clocks = gpu_clocks(index)
        record.update(
            gpu_name=props.name,
            gpu_uuid=gpu_uuid(torch.device("cuda", index)),
            gpu_memory_bytes=props.total_memory,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            driver=clocks.pop("driver", None),
            clocks=clocks,
        )
    else:
        record.update(
            gpu_name=None,
            gpu_uuid=None,
            cpu=platform.processor() or platform.machine(),
            cpu_threads=torch.get_num_threads(),
        )
    return record
