"""Timing: the one place that times contestants, block by block, in alternating order.

Why blocks: a fast kernel's steady time per step is what a user's decode loop sees, and
only a run of consecutive steps shows it: a single step after an idle device pays its full
host launch cost and may run at clocks that dropped meanwhile. Why alternate: a host-bound
baseline (hundreds of launches a step) leaves the device idle between launches, so clocks
wander and its latency swings by 2x from one series to the next; timing the two contestants
block by block, in alternating order (ABBA), exposes both to the same drift, so the ratio
stays true even when the absolute numbers move. An A/A run (the baseline against itself)
shows it.

Why both in processes of their own: every block is a request to a contestant's process,
timed by the referee's clock from the request to the answer, less what an empty request
costs, plus whatever the device probe after it took beyond its idle time (remote.py). The
baseline's process and the solution's run the same server code, so both pay the same for a
request (pipes, waking a stopped process, the device's switch into its context, caches cold
after the other ran): an A/A run is exact by symmetry whatever that cost is, and the blocks
can be short (many pairs, each pair close in time) without biasing it. Nothing measured in
a contestant's process counts.

The sequence for each timed shape (``time_shape``): a warm-up chain per contestant, untimed,
whose pace sizes that contestant's blocks (``block_plan``, the same rule for both); then
pairs of blocks in ABBA order, each block after an untimed request that stages its fresh
inputs; then the candidate's isolated latency; then a summary, the speedup with its
interval, and the roofline. Work left running and stray processes are checked after every
answer (remote.Watch), and the contestants' own checks (a timed chain must repeat the
validated one) after every chain. ``time_contestants`` runs it for every shape of an
evaluation and counts launches afterwards.
"""
# Longer than 600 lines: the one module that times contestants, kept whole: the sizing, the
# order, the pairs and the statistics are one protocol, reviewed together, and the red team
# (tests/redteam/pickle_exec_inflates_speedups.py) attacks its names where they are.

from __future__ import annotations

import dataclasses
import gc
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np
import torch

from . import process_table
from .loading import CandidateError
from .remote import LeftRunning, TrustedFailed

# Bound at import (the referee runs no solution code, but a later edit must not make a
# timer depend on a name someone can rebind).
_synchronize = torch.cuda.synchronize
_perf_counter_ns = time.perf_counter_ns


def freeze_heap() -> None:
    """Collect, then exempt every object alive now from later garbage collections.

    A host-bound step allocates many small objects, which trigger Python's collections; a
    full one walks every object alive. Frozen, the objects of the process as it stands cost
    no collection a walk, so a step takes the same time whatever the process holds. Each
    contestant's process does this after it loads its contestant, the referee before it
    times anything."""
    gc.collect()
    gc.freeze()


