"""The result of an evaluation, as kagent stores and shows it (versioned pydantic models).

The GPU side sends plain JSON events (kagent.sandbox.harness.protocol); ``EvalResult`` is
what the agent side makes of them, validated field by field.
"""

from __future__ import annotations

from enum import Enum
from typing import Final, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from kagent.sandbox.lease import LeaseRecord
from kagent.tasks import KINDS, KindName

EVAL_RESULT_VERSION: Final = 1


class Verdict(str, Enum):
    """What the evaluation concluded about the solution, worst first."""

    INTERNAL_ERROR = "internal_error"  # a bug in kagent or in the task itself
    TAMPERED = "tampered"  # the pristine task or harness copy changed during the run
    FORBIDDEN = "forbidden"  # static rules broken (forbidden imports); never ran
    TIMEOUT = "timeout"  # killed at the time limit
    CRASH = "crash"  # the process died without finishing its report
    ERROR = "error"  # the solution raised, or returned the wrong kind of thing
    INCORRECT = "incorrect"  # ran, but a correctness check failed
    PASS = "pass"  # every check passed (and, unless check-only, it was timed)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckResult(Model):
    name: str = Field(description="Which check: load, fixed_seeds, hidden_seeds, overwrite_in_place, ...")
    status: Literal["pass", "fail", "error", "crash", "timeout"] = Field(
        description="fail: wrong answer; error: the code raised; crash: the solution's process died; "
        "timeout: the watchdog found a step hung and ended the evaluation"
    )
    reason: str = Field(description="One line a person or a model can act on")
    details: str = Field("", description="Traceback or other evidence, capped")
    data: dict = Field(default_factory=dict, description="Per-case cosines, seeds and the like")


class Stats(Model):
    n: int = Field(description="Number of timed blocks (each value: milliseconds per step of one block)")
    median_ms: float
    mean_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float
    min_ms: float
    max_ms: float
    median_ci_low_ms: Optional[float] = Field(
        None,
        description="95% bootstrap interval of the median, low end (absent from results made before it was measured)",
    )
    median_ci_high_ms: Optional[float] = None

    @property
    def median_half_width(self) -> Optional[float]:
        """Half the median's interval, as a fraction of the median."""
        if self.median_ci_low_ms is None or self.median_ci_high_ms is None:
            return None
        return (self.median_ci_high_ms - self.median_ci_low_ms) / 2 / self.median_ms


class Roofline(Model):
    bytes_per_step: int = Field(description="Bytes one step must move through device memory at least")
    floor_ms: float = Field(description="bytes_per_step over the measured copy bandwidth")
    candidate_fraction: float = Field(description="floor / candidate median: 1.0 would be at the floor")
    baseline_fraction: float


def ms_text(value: float) -> str:
    """Milliseconds to three significant digits, so that a table fits an 80-column terminal."""
    return (
        f"{value:.3f}"
        if value < 1
        else f"{value:.2f}"
        if value < 10
        else f"{value:.1f}"
        if value < 100
        else f"{value:.0f}"
    )


