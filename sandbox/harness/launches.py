"""How many GPU launches one warmed step makes, from torch's profiler."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import torch

# Host-side runtime calls that replay a captured CUDA graph.
_GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
# Marks that torch.compile leaves in a profile (Inductor's kernels are named triton_*).
_COMPILED_MARKS = ("Torch-Compiled Region", "CompiledFunction", "torch._dynamo")


def classify(events: Iterable[tuple[str, bool]]) -> dict:
    """Summarize profiler events given as (name, runs_on_the_gpu) pairs.

    Every GPU-side event (kernel, memcpy, memset) is one launch: the megakernel rule asks for
    exactly one of them per step.
    """
    gpu: Counter[str] = Counter()
    graph_replay = False
    compiled = False
    for name, on_gpu in events:
        if on_gpu:
            gpu[name] += 1
            if name.startswith("triton_"):
                compiled = True
        else:
            if name.startswith(_GRAPH_LAUNCH_CALLS):
                graph_replay = True
            if any(mark in name for mark in _COMPILED_MARKS):
                compiled = True
    total = sum(gpu.values())
    return {
        "launches": total,
        "kernels": [{"name": name[:160], "count": count} for name, count in gpu.most_common(20)],
        "distinct_kernels": len(gpu),
        "single_launch": total == 1 and not graph_replay and not compiled,
        "cuda_graph_replay": graph_replay,
        "torch_compile": compiled,
    }


def profiled_events(device: torch.device, step: Callable[[], None]) -> list:
    """The profiler's events of one call of ``step``, the device's work (where it is not the
    CPU) among them. Through ``torch.autograd.profiler.profile``, the profiler that
    ``torch.profiler.profile`` wraps, with the same events: the wrapper's start asks
    ``hasattr(torch, "_inductor")``, which imports Inductor, and that import was the whole of
    an evaluation's launches phase (1.7-6.3 s on H200 machines; the lab notebook)."""
    use_device = None if device.type == "cpu" else device.type
    with torch.autograd.profiler.profile(use_device=use_device, use_kineto=True) as prof:
        step()
    return list(prof.function_events)


def count_launches(device: torch.device, step: Callable[[], None]) -> dict:
    """Profile one call of ``step`` (already warmed) and classify its GPU work."""
    if device.type != "cuda":
        return {"launches": None, "note": "kernel launches are counted on CUDA devices only"}

    def synchronized_step() -> None:
        step()
        torch.cuda.synchronize(device)

    torch.cuda.synchronize(device)
    events = profiled_events(device, synchronized_step)
    pairs = [(e.name, e.device_type == torch.autograd.DeviceType.CUDA) for e in events]
    device_us = sum(e.time_range.elapsed_us() for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    # The device's busy time in the step: its kernels', copies' and sets' durations summed
    # (overlapping streams count twice), beside the referee's steady time per step.
    return {**classify(pairs), "device_ms": device_us / 1e3}
