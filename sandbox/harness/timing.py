"""Timing: blocks of consecutive steps, baseline and candidate alternating block by block.

Why blocks: a fast kernel's steady time per step is what a user's decode loop sees, and
only a run of consecutive steps shows it: a single step after an idle device pays its full
host launch cost and may run at clocks that dropped meanwhile. Why alternate: a host-bound
baseline (hundreds of launches a step) leaves the device idle between launches, so clocks
wander and its latency swings by 2x from one series to the next; timing the two contestants
block by block, in alternating order (ABBA), exposes both to the same drift, so the ratio
stays true even when the absolute numbers move. An A/A run (the baseline against itself)
shows it.

Every block is timed by the referee's own clock, from before its inputs are copied to after
the device is idle again: for the candidate, whose steps run in a process of its own, that is
the only measurement that counts (see remote.py); the baseline's blocks are timed the same
way in the referee.
"""
from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Optional, Protocol

import numpy as np
import torch

# Bound at import (the referee runs no solution code, but a later edit must not make a
# timer depend on a name someone can rebind).
_perf_counter_ns = time.perf_counter_ns
_synchronize = torch.cuda.synchronize


class Contestant(Protocol):
    """One side of a timed run: a chain of consecutive steps, run block by block."""

    name: str
    # Steps per block of this contestant's own, or None for the run's. A fast candidate runs
    # longer blocks, up to a whole chain per request: each request to the solution's process
    # costs a fixed overhead (pipes, waking the process, the device's switch between two
    # contexts) that is taken off only on average (see candidate_blocks).
    block_steps: Optional[int]

    def begin_chain(self, round_index: int) -> None:
        """Prepare a new chain from fresh copies of its inputs; not timed."""

    def block(self, first_step: int, steps: int) -> float:
        """Run ``steps`` consecutive steps of the chain, starting at ``first_step``; return
        the block's milliseconds as the referee's clock saw them, up to an idle device."""

    def end_chain(self, round_index: int) -> None:
        """Called after the chain's last block; not timed (validation goes here)."""


def freeze_heap() -> None:
    """Collect, then exempt every object alive now from later garbage collections.

    A host-bound step allocates many small objects, which trigger Python's collections; a
    full one walks every object alive, and the referee holds far more of them (the
    reference, the expected cases) than a process with only a model does. Frozen, those
    objects cost no collection a walk, so the same step takes the same time in either
    process. The solution's process does the same after it loads the solution."""
    gc.collect()
    gc.freeze()


