"""The stages tool's child (kagent.tools.stages): build the solution as an evaluation does,
then time it stage by stage through the convention the tool's docstring describes
(``kagent_stages``, ``kagent_stop_after``, ``kagent_stamps``).

Per sweep point it times many steps by device events behind a spin kernel that keeps the
device busy while the host queues them, so a step's time is the device's and not the host's.
"""

from __future__ import annotations

import fnmatch
import json
import statistics
import time
from pathlib import Path
from typing import Any, Optional

import torch

from kagent.sandbox.harness import environment
from kagent.sandbox.harness.bandwidth import copy_bandwidth
from kagent.sandbox.instruments.job import ChildJob

# Spin cycles per second of host time to cover (about an H200's clock, with room to spare).
SPIN_CYCLES_PER_S = 2.5e9


# -- the solution's side of the convention ------------------------------------------------------
def declared_stages(model: Any, context_len: Optional[int]) -> list[dict]:
    """The solution's stages as dicts with a name and, where declared, bytes or parts; a
    ToolError-worthy message (ValueError) when they are malformed."""
    declared = getattr(model, "kagent_stages", None)
    if callable(declared):
        declared = declared(context_len)
    if declared is None:
        raise ValueError(
            "the solution declares no stages: give its model a kagent_stages list (see the playbook's "
            "stage instruments)"
        )
    stages = []
    for i, entry in enumerate(declared):
        stage = {"name": entry} if isinstance(entry, str) else dict(entry) if isinstance(entry, dict) else None
        if stage is None or not isinstance(stage.get("name"), str) or set(stage) - {"name", "bytes", "parts"}:
            raise ValueError(f"kagent_stages[{i}] must be a name or a dict with name and bytes or parts, not {entry!r}")
        stages.append(stage)
    if not stages:
        raise ValueError("kagent_stages is empty")
    return stages


def resolve_bytes(stages: list[dict], parts: dict[str, int]) -> list[Optional[int]]:
    """Each stage's bytes: as declared, or the sum of the task's parts it names (patterns
    allowed); None where it says neither. A pattern matching no part is an error."""
    resolved: list[Optional[int]] = []
    for stage in stages:
        if "bytes" in stage:
            resolved.append(int(stage["bytes"]))
            continue
        if "parts" not in stage:
            resolved.append(None)
            continue
        chosen: set[str] = set()
        for pattern in stage["parts"]:
            matched = fnmatch.filter(parts, pattern)
            if not matched:
                known = ", ".join(list(parts)[:12]) + (" ..." if len(parts) > 12 else "")
                raise ValueError(
                    f"stage {stage['name']!r}: part {pattern!r} matches none of the task's parts "
                    f"({known or 'the task describes no parts'})"
                )
            chosen.update(matched)
        resolved.append(sum(parts[name] for name in chosen))
    return resolved


def sweep_points(n_stages: int) -> list[int]:
    """The knob's values: -1 (the launch and the barriers alone), then after each stage."""
    return list(range(-1, n_stages))


def stamp_times(stamps: list[list[int]]) -> list[dict[str, float]]:
    """Per stage, from one step's stamps ((stages + 1) rows of per-CTA ns): its time from the
    last arrival at the barrier before (for stage 0, the first CTA's start) to the last arrival
    at its own, and the spread of the arrivals at its own barrier, in µs."""
    rows = [[int(v) for v in row] for row in stamps]
    times = []
    for s in range(1, len(rows)):
        start = min(rows[0]) if s == 1 else max(rows[s - 1])
        times.append({"us": (max(rows[s]) - start) / 1e3, "spread_us": (max(rows[s]) - min(rows[s])) / 1e3})
    return times


