"""Timing: device events around each step, two contestants interleaved step by step.

Why interleave: a host-bound baseline (hundreds of launches a step) leaves the GPU idle
between launches, so its clocks wander and its latency swings by 2x from one series to the
next. Timing the baseline and the candidate alternately, step by step and in alternating
order, exposes both to the same clocks and the same warm-up, so the ratio stays true even
when the absolute numbers move. An A/A run (the baseline against itself) shows it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

# Bound at import, before candidate code runs (see compare.py for why).
_perf_counter_ns = time.perf_counter_ns
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed_time = torch.cuda.Event.elapsed_time


class Player(Protocol):
    """One contestant of an interleaved timing run."""

    name: str

    def begin_round(self, round_index: int) -> None:
        """Prepare fresh inputs and state for a round; not timed."""

    def step(self, step_index: int) -> None:
        """The timed work: exactly one step."""

    def after_step(self, step_index: int) -> None:
        """Bookkeeping after the step's end mark (e.g. keep a copy of the output); not timed."""

    def end_round(self, round_index: int) -> None:
        """Called after the device is idle again; not timed."""


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        _synchronize(device)


class _Interval:
    """One timed interval: CUDA events on the current stream, or host nanoseconds on the CPU."""

    __slots__ = ("cuda", "begin", "end")

    def __init__(self, cuda: bool):
        self.cuda = cuda
        if cuda:
            self.begin, self.end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(self.begin)
        else:
            self.begin = _perf_counter_ns()

    def close(self) -> None:
        if self.cuda:
            _record(self.end)
        else:
            self.end = _perf_counter_ns()

    def milliseconds(self) -> float:
        if self.cuda:
            return float(_elapsed_time(self.begin, self.end))
        return (self.end - self.begin) / 1e6


@dataclass(frozen=True)
class RoundWall:
    """One round seen from the host: its synchronized wall time (less the harness's own host
    bookkeeping between steps) beside the sum of every player's per-step intervals."""

    wall_ms: float
    timed_ms: float


def run_interleaved(device: torch.device, players: Sequence[Player], rounds: int,
                    steps: int, walls: list[RoundWall] | None = None) -> dict[str, list[float]]:
    """Time ``steps`` steps of every player per round, alternating the order step by step.

    Returns the per-step times in milliseconds for each player, rounds concatenated. With
    ``walls``, one RoundWall per round is appended to it: device work a step leaves running
    past its end mark (a side stream, deferred launches) is outside every interval but not
    outside the round, which is synchronized at both ends.
    """
    cuda = device.type == "cuda"
    samples: dict[str, list[float]] = {p.name: [] for p in players}
    for r in range(rounds):
        for p in players:
            p.begin_round(r)
        synchronize(device)
        intervals: dict[str, list[_Interval]] = {p.name: [] for p in players}
        bookkeeping_ns = 0
        round_start = _perf_counter_ns()
        for i in range(steps):
            order = players if (i + r) % 2 == 0 else list(reversed(players))
            for p in order:
                interval = _Interval(cuda)
                p.step(i)
                interval.close()
                intervals[p.name].append(interval)
                before = _perf_counter_ns()
                p.after_step(i)
                bookkeeping_ns += _perf_counter_ns() - before
        synchronize(device)
        wall_ns = _perf_counter_ns() - round_start - bookkeeping_ns
        timed_ms = 0.0
        for p in players:
            times = [iv.milliseconds() for iv in intervals[p.name]]
            timed_ms += sum(times)
            samples[p.name].extend(times)
            p.end_round(r)
        if walls is not None:
            walls.append(RoundWall(wall_ns / 1e6, timed_ms))
    return samples


# Hidden work: the round's wall time may exceed its timed intervals by launch gaps and noise,
# not by a multiple. 1.5x plus 5 ms leaves a host-bound baseline's gaps room on any device.
HIDDEN_WORK_FACTOR = 1.5
HIDDEN_WORK_SLACK_MS = 5.0


def hidden_work(wall: RoundWall) -> str | None:
    """Why this round hides work from the timer, or None when it does not."""
    allowed = wall.timed_ms * HIDDEN_WORK_FACTOR + HIDDEN_WORK_SLACK_MS
    if wall.wall_ms <= allowed:
        return None
    return (f"a timed round took {wall.wall_ms:.3f} ms of synchronized wall time but its steps' intervals add up "
            f"to {wall.timed_ms:.3f} ms (allowed: {allowed:.3f} ms): work ran outside the timed intervals")


# Untimed work: a step's events may fall short of its synchronized wall time by the host's
# wait for the device to go idle, some microseconds, never by a quarter of the step.
UNTIMED_WORK_FACTOR = 1.25
UNTIMED_WORK_SLACK_MS = 0.05
# Steps timed one by one, the device synchronized around each: enough for a stable median.
SYNCED_STEPS = 16


@dataclass(frozen=True)
class SyncedStep:
    """One step seen twice at once: by the timer's events, and by the host's clock with the
    whole device synchronized before and after it."""

    event_ms: float
    wall_ms: float


def synced_steps(device: torch.device, player: Player, steps: int) -> list[SyncedStep]:
    """``steps`` steps of one player, each timed both ways. Both readings come from the same
    step, so a host-bound step whose latency drifts from one minute to the next drifts in
    both. (A chain this short is not validated; the timed chains were.)"""
    cuda = device.type == "cuda"
    player.begin_round(0)
    seen = []
    for i in range(steps):
        synchronize(device)
        start = _perf_counter_ns()
        interval = _Interval(cuda)
        player.step(i)
        interval.close()
        synchronize(device)
        wall_ms = (_perf_counter_ns() - start) / 1e6
        seen.append(SyncedStep(interval.milliseconds(), wall_ms))
        player.after_step(i)
    player.end_round(0)
    return seen


def untimed_work(steps: Sequence[SyncedStep]) -> str | None:
    """Why a player's steps hide work from the timer, or None when they do not.

    Events on the timer's stream see only what that stream waits for: work a step leaves on
    a stream of its own, never joined, runs outside every interval. The host's clock around
    the synchronized step cannot leave anything out. Judged per player, this catches hidden
    work that the round's wall time cannot, where the baseline's long steps dwarf the
    candidate's.
    """
    events = float(np.median([s.event_ms for s in steps]))
    synced = float(np.median([s.wall_ms for s in steps]))
    allowed = events * UNTIMED_WORK_FACTOR + UNTIMED_WORK_SLACK_MS
    if synced <= allowed:
        return None
    return (f"a step takes {synced:.3f} ms with the device synchronized around it, but its timed intervals "
            f"show {events:.3f} ms (allowed: {allowed:.3f} ms): work ran outside the timer's stream")


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

    ``baseline_ms[k]`` and ``candidate_ms[k]`` ran back to back (the same round and step of
    an interleaved run), so their ratio sees the same clocks and the same neighbours on the
    machine; the median of those ratios estimates baseline latency / candidate latency and
    shrugs off a burst of noise that hits a few steps. The ratio of the two medians is
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


def run_untimed(device: torch.device, player: Player, steps: int) -> None:
    """One chain of ``player`` with the same bookkeeping as a timed one, without the clock."""
    player.begin_round(0)
    for i in range(steps):
        player.step(i)
        player.after_step(i)
    synchronize(device)
    player.end_round(0)