@contextmanager
def one_cpu_for_all(pids: Iterable[int]) -> Iterator[None]:
    """While timing, this process's thread and each contestant process's main thread on one
    and the same CPU (the last this process may use: the first ones take most of the
    system's interrupts). They never run at once: each contestant's process is stopped while
    the other runs, and this one sleeps in a read while either runs. A host-bound step's
    time depends on the core it runs on, its clock and how warm its caches are: on one core
    every contestant sees the same. (Each on a core of its own, an H200 machine's A/A read
    one process 10-40% slower than the other for seconds at a time.) Where the
    CPUs cannot be set, nothing changes."""
    allowed = sorted(os.sched_getaffinity(0))
    pids = list(pids)
    before = {pid: os.sched_getaffinity(pid) for pid in pids}
    own_before = set(allowed)
    os.sched_setaffinity(0, {allowed[-1]})
    for pid in pids:
        os.sched_setaffinity(pid, {allowed[-1]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, own_before)
        for pid, cpus in before.items():
            try:
                os.sched_setaffinity(pid, cpus)
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


# -- how a contestant's blocks are sized ------------------------------------------------------
# The fewest steps per timed block, unless the job says otherwise. With both contestants in
# processes of their own, short blocks bias nothing (the A/A run is symmetric), and they put
# the two sides of each pair close in time.
DEFAULT_BLOCK_STEPS = 1
# A timed request lasts at least this long where the contestant allows: each request costs a
# fixed overhead (pipes, waking the process, the device's switch between contexts, the first
# launch that no earlier step hides) that is taken off as its calibrated median, and its
# rest, about 0.1 ms either way on an H200, must stay small beside the request (10 ms, with
# the even blocks of block_plan: a 0.3 ms kernel's steady time within +0.4 to +1.6% of its own
# plain loop on an H100, where 20 ms read +0.4 to +0.8% and took about 1.3 s more
# of each shape's timing; the lab notebook). A contestant
# runs as many steps per block as that takes, and one whose whole chain is shorter runs the
# whole chain several times per request, each from fresh inputs. A host-bound one, whose
# single step takes a quarter of that or more, runs blocks of ``block_steps`` (single steps
# by default): shorter blocks give more pairs in the same time, and its noise is its own,
# not the request's. The host-bound baseline, 8-16 ms a step on an H200, runs single steps,
# far from where the rule changes: in an A/A run both sides must get the same blocks, and a
# threshold within the baseline's range of paces would give them different ones whenever
# their warm-ups fell on either side of it.
MIN_REQUEST_MS = 10.0
MAX_CHAINS_PER_REQUEST = 16
# What a block is taken to have lasted at least (see Contestant.next_block).
SHORTEST_BLOCK_MS = 1e-6


def block_plan(
    step_ms: float, steps: int, block_steps: int = DEFAULT_BLOCK_STEPS, min_request_ms: float = MIN_REQUEST_MS
) -> tuple[int, int]:
    """(steps per block, chains per request) for a contestant that took ``step_ms`` a step
    when warming up, within chains of ``steps``: ``block_steps`` steps where one step takes a
    quarter of ``min_request_ms`` or more; else as many as last ``min_request_ms``; and where
    a whole chain is shorter than that, the whole chain as many times in one request as make
    it. The same rule for every contestant.

    Blocks within a chain are as even as its length allows, none shorter than the rule asks
    (a chain of 32 steps at 0.34 ms a step and 10 ms a request: one block of 32, not 30 and a
    2-step rest: on an H200, the 2-step blocks of three evaluations read a median
    0.37-0.52 ms a step against the 30-step blocks' 0.32, and the mixture's median up to 7%
    above the same process's plain loop); Contestant.next_block gives a short rest to the
    block before it."""
    least = min(block_steps, steps)
    if step_ms <= 0:  # faster than a request's own noise: as fast as can be
        return steps, MAX_CHAINS_PER_REQUEST
    if step_ms >= min_request_ms / 4:
        return least, 1
    wanted = max(least, math.ceil(min_request_ms / step_ms))
    if wanted <= steps:
        return steps // (steps // wanted), 1
    return steps, min(MAX_CHAINS_PER_REQUEST, math.ceil(min_request_ms / (steps * step_ms)))


# -- a contestant ----------------------------------------------------------------------------
class Contestant:
    """One side of a timed run: steps of one contestant, run in its process block by block.

    Its blocks go through chains of ``steps``: the first block of a chain starts it from
    fresh copies of its inputs, staged in an untimed request of their own; every other block
    goes on from where the last one stopped. Every block, first or not, follows such an
    untimed request, so that every timed request follows the same pattern. Subclasses say
    what the requests are (``stage_request``, ``block_request``) and check what a chain
    left (``chain_done``)."""

    def __init__(self, name: str, process: Any, steps: int):
        self.name, self.process, self.steps = name, process, steps
        self.block_steps, self.chains_per_request = min(DEFAULT_BLOCK_STEPS, steps), 1
        self.position = 0  # steps of the current chain done; 0: the next block starts a chain
        self.chains_in_block = 1
        self.checking = True  # chain_done after each chain (not for a warm-up's)
        # Milliseconds per step as the contestant's own process timed its blocks (CUDA
        # events): reported beside the referee's figure, never used for it.
        self.self_timed_ms: list[float] = []
        # Seconds of the referee's wall clock in each kind of work for this contestant: where
        # an evaluation's timing went (reported per shape, see time_shape).
        self.seconds = dict.fromkeys(("staging", "requests", "chain_checks"), 0.0)
        # Checked before each of its blocks (time_contestants sets the baseline's): the
        # scheduling of the trusted processes, unchanged since timing began.
        self.guard: Optional[process_table.SchedulingGuard] = None

    def plan(self, block_steps: int, chains_per_request: int = 1) -> None:
        """How the following blocks run (block_plan); the next block starts a new chain."""
        self.finish()
        self.block_steps, self.chains_per_request = block_steps, chains_per_request

    def next_block(self) -> float:
        """Run the next block; its milliseconds per step by the referee's clock."""
        first = self.position
        left = self.steps - first
        count = min(self.block_steps, left)
        if left - count < self.block_steps:  # the chain's last block takes a shorter rest with it
            count = left
        chains = self.chains_per_request if count == self.steps else 1
        changed = self.guard.changed() if self.guard is not None else None
        if changed:
            raise LeftRunning(f"before a timed block of the {self.name}: {changed}")
        started = time.perf_counter()
        self.process.request(
            self.stage_request(chains if first == 0 else 0), "staging the inputs of timed steps", probe=False
        )  # the block that follows is the process's own (remote.ContestantProcess)
        staged = time.perf_counter()
        reply = self.process.request(
            self.block_request(first, count, chains, first == 0),
            f"running steps {first + 1}-{first + count} of a timed chain"
            + (f", {chains} times from fresh inputs" if chains > 1 else ""),
        )
        self.seconds["staging"] += staged - started
        self.seconds["requests"] += time.perf_counter() - staged
        if "bad_return" in reply:
            raise CandidateError(str(reply["bad_return"])[:500])
        if isinstance(reply.get("device_ms"), (int, float)):
            self.self_timed_ms.append(float(reply["device_ms"]) / (count * chains))
        self.chains_in_block = chains
        self.position = first + count
        if self.position == self.steps:
            self.finish()
        # A block shorter than a request's noise can come out at or below nothing once the
        # request's calibrated cost is taken off; it stays a (tiny) time.
        return max(float(reply["block_ms"]), SHORTEST_BLOCK_MS) / (count * chains)

    def finish(self) -> None:
        """Check the chain in progress (or just ended): every run of it recorded since it
        began; the next block starts a new chain."""
        if self.position and self.checking:
            started = time.perf_counter()
            self.chain_done(self.position, self.chains_in_block)
            self.seconds["chain_checks"] += time.perf_counter() - started
        self.position, self.chains_in_block = 0, 1

    def empty_requests(self) -> tuple[dict, dict]:
        """A block with no step, and the request that stages its inputs: what calibration
        times as a request's own cost (remote.calibrate)."""
        return self.stage_request(1), self.block_request(0, 0, 1, True)

    def stage_request(self, copies: int) -> dict:
        raise NotImplementedError

    def block_request(self, first: int, count: int, chains: int, fresh: bool) -> dict:
        raise NotImplementedError

    def chain_done(self, steps_done: int, chains: int) -> None:
        """Called, untimed, after a chain's last block (or when timing stops within one)."""

    def verdict(self) -> tuple[str, str]:
        """(status, reason) for everything this contestant's timed chains returned."""
        return "pass", "not checked"


# The steps of the warm-up whose pace sizes a fast contestant's blocks, at least (or a whole
# chain): a request's own cost, some 0.45 ms beyond its calibrated floor for a fast kernel on
# an H200 (run 11), spread over 2 steps would make a 0.23 ms step read 0.35 ms, and its chains
# too few per request.
PACE_STEPS = 8


def warm_up(contestant: Contestant, steps: int, host_bound_ms: float = MIN_REQUEST_MS / 4) -> float:
    """Untimed chains, one request each, neither kept for the result nor checked, and the
    last one's milliseconds per step as the referee saw them (the pace that sizes the
    blocks): first the whole chain, then one of ``steps``; and where that one reads faster
    than ``host_bound_ms`` a step, a third of at least PACE_STEPS steps. The same rule for
    every contestant.

    The whole chain first, so that every allocation its steps make (the state grows a row a
    step) is made before the timing, in both processes. The solution's process had run this
    chain in the checks and the baseline's had not: with two short warm-up chains, the A/A's
    first round of pairs read the baseline about 3.5% slower than the later rounds (a ratio of
    1.034 against 0.993-0.996, the median over 42 contexts of H200 runs,
    lab/scripts/aa_rounds.py), its caching allocator asking the device for memory the other
    process already held."""
    counts, pace = [contestant.steps, max(1, steps)], 0.0
    contestant.checking = False  # a warm-up's outputs are no chain to check
    try:
        while counts:
            contestant.plan(min(counts.pop(0), contestant.steps))
            pace = contestant.next_block()
            contestant.position = 0
            if not counts and pace < host_bound_ms and steps < PACE_STEPS:
                counts, steps = [PACE_STEPS], PACE_STEPS
    finally:
        contestant.checking = True
    return pace


def run_pairs(contestants: Sequence[Contestant], pairs: int) -> dict[str, list[float]]:
    """``pairs`` blocks per contestant, the contestants taking turns block for block in ABBA
    order; each contestant's milliseconds per step, the k-th values of two contestants
    side by side in time."""
    samples: dict[str, list[float]] = {c.name: [] for c in contestants}
    for p in range(pairs):
        for c in contestants if p % 2 == 0 else list(reversed(contestants)):
            samples[c.name].append(c.next_block())
    for c in contestants:
        c.finish()
    return samples


def isolated_step_ms(contestant: Contestant, steps: int, interlude: Callable[[], Any]) -> float:
    """The latency of one step on its own: a chain of ``steps`` run one step per block, each
    timed alone (synchronized around, as a caller that waits for every token sees it) and
    each after ``interlude``, the other contestant's block, as in the timing. The median over
    the chain's steps. Its difference from the steady time per step is what the host adds to
    a step that no neighbour hides. The chain is checked as a timed chain is."""
    contestant.plan(1)
    samples = []
    for _ in range(steps):
        interlude()
        samples.append(contestant.next_block())
    contestant.finish()
    return float(np.median(samples))


# Isolated steps per shape: information only, and each costs a block of the other contestant.
ISOLATED_STEPS = 8
# Timed chains per shape judged step by step (Settings.judged_chains): a solution that skips
# work on a share f of its timed chains escapes with a chance of (1 - f) ** 4, and it must
# skip on at least half of them to move the median that the speedup is.
JUDGED_CHAINS = 4
# Two processes of the same code do not time alike (where each one's memory and code landed,
# which of them the device's caches and clocks favour), and one evaluation has one process of
# each contestant, so its blocks cannot see that spread: 20 evaluations of a KernelBench matmul
# identical to its reference read speedups with a log-SD of 1.4% while each one's interval from
# its blocks was about +-1%, and 2 in 20 called identical code faster or slower (on an H100;
# the lab notebook has the runs). The speedup's interval adds this spread, as a log-SD, to the
# blocks' own.
PROCESS_SPREAD = 0.015
# The normal quantile of a two-sided 95% interval, for PROCESS_SPREAD's share of it.
Z_95 = 1.96


@dataclasses.dataclass
class Settings:
    """How an evaluation times (the job's keys, with these defaults)."""

    rounds: int = 4  # chains of the contestant with the most blocks per chain; the other pairs up
    warmup: int = 2
    block_steps: int = DEFAULT_BLOCK_STEPS
    min_request_ms: float = MIN_REQUEST_MS
    isolated_steps: int = ISOLATED_STEPS
    # Timed chains per shape whose every step is judged against the reference afterwards,
    # chosen at random once the shape is timed, so that no chain can know whether it is one
    # (a decode task's; each judged step costs the referee one reference step).
    judged_chains: int = JUDGED_CHAINS
    process_spread: float = PROCESS_SPREAD  # added to each speedup's interval (speedup_with_noise)

    @classmethod
    def of(cls, job: Any, **defaults: Any) -> Settings:
        """From the job's fields of these names (a harness Job), where they are not None."""
        values = {**defaults}
        for field in dataclasses.fields(cls):
            given = getattr(job, field.name, None)
            if given is not None:
                values[field.name] = type(getattr(cls, field.name))(given)  # the default's type
        return cls(**values)


def time_shape(
    baseline: Contestant, candidate: Contestant, settings: Settings, steps: int, rounds: Optional[int] = None
) -> dict:
    """One shape: warm-ups, block plans, the timed pairs (``rounds`` chains, default the
    settings'), the isolated latency; the figures of the "timing" event, less the label and
    the roofline."""
    rounds = settings.rounds if rounds is None else rounds
    plans = {}
    started = time.perf_counter()
    for c in (baseline, candidate):
        plans[c.name] = block_plan(
            warm_up(c, settings.warmup, settings.min_request_ms / 4),
            steps,
            settings.block_steps,
            settings.min_request_ms,
        )
        c.plan(*plans[c.name])
    warmed = time.perf_counter()
    before = {c.name: dict(c.seconds) for c in (baseline, candidate)}
    blocks_per_chain = max(steps // plan[0] for plan in plans.values())  # (a short rest joins the last block)
    samples = run_pairs([baseline, candidate], rounds * blocks_per_chain)
    paired = time.perf_counter()
    self_timed = list(candidate.self_timed_ms)  # of the timed blocks only
    # (None where the settings ask for none: a KernelBench call's latency alone adds nothing)
    isolated_ms = (
        isolated_step_ms(candidate, min(steps, settings.isolated_steps), baseline.next_block)
        if settings.isolated_steps
        else None
    )
    baseline.finish()
    wall = {
        "warm_up": warmed - started,
        "pairs": paired - warmed,
        "isolated": time.perf_counter() - paired,
        **{
            f"pairs_{c.name}_{kind}": seconds - before[c.name][kind]
            for c in (baseline, candidate)
            for kind, seconds in c.seconds.items()
        },
    }
    result = {
        "steps": steps,
        "rounds": rounds,
        "pairs": len(samples["candidate"]),
        "block_steps": plans["baseline"][0],
        "candidate_block_steps": plans["candidate"][0],
        "candidate_chains_per_request": plans["candidate"][1],
        "baseline": summarize(samples["baseline"]),
        "candidate": summarize(samples["candidate"]),
        **speedup_with_noise(samples["baseline"], samples["candidate"], settings.process_spread),
        "baseline_samples_ms": samples["baseline"],
        "candidate_samples_ms": samples["candidate"],
        "candidate_isolated_ms": isolated_ms,
        "wall_seconds": {name: round(seconds, 3) for name, seconds in wall.items()},
    }
    if self_timed:
        result["candidate_self_timed_ms"] = float(np.median(self_timed))
    return result


@dataclasses.dataclass
class Shape:
    """One timed shape of an evaluation: its check, its label and its contestants (made when
    its turn comes, so that each shape's arena slots are its own)."""

    check: str  # the name of the check its timed chains get: "timed_chain_ctx_2048", "timed_calls"
    label: str
    context_len: Optional[int]
    steps: int
    contestants: Callable[[], tuple[Contestant, Contestant]]
    bytes_per_step: Optional[int] = None  # the roofline's bytes, where known
    physics: bool = True  # whether a time below the bytes floor is rejected


def time_contestants(evaluation: Any, shapes: Iterable[Shape], settings: Settings) -> Optional[list[dict]]:
    """Time every shape (time_shape), send each shape's check and "timing" event and then the
    score: the one sequence both kinds of evaluation share. The evaluation provides the
    contestants' processes, the checks and the channel (base.EvaluationBase). None where a
    check failed (sent already)."""
    per_shape = []
    shapes = list(shapes)
    # Every shape is timed over as many steps as the longest chain's rounds: a context of 16
    # steps runs twice the chains of one of 32, so that its speedup rests on as many pairs
    # (with half of them, the flagship's 16-step contexts read A/A with intervals of +-2-3%
    # and were where A/A strayed past 1.00 +- 0.02).
    longest = max((shape.steps for shape in shapes), default=1)
    bw = evaluation.bw
    freeze_heap()
    clocks_before = evaluation.clocks()
    with one_cpu_for_all(evaluation.contestant_pids()):
        # The baseline's and the referee's scheduling as timing set it: a solution that
        # renices, re-pins or stops either of them fails before the baseline's next block.
        # (contestant_pids: the solution's process, then the baseline's.)
        trusted = {"the referee": os.getpid()}
        for pid in evaluation.contestant_pids()[1:]:
            trusted["the baseline's process"] = pid
        guard = process_table.SchedulingGuard(trusted, stopped=frozenset({"the baseline's process"}))
        for shape in shapes:
            try:
                baseline, candidate = shape.contestants()
                baseline.guard = guard
                result = time_shape(
                    baseline,
                    candidate,
                    settings,
                    shape.steps,
                    max(settings.rounds, round(settings.rounds * longest / shape.steps)),
                )
            except (CandidateError, TrustedFailed) as err:
                evaluation.solution_failed(shape.check, err)
                return None
            if not evaluation.send_check(shape.check, *candidate.verdict()):
                return None
            result = {"label": shape.label, "context_len": shape.context_len, **result}
            if bw and shape.bytes_per_step is not None:
                result["roofline"] = roofline(shape.bytes_per_step, bw["bytes_per_s"], result)
                impossible = (
                    physics_violation(result["candidate"]["median_ms"], shape.bytes_per_step, bw["bytes_per_s"])
                    if shape.physics
                    else None
                )
                if impossible:
                    label = f"{shape.label}: " if shape.context_len is not None else ""
                    evaluation.send_check("physics", "fail", f"{label}{impossible}", roofline=result["roofline"])
                    return None
            evaluation.channel.send("timing", **result)
            per_shape.append(result)
    evaluation.phase("timing")
    evaluation.channel.send(
        "score",
        geomean_speedup=geomean([r["speedup"] for r in per_shape]),
        clocks_before=clocks_before,
        clocks_after=evaluation.clocks(),
    )
    return per_shape


def roofline(bytes_per_step: int, bytes_per_s: float, result: dict) -> dict:
    """The bytes floor of a step and the fraction of it each contestant's median reaches."""
    floor_ms = bytes_per_step / bytes_per_s * 1e3
    return {
        "bytes_per_step": int(bytes_per_step),
        "floor_ms": floor_ms,
        "candidate_fraction": floor_ms / result["candidate"]["median_ms"],
        "baseline_fraction": floor_ms / result["baseline"]["median_ms"],
    }


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
    return (
        f"{median_ms:.3g} ms per step moves {_si(bytes_per_step, 'B')} at {_si(implied, 'B/s')}, "
        f"{implied / bytes_per_s:.1f}x the device's measured {_si(bytes_per_s, 'B/s')}: rejected"
    )


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def summarize(samples_ms: Sequence[float], resamples: int = 2000, seed: int = 0) -> dict:
    """The blocks' spread, and a 95% bootstrap interval of their median: how precisely this
    run measured the contestant's own ms per step. (The speedup's interval also holds the
    other contestant's noise: beside a host-bound baseline that swings by 2x, it is the wider.)"""
    a = np.asarray(samples_ms, dtype=np.float64)
    p10, p25, p50, p75, p90 = np.percentile(a, [10, 25, 50, 75, 90])
    medians = np.median(a[np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))], axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return {
        "n": int(a.size),
        "median_ms": float(p50),
        "mean_ms": float(a.mean()),
        "p10_ms": float(p10),
        "p90_ms": float(p90),
        "iqr_ms": float(p75 - p25),
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "median_ci_low_ms": float(low),
        "median_ci_high_ms": float(high),
    }


def abba_units(baseline_ms: Sequence[float] | np.ndarray, candidate_ms: Sequence[float] | np.ndarray) -> np.ndarray:
    """The speedup of each ABBA unit: pairs 2k and 2k+1, as their geometric mean ratio
    (a lone last pair stands alone).

    In ABBA order the first block of every pair follows a block of its own contestant and the
    second follows the other's, so the pairs' ratios alternate: a block after the other
    process ran pays for the switch (caches, the device's context), after its own it does
    not (on an H200, single steps of the host-bound baseline read 5% apart that way). Each
    unit gives both contestants one block of each kind, so that the switch cancels within
    it rather than splitting the pairs' ratios into two modes that a median would land
    between."""
    ratios = np.asarray(baseline_ms, dtype=np.float64) / np.asarray(candidate_ms, dtype=np.float64)
    whole = ratios.size // 2 * 2
    units = np.sqrt(ratios[0:whole:2] * ratios[1:whole:2])
    return np.concatenate([units, ratios[whole:]])


def speedup_with_noise(
    baseline_ms: Sequence[float],
    candidate_ms: Sequence[float],
    process_spread: float = PROCESS_SPREAD,
    resamples: int = 2000,
    seed: int = 0,
) -> dict:
    """The speedup and its 95% interval, from paired samples in ABBA order.

    ``baseline_ms[k]`` and ``candidate_ms[k]`` ran back to back (adjacent blocks of a run),
    so their ratio sees the same clocks and the same neighbours on the machine; each two
    consecutive pairs make one ABBA unit (``abba_units``), and the median of the units'
    ratios estimates baseline time / candidate time and shrugs off a burst of noise that
    hits a few blocks; a bootstrap over the units gives the blocks' interval (blocks_ci_*).
    The interval (ci_*) adds to each side of it, in log space, the spread between two
    processes of the same code (PROCESS_SPREAD), which no block of one evaluation sees. The
    ratio of the two medians is reported beside it. The difference is "within noise" when
    the interval contains 1.0.
    """
    b = np.asarray(baseline_ms, dtype=np.float64)
    c = np.asarray(candidate_ms, dtype=np.float64)
    if b.shape != c.shape:
        raise ValueError("paired samples need equal counts")
    units = abba_units(b, c)
    rng = np.random.default_rng(seed)
    medians = np.median(units[rng.integers(0, units.size, size=(resamples, units.size))], axis=1)
    blocks_low, blocks_high = (float(v) for v in np.percentile(medians, [2.5, 97.5]))
    speedup = float(np.median(units))
    spread = Z_95 * process_spread

    def widened(blocks_half_width: float) -> float:
        return math.sqrt(max(blocks_half_width, 0.0) ** 2 + spread**2)

    low = speedup * math.exp(-widened(math.log(speedup / blocks_low)))
    high = speedup * math.exp(widened(math.log(blocks_high / speedup)))
    return {
        "speedup": speedup,
        "ci_low": low,
        "ci_high": high,
        "blocks_ci_low": blocks_low,
        "blocks_ci_high": blocks_high,
        "within_noise": bool(low <= 1.0 <= high),
        "ratio_of_medians": float(np.median(b) / np.median(c)),
    }


def geomean(values: Sequence[float]) -> float:
    a = np.asarray(values, dtype=np.float64)
    return float(np.exp(np.log(a).mean()))