@contextmanager
def one_cpu_for_both(solution_pid: int) -> Iterator[None]:
    """While timing, this process's thread and the solution process's main thread on one and
    the same CPU (the last this process may use: the first ones take most of the system's
    interrupts). They never run at once: the solution's process is stopped while the
    baseline runs, and this one sleeps in a read while the solution runs. A host-bound
    step's time depends on the core it runs on, its clock and how warm its caches are: on
    one core both contestants see the same. (Each on a core of its own, an H200 machine's
    A/A read one process 10-40% slower than the other for seconds at a time, 2026-12-01.)
    Where the CPUs cannot be set, nothing changes."""
    allowed = sorted(os.sched_getaffinity(0))
    own_before, theirs_before = set(allowed), os.sched_getaffinity(solution_pid)
    os.sched_setaffinity(0, {allowed[-1]})
    os.sched_setaffinity(solution_pid, {allowed[-1]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, own_before)
        try:
            os.sched_setaffinity(solution_pid, theirs_before)
        except ProcessLookupError:  # it died; its death is reported where it was noticed
            pass


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        _synchronize(device)


def wall_ms(device: torch.device, work: Callable[[], None]) -> float:
    """Milliseconds of ``work`` from the host's clock, with the device synchronized at the end."""
    start = _perf_counter_ns()
    work()
    synchronize(device)
    return (_perf_counter_ns() - start) / 1e6


def block_starts(steps: int, block_steps: int) -> list[tuple[int, int]]:
    """(first step, steps) of each block of a chain of ``steps``."""
    return [(first, min(block_steps, steps - first)) for first in range(0, steps, block_steps)]


def run_blocks(device: torch.device, contestants: Sequence[Contestant], rounds: int, steps: int,
               block_steps: int) -> dict[str, list[float]]:
    """``rounds`` chains of ``steps`` per contestant, timed block by block, the contestants
    taking turns block for block in ABBA order (each contestant's blocks of
    ``contestant.block_steps`` steps, or ``block_steps``).

    Returns each contestant's milliseconds per step, paired: the k-th values of two
    contestants ran in the same round, beside each other. Where one contestant ran fewer
    blocks in a round (a whole chain against blocks of 8), its values are repeated to stand
    beside each of the other's.
    """
    samples: dict[str, list[float]] = {c.name: [] for c in contestants}
    for r in range(rounds):
        for c in contestants:
            c.begin_chain(r)
        synchronize(device)
        plans = {c.name: block_starts(steps, c.block_steps or block_steps) for c in contestants}
        times: dict[str, list[float]] = {c.name: [] for c in contestants}
        for position in range(max(len(plan) for plan in plans.values())):
            order = contestants if (r + position) % 2 == 0 else list(reversed(contestants))
            for c in order:
                if position < len(plans[c.name]):
                    first, count = plans[c.name][position]
                    times[c.name].append(c.block(first, count) / count)
        for c in contestants:
            c.end_chain(r)
        width = max(len(values) for values in times.values())
        for name, values in times.items():
            samples[name] += [values[i * len(values) // width] for i in range(width)]
    return samples


# Steps per timed block unless the job says otherwise. On the H200, blocks of single steps
# read the host-bound baseline against itself (A/A) at 0.84-0.92 in two runs of three: the
# step after a switch from the other process pays for it. Blocks of 8 read 0.88-1.10 per
# context, 0.98-1.00 overall (MEASUREMENTS.md, 2026-12-01).
DEFAULT_BLOCK_STEPS = 8


def isolated_step_ms(contestant: Contestant, steps: int, interlude: Callable[[], None]) -> float:
    """The latency of one step on its own: a chain of ``steps`` run one step per block, each
    timed alone (synchronized around, as a caller that waits for every token sees it) and
    each after ``interlude``, the referee's own work that the solution's empty requests were
    calibrated after (remote.py): back to back, a request costs less than that calibration
    assumes. The median over the chain's steps. Its difference from the steady time per
    step is what the host adds to a step that no neighbour hides. The chain ends as a timed
    chain does (the candidate's is validated)."""
    contestant.begin_chain(0)
    samples = []
    for first in range(steps):
        interlude()
        samples.append(contestant.block(first, 1))
    contestant.end_chain(0)
    return float(np.median(samples))


# A request to the solution's process lasts at least this long where the candidate allows:
# each request costs a fixed overhead (pipes, waking the process, the device's switch between
# two contexts, the first step's launch that no earlier step hides) that calibration takes
# off only on average, and its rest, about 0.2 ms either way on an H200, must stay small
# beside the request. A fast candidate runs whole chains per request, several of them; a
# host-bound one of several milliseconds a step keeps the run's blocks, as the baseline
# does, so that an A/A run pairs blocks alike.
MIN_REQUEST_MS = 20.0
MAX_CHAINS_PER_REQUEST = 16


def candidate_blocks(step_ms: float, steps: int, block_steps: int,
                     min_request_ms: float = MIN_REQUEST_MS) -> tuple[int, int]:
    """(steps per block, chains per request) for a candidate that took ``step_ms`` a step
    when warming up: the run's blocks where one lasts ``min_request_ms``; else a whole chain
    per block, run as many times in one request as it takes to last that long."""
    run_block = min(block_steps, steps)
    if step_ms <= 0 or run_block * step_ms >= min_request_ms:
        return run_block, 1
    return steps, min(MAX_CHAINS_PER_REQUEST, math.ceil(min_request_ms / (steps * step_ms)))


def run_untimed(contestant: Contestant, steps: int, block_steps: int) -> float:
    """A warm-up: one chain of ``steps`` of ``contestant``, neither timed nor validated;
    returns its milliseconds per step as the blocks reported them (a rough figure)."""
    contestant.begin_chain(0)
    total_ms = 0.0
    for first, count in block_starts(steps, contestant.block_steps or block_steps):
        total_ms += contestant.block(first, count)
    return total_ms / max(steps, 1)


# Physics: no step can beat the bytes floor; 10% slack covers bandwidth measurement noise.
PHYSICS_SLACK = 1.1


def physics_violation(median_ms: float, bytes_per_step: int, bytes_per_s: float) -> str | None:
    """Why ``median_ms`` per step is impossible for ``bytes_per_step`` at the measured copy
    bandwidth, or None when it is within reach."""
    if median_ms <= 0:
        return f"a median of {median_ms:.6f} ms per step is not a time"
    implied = bytes_per_step / (median_ms / 1e3)
    if implied <= bytes_per_s * PHYSICS_SLACK:
        return None
    return (f"{median_ms:.3g} ms per step moves {_si(bytes_per_step, 'B')} at {_si(implied, 'B/s')}, "
            f"{implied / bytes_per_s:.1f}x the device's measured {_si(bytes_per_s, 'B/s')}: rejected")


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def summarize(samples_ms: Sequence[float]) -> dict:
    a = np.asarray(samples_ms, dtype=np.float64)
    p10, p25, p50, p75, p90 = np.percentile(a, [10, 25, 50, 75, 90])
    return {
        "n": int(a.size), "median_ms": float(p50), "mean_ms": float(a.mean()),
        "p10_ms": float(p10), "p90_ms": float(p90), "iqr_ms": float(p75 - p25),
        "min_ms": float(a.min()), "max_ms": float(a.max()),
    }


def speedup_with_noise(baseline_ms: Sequence[float], candidate_ms: Sequence[float],
                       resamples: int = 2000, seed: int = 0) -> dict:
    """The speedup and its 95% bootstrap interval, from paired samples.

    ``baseline_ms[k]`` and ``candidate_ms[k]`` ran back to back (adjacent blocks of a run),
    so their ratio sees the same clocks and the same neighbours on the machine; the median
    of those ratios estimates baseline time / candidate time and shrugs off a burst of noise
    that hits a few blocks. The ratio of the two medians is
    reported beside it. The difference is "within noise" when the interval contains 1.0.
    """
    b = np.asarray(baseline_ms, dtype=np.float64)
    c = np.asarray(candidate_ms, dtype=np.float64)
    if b.shape != c.shape:
        raise ValueError("paired samples need equal counts")
    ratios = b / c
    rng = np.random.default_rng(seed)
    medians = np.median(ratios[rng.integers(0, ratios.size, size=(resamples, ratios.size))], axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return {"speedup": float(np.median(ratios)), "ci_low": float(low), "ci_high": float(high),
            "within_noise": bool(low <= 1.0 <= high), "ratio_of_medians": float(np.median(b) / np.median(c))}


def geomean(values: Sequence[float]) -> float:
    a = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.log(a).mean()))