class ShapeTiming(Model):
    label: str = Field(description="'ctx 2048' for a decode task, 'default' for a KernelBench file")
    context_len: Optional[int] = None
    steps: int = Field(description="Steps per timed chain")
    rounds: int = Field(
        description="Chains timed of the contestant with the most blocks per chain (the other runs as many blocks)"
    )
    pairs: Optional[int] = Field(None, description="Timed blocks per contestant, paired back to back in ABBA order")
    block_steps: Optional[int] = Field(
        None,
        description="Consecutive steps per timed block of the baseline, one "
        "request to its process each (contestants alternate block "
        "by block)",
    )
    candidate_block_steps: Optional[int] = Field(
        None,
        description="Consecutive steps per timed block of the "
        "solution, one request to its process each: "
        "up to a whole chain for a fast one",
    )
    candidate_chains_per_request: Optional[int] = Field(
        None,
        description="Times a whole chain ran, each from "
        "fresh inputs, in one request to the solution's process "
        "(a fast one's request must outlast its fixed cost)",
    )
    baseline: Stats
    candidate: Stats
    baseline_samples_ms: list[float] = Field(
        default_factory=list, description="Per step, each block's, in timing order; paired with candidate_samples_ms"
    )
    candidate_samples_ms: list[float] = Field(
        default_factory=list,
        description="Per step, each block's, in timing order; the k-th ran beside the baseline's k-th",
    )
    speedup: float = Field(description="Median over back-to-back block pairs of baseline / candidate time")
    ratio_of_medians: float = Field(description="baseline median / candidate median, for comparison")
    ci_low: float = Field(
        description="95% interval of the speedup, low end: the blocks' bootstrap interval widened by the "
        "spread between two processes of the same code (sandbox/harness/timing.py, PROCESS_SPREAD)"
    )
    ci_high: float
    blocks_ci_low: Optional[float] = Field(
        None, description="95% bootstrap interval of the speedup from this evaluation's blocks alone, low end"
    )
    blocks_ci_high: Optional[float] = None
    within_noise: bool = Field(description="True when the interval contains 1.0")
    candidate_isolated_ms: Optional[float] = Field(
        None,
        description="Median latency of one step of the solution timed on its own (synchronized around, "
        "one step per request): what a caller that waits for every token sees",
    )
    candidate_self_timed_ms: Optional[float] = Field(
        None,
        description="Median per step as the solution's own process timed its blocks with CUDA events: "
        "information only, the referee's clock gives every figure above",
    )
    roofline: Optional[Roofline] = None
    wall_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Where this shape's timing went by the referee's wall clock: warm_up, "
        "pairs (the timed blocks, of which pairs_<contestant>_staging, _requests (the timed requests, their probes "
        "included) and _chain_checks, the comparison of each timed chain with the validated one), isolated",
    )

    @property
    def tokens_per_s(self) -> float:
        return 1e3 / self.candidate.median_ms

    @property
    def candidate_host_overhead_ms(self) -> Optional[float]:
        """What a step on its own costs beyond a step among others: the host's launch work
        and the device's wake-up that consecutive steps hide."""
        if self.candidate_isolated_ms is None:
            return None
        return self.candidate_isolated_ms - self.candidate.median_ms

    def host_overhead_text(self) -> str:
        """The host overhead in words. It cannot be below zero: a step alone measured faster than
        the steady pace is the two measurements' noise, and is said so rather than as a negative
        overhead. (Call it where candidate_host_overhead_ms is not None.)"""
        overhead = self.candidate_host_overhead_ms
        assert overhead is not None
        if overhead >= 0:
            return f"host overhead {overhead:.3g} ms over the steady time"
        return (
            f"no host overhead to see: it read {-overhead:.3g} ms under the steady time "
            f"{ms_text(self.candidate.median_ms)} ms, within the two measurements' noise"
        )


class LaunchReport(Model):
    who: Literal["baseline", "candidate"]
    context_len: Optional[int] = None
    launches: Optional[int] = Field(None, description="GPU launches (kernels, copies, sets) in one warmed step")
    kernels: list[dict] = Field(default_factory=list, description="Most frequent kernel names with counts")
    distinct_kernels: int = 0
    single_launch: Optional[bool] = Field(None, description="Exactly one launch, no graph replay, no compile")
    cuda_graph_replay: bool = False
    torch_compile: bool = False
    note: str = ""
    cached: bool = Field(
        False, description="Read from the cache: the baseline's count, cached by its file, the device and torch"
    )
    device_ms: Optional[float] = Field(
        None, description="The profiler's device time of the step: its kernels', copies' and sets' durations summed"
    )
    reported_by: str = Field(
        "the referee",
        description="Which process profiled the step, each contestant's "
        "its own: the candidate's count comes from code it "
        "controls, so it decides nothing",
    )
    counted_outside: bool = Field(
        False,
        description="Counted outside the solution's process (the baseline's count; a solution's "
        "only from a profiler the referee runs): only such a count, and its device time, may "
        "rank attempts, pass a single-launch goal or open finish (older results: False)",
    )


