"""How busy each GPU was over a sweep: from its lease's records and, where it ran, nvidia-smi.

The lease records (kagent.sandbox.lease) say when each evaluation held the device, shared
(loading, checking) or exclusive (timing, profiling). Over the sweep's running time a GPU's
*busy* fraction is the union of all its holds, its *timed* fraction that of the exclusive
ones; an exclusive hold that overlaps any other is counted, and should never be there. On
the driver's host a sampler also reads nvidia-smi's utilization (the share of time a kernel
ran) once a second: that counts the GPU work no lease sees, and the idle gaps inside a hold.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from kagent.sandbox.lease import LeaseRecord, lease_name, read_records

SAMPLES_NAME = "gpu_samples.jsonl"
QUERY = "timestamp,index,uuid,utilization.gpu,memory.used"


class GpuUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: str = Field(description="The device: host-gpuN (host-cpu on a CPU-only sweep)")
    window_s: float = Field(description="The sweep's running time the fractions are of")
    busy_s: float = Field(description="Time some evaluation held the device (the union of all holds)")
    busy_fraction: float
    timed_s: float = Field(description="Time it was held alone, for timing or profiling")
    timed_fraction: float
    holds: int
    timed_holds: int
    waited_s: float = Field(description="Time evaluations waited for the lease, in all")
    holders: list[str] = Field(description="The members that held it")
    overlaps: int = Field(description="Exclusive holds that overlapped another hold: 0 unless the lease failed")
    sampled_utilization: Optional[float] = Field(
        None, description="nvidia-smi's utilization.gpu over the sweep, as a fraction (the driver's host only)"
    )
    samples: int = 0


def _clip(start: float, end: float, windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(max(start, a), min(end, b)) for a, b in windows if min(end, b) > max(start, a)]


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def overlapping_exclusive(records: list[LeaseRecord]) -> list[tuple[LeaseRecord, LeaseRecord]]:
    """Pairs of holds of which one is exclusive and that overlap in time."""
    ordered = sorted(records, key=lambda r: r.acquired_at)
    pairs = []
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.acquired_at >= first.released_at:
                break
            if "exclusive" in (first.kind, second.kind):
                pairs.append((first, second))
    return pairs


def gpu_usage(sweep_dir: Path, windows: list[tuple[float, float]]) -> list[GpuUsage]:
    """Each lease's usage over ``windows`` (the sweep's running segments, unix times)."""
    window_s = sum(b - a for a, b in windows) or 1e-9
    samples = read_samples(Path(sweep_dir) / SAMPLES_NAME, windows)
    usages = []
    for path in sorted((Path(sweep_dir) / "leases").glob("*.jsonl")):
        records = read_records(path)
        held = [piece for r in records for piece in _clip(r.acquired_at, r.released_at, windows)]
        timed = [
            piece for r in records if r.kind == "exclusive" for piece in _clip(r.acquired_at, r.released_at, windows)
        ]
        busy_s, timed_s = _union_s(held), _union_s(timed)
        utilization = samples.get(path.stem, [])
        usages.append(
            GpuUsage(
                lease=path.stem,
                window_s=round(window_s, 3),
                busy_s=round(busy_s, 3),
                busy_fraction=round(busy_s / window_s, 4),
                timed_s=round(timed_s, 3),
                timed_fraction=round(timed_s / window_s, 4),
                holds=len(records),
                timed_holds=sum(r.kind == "exclusive" for r in records),
                waited_s=round(sum(r.waited_s for r in records), 3),
                holders=sorted({r.holder for r in records}),
                overlaps=len(overlapping_exclusive(records)),
                sampled_utilization=round(sum(utilization) / len(utilization), 4) if utilization else None,
                samples=len(utilization),
            )
        )
    # GPUs that were sampled but never leased (nothing evaluated on them) are idle, and said so.
    for name in sorted(set(samples) - {u.lease for u in usages}):
        utilization = samples[name]
        usages.append(
            GpuUsage(
                lease=name,
                window_s=round(window_s, 3),
                busy_s=0.0,
                busy_fraction=0.0,
                timed_s=0.0,
                timed_fraction=0.0,
                holds=0,
                timed_holds=0,
                waited_s=0.0,
                holders=[],
                overlaps=0,
                sampled_utilization=round(sum(utilization) / len(utilization), 4),
                samples=len(utilization),
            )
        )
    return usages


def read_samples(path: Path, windows: list[tuple[float, float]]) -> dict[str, list[float]]:
    """Utilization fractions per lease name, of the samples inside ``windows``."""
    found: dict[str, list[float]] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            sample = json.loads(line)
        except ValueError:
            continue  # cut short by a kill
        if any(a <= sample["at"] <= b for a, b in windows):
            found.setdefault(sample["lease"], []).append(sample["utilization"])
    return found


class GpuSampler:
    """nvidia-smi's utilization of every GPU of this host, once a second, into a JSONL file,
    from a thread of its own while the sweep runs (nothing where there is no nvidia-smi)."""

    def __init__(self, path: Path, command: Optional[list[str]] = None, period_ms: int = 1000):
        binary = shutil.which("nvidia-smi")
        self.path = Path(path)
        self.command = command or (
            [binary, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={period_ms}"] if binary else None
        )
        self.proc: Optional[subprocess.Popen] = None
        self.thread: Optional[threading.Thread] = None

    def start(self) -> GpuSampler:
        if self.command is None:
            return self
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, name="gpu-sampler", daemon=True)
        self.thread.start()
        return self

    def _read(self) -> None:
        host = socket.gethostname()
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.path, "a") as out:
            for line in self.proc.stdout:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) != 5 or not parts[3].isdigit():
                    continue  # a GPU that reports no utilization ("[N/A]")
                sample = {
                    "at": time.time(),
                    "lease": lease_name(f"cuda:{parts[1]}", host, visible=""),
                    "uuid": parts[2],
                    "utilization": int(parts[3]) / 100,
                    "memory_mib": int(parts[4]) if parts[4].isdigit() else None,
                }
                out.write(json.dumps(sample) + "\n")
                out.flush()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
        if self.thread is not None:
            self.thread.join(timeout=5)
