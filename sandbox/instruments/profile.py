"""The profile tool's child (kagent.tools.evaluation): build the solution as an evaluation
does, warm it up, and profile a few steps, by torch.profiler or for Nsight Compute."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from kagent.sandbox.instruments.job import ChildJob


def profile_child(job_file: str) -> None:
    """Build the solution as the harness does (building.build), warm it up, then profile the job's
    steps with torch.profiler, or inside cudaProfilerStart/Stop for ncu (``profiler``)."""
    job = ChildJob.read(job_file)
    device = torch.device(job.device)
    with torch.no_grad():
        _, step, context_len = job.kind.instrument_steps().solution_step(job, device)
        step()  # warm-up: first-call allocations, JIT builds and autotuning stay out of the table
        _sync(device)
        if job.profiler == "ncu":
            torch.cuda.profiler.start()
            for _ in range(job.steps):
                step()
            _sync(device)
            torch.cuda.profiler.stop()
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(job.steps):
                step()
            _sync(device)
    ops = [
        {
            "name": e.key,
            "calls": e.count,
            "self_cpu_us": float(e.self_cpu_time_total),
            # Renamed from self_cuda_time_total in newer torch.
            "self_device_us": float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))),
        }
        for e in prof.key_averages()
    ]
    Path(job.result).write_text(
        json.dumps(
            {
                "ops": ops,
                "steps": job.steps,
                "device": str(device),
                "scale": job.scale,
                "context_len": context_len,
            }
        )
    )


def _sync(device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