class Environment(Model):
    model_config = ConfigDict(extra="allow")
    device: str
    hostname: str = ""
    platform: str = ""
    python: str = ""
    torch: str = ""
    triton: Optional[str] = None
    cuda: Optional[str] = None
    gpu_name: Optional[str] = None
    gpu_uuid: Optional[str] = None
    driver: Optional[str] = None
    clocks: dict = Field(default_factory=dict, description="nvidia-smi clocks when the run started")


class Bandwidth(Model):
    bytes_per_s: float
    measured_at: str
    cached: bool
    device_key: str


class StaticFinding(Model):
    file: str
    line: int
    rule: str = Field(description="forbidden_import, dynamic_import, sys_modules, ...")
    evidence: str


class Determinism(Model):
    """The same step run twice from identical inputs: information, not a verdict."""

    case: str = Field(description="The correctness case both calls started from (fresh copies of its inputs)")
    bitwise_equal: bool = Field(description="The two calls returned the same bytes in every output tensor")
    max_abs_diff: Optional[float] = Field(
        description="Largest absolute difference between the two calls' outputs "
        "(0.0 when bitwise equal; None where NaN or infinity "
        "makes it undefined)"
    )
    largest_in: Optional[str] = Field(None, description="The output tensor it is in: hidden, or L<layer>.<name>")


# Steady time per step and the profiler's device time of a step may differ by this much before
# an evaluation says so (issue 10: two of kagent's own tools must not contradict each other).
DEVICE_TIME_TOLERANCE = 0.10


