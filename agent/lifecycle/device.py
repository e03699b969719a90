"""The torch device a run or an evaluation uses, resolved and checked before anything starts.

torch is imported only here and only when needed: a mistake in other options is reported
before the seconds its import takes.
"""
from __future__ import annotations

import re

from kagent.core.errors import KagentError

DEVICE_FORM = re.compile(r"cpu|cuda(:\d+)?")


def check_device_name(device: str) -> None:
    """A device name kagent knows (auto, cpu, cuda, cuda:N), without importing torch."""
    if device != "auto" and not DEVICE_FORM.fullmatch(device):
        raise KagentError(f"unknown device {device!r}", hint="use auto, cpu, cuda or cuda:N")


def resolve_device(device: str) -> str:
    """``auto`` made concrete (cuda where torch sees a GPU, else cpu), and a CUDA device
    checked to exist here: on a machine without one every evaluation would fail the same way."""
    check_device_name(device)
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise KagentError(f"device {device} asked for, but torch {torch.__version__} sees no CUDA device",
                              hint="use --device cpu, or install the torch build for your CUDA driver")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise KagentError(f"device {device} asked for, but torch sees {torch.cuda.device_count()} CUDA "
                              f"device(s)", hint="cuda:0 is the first")
    return device