class _Clock:
    """Per-step times of a step function: device time by CUDA events (behind a spin kernel,
    so the host's queueing does not count), or host time on the CPU."""

    def __init__(self, device: Any):
        self.torch, self.device, self.cuda = torch, device, device.type == "cuda"
        self.host_s_per_step = 1e-3

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def per_step_us(self, step: Any, steps: int) -> list[float]:
        if not self.cuda:
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                step()
                times.append((time.perf_counter() - started) * 1e6)
            return times
        torch = self.torch
        events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        self.sync()
        torch.cuda._sleep(int(SPIN_CYCLES_PER_S * self.host_s_per_step * steps * 2) + 100_000)
        queued = time.perf_counter()
        for i in range(steps):
            events[i].record()
            step()
        events[steps].record()
        self.host_s_per_step = max(self.host_s_per_step, (time.perf_counter() - queued) / steps)
        self.sync()
        return [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(steps)]

    def back_to_back_us(self, step: Any, steps: int) -> float:
        """Wall time per step over ``steps`` consecutive steps, as a decode loop runs them."""
        self.sync()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        self.sync()
        return (time.perf_counter() - started) / steps * 1e6


def stages_child(job_file: str) -> None:
    """Build the solution, sweep its stages, read its stamps; the figures to the job's result."""
    job = ChildJob.read(job_file)
    device = torch.device(job.device)
    kind = job.kind.instrument_steps()

    def fail(message: str) -> None:
        Path(job.result).write_text(json.dumps({"error": message}))

    cache = job.cache()
    with torch.no_grad():
        model, step, context_len = kind.solution_step(job, device)
        clock = _Clock(device)
        step()  # the first step builds and compiles; the stages are read after it (they may be sized by it)
        clock.sync()
        try:
            stages = declared_stages(model, context_len)
            parts, floor_bytes, floor_from = kind.bytes_floor(job, model, context_len)
            stage_bytes = resolve_bytes(stages, parts)
        except ValueError as err:
            return fail(str(err))
        points = sweep_points(len(stages))
        samples: dict[int, list[float]] = {p: [] for p in points}
        try:
            for _ in range(job.rounds):
                for point in points:
                    model.kagent_stop_after = point
                    step()  # a warm-up at this point (a kernel compiled per value, a first call)
                    samples[point] += clock.per_step_us(step, job.steps)
        finally:
            model.kagent_stop_after = None
        full = clock.per_step_us(step, job.steps)
        steady = clock.back_to_back_us(step, max(job.steps, 10))
        stamps, stamps_note = _stamps(model, step, clock, len(stages), job.steps)
    result = {
        "device": str(device),
        "context_len": context_len,
        "steps": job.steps,
        "rounds": job.rounds,
        "stages": stages,
        "stage_bytes": stage_bytes,
        "floor_bytes": floor_bytes,
        "floor_from": floor_from,
        # The copy bandwidth the evaluations cached for this device (measured here when none did).
        "bandwidth_bytes_per_s": copy_bandwidth(device, environment.describe(device), cache)["bytes_per_s"],
        "sweep_us": {str(p): statistics.median(v) for p, v in samples.items()},
        "full_us": statistics.median(full),
        "steady_us": steady,
        "stamps": stamps,
        "stamps_note": stamps_note,
    }
    Path(job.result).write_text(json.dumps(result))


def _stamps(model: Any, step: Any, clock: _Clock, n_stages: int, steps: int) -> tuple[list[dict], str]:
    """Per stage, the median over ``steps`` steps of stamp_times, or why there are none."""
    buffer = getattr(model, "kagent_stamps", None)
    if buffer is None:
        return [], "the solution keeps no kagent_stamps buffer"
    if buffer.dim() != 2 or buffer.shape[0] != n_stages + 1:
        return [], (
            f"kagent_stamps has shape {tuple(buffer.shape)}; ({n_stages + 1}, CTAs) expected: a row for "
            "the start, then one per stage"
        )
    per_step = []
    for _ in range(steps):
        buffer.zero_()
        step()
        clock.sync()
        values = buffer.cpu().tolist()
        if any(v == 0 for row in values for v in row):
            return [], "some CTAs left stamps unwritten (zeros): every CTA must stamp its start and every barrier"
        per_step.append(stamp_times(values))
    return [
        {key: statistics.median(s[i][key] for s in per_step) for key in ("us", "spread_us")} for i in range(n_stages)
    ], ""