class EvalResult(Model):
    """One evaluation of one solution on one task. Stored as JSON; ``version`` says the schema."""

    version: Literal[1] = EVAL_RESULT_VERSION
    task: str
    task_kind: KindName
    solution: Optional[str] = Field(None, description="Path of the solution file (None in A/A mode)")
    solution_sha256: Optional[str] = None
    mode: Literal["eval", "check", "aa"]
    scale: Literal["smoke", "full"]
    device: str
    verdict: Verdict
    reason: str = Field(description="Why, in one line")
    started_at: str
    wall_seconds: float = Field(description="Whole evaluation, process start to verdict")
    phases: dict[str, float] = Field(default_factory=dict, description="Seconds per phase in the child")
    start_up: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Per process of the evaluation (baseline, reference worker N, solution), "
        "in seconds from the referee's start: ready (interpreter, torch and device context up), asked (to load) and "
        "loaded, from the process's own reply: where a warm evaluation's start-up time goes",
    )
    overhead_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="The rest of the wall time: setup "
        "(static rules, the pristine copy), start (the child's jail and "
        "interpreter, to its first event; its imports are the first phase), "
        "exit (its last event to its whole group stopped), teardown (the "
        "tamper check, the cache's new entries promoted, the folder removed)",
    )
    checks: list[CheckResult] = Field(default_factory=list)
    static_findings: list[StaticFinding] = Field(default_factory=list)
    timings: list[ShapeTiming] = Field(default_factory=list)
    score: Optional[float] = Field(None, description="Geometric mean of the speedups over the timed shapes")
    launches: list[LaunchReport] = Field(default_factory=list)
    gpu_leases: list[LeaseRecord] = Field(
        default_factory=list,
        description="The device lease held alone, under "
        "a sweep (sandbox/lease.py): the timing, a bandwidth measurement, the "
        "calibration, a busy probe asked again",
    )
    bandwidth: Optional[Bandwidth] = None
    environment: Optional[Environment] = None
    clocks_during_timing: dict = Field(default_factory=dict)
    hidden_seeds: list[int] = Field(default_factory=list, description="Seeds drawn for this run, told afterwards")
    determinism: Optional[Determinism] = Field(
        None, description="Decode tasks: whether two calls on identical inputs repeat bit for bit"
    )
    bundle_sha256: dict[str, str] = Field(default_factory=dict, description="Hashes of the pristine copy")
    cache: dict = Field(default_factory=dict)
    exit_code: Optional[int] = None
    limits_hit: list[str] = Field(
        default_factory=list, description="Sandbox limits the run ran into (host memory, processes)"
    )
    peak_host_memory_bytes: Optional[int] = Field(
        None, description="Most host memory the run held at once (its cgroup's peak), where measured"
    )
    stderr_tail: str = ""
    stdout_tail: str = ""
    ran_alone_after: Optional[str] = Field(
        None,
        description="Under a device lease: the referee's error (in an A/A "
        "run, either contestant's too) of a first run whose device memory ran "
        "out while other evaluations shared the device; this result is of the "
        "run that followed, holding it alone",
    )

    @property
    def step_name(self) -> str:
        """What one timed step is called, by the task's kind: a KernelBench file's forward is a
        call, a decode task's step a token."""
        return KINDS[self.task_kind].step_name

    @property
    def rate_unit(self) -> str:
        """The unit of steps per second, by the task's kind (calls/s, tok/s)."""
        return KINDS[self.task_kind].rate_unit

    def launches_of(self, who: str) -> Optional[LaunchReport]:
        return next((r for r in self.launches if r.who == who), None)

    @property
    def probes_asked_again(self) -> list[dict]:
        """Idle probes that read busy while the device was shared, read again (each check's
        ``probes_asked_again``, in order; harness/remote.Watch.check)."""
        return [probe for check in self.checks for probe in check.data.get("probes_asked_again", [])]

    def _steady_beside_device_time(self) -> Optional[tuple[ShapeTiming, float]]:
        """The timing at the context the solution's launches were counted at, and the
        profiler's device time of one of its steps there (None where not both were measured)."""
        report = self.launches_of("candidate")
        if report is None or report.device_ms is None or report.device_ms <= 0:
            return None
        timing = next((t for t in self.timings if t.context_len == report.context_len), None)
        return (timing, report.device_ms) if timing is not None else None

    def device_time_check(self) -> Optional[str]:
        """The solution's steady time per step beside the profiler's device time of one of its
        steps (at the context the launches were counted at), and a warning where they differ
        by more than DEVICE_TIME_TOLERANCE: then the step spends time off the device (host
        work between launches, synchronizations) or the profiler missed work."""
        found = self._steady_beside_device_time()
        if found is None:
            return None
        timing, device_ms = found
        steady = timing.candidate.median_ms
        line = (
            f"{timing.label}: steady {steady:.4g} ms/step, profiler device time {device_ms:.4g} ms/step "
            f"(from the solution's own process)"
        )
        gap = steady / device_ms - 1
        if abs(gap) > DEVICE_TIME_TOLERANCE:
            line += f": they differ by {gap:+.0%}, more than {DEVICE_TIME_TOLERANCE:.0%}; " + (
                "the step waits on the host or idles between launches"
                if gap > 0
                else "the profiler saw more device time than the steps took (overlapping streams?)"
            )
        return line

    @property
    def device_bound(self) -> Optional[bool]:
        """Whether the solution's steady time per step is its device time (within
        DEVICE_TIME_TOLERANCE): then its own time does not follow the host's pace, as a
        host-bound baseline's does. None where either was not measured (on a CPU), or where
        the device time came from the solution's own process, which can write any figure:
        this decides how attempts are ranked (agent/loop/ledger.own_times)."""
        report = self.launches_of("candidate")
        found = self._steady_beside_device_time() if report is not None and report.counted_outside else None
        if found is None:
            return None
        timing, device_ms = found
        return abs(timing.candidate.median_ms / device_ms - 1) <= DEVICE_TIME_TOLERANCE


def check_verdict(check: CheckResult) -> Verdict:
    """The verdict one failed or erroring check calls for (PASS for a passing one)."""
    if check.status == "pass":
        return Verdict.PASS
    if check.status == "crash":
        return Verdict.CRASH
    if check.status == "timeout":  # the watchdog ended a step that hung
        return Verdict.TIMEOUT
    return Verdict.ERROR if check.status == "error" else Verdict.INCORRECT
