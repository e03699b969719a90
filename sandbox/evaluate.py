"""Evaluate a solution: the agent side of the harness.

Static rules first; then a pristine, read-only copy of the task and of the GPU-side harness
(kagent.sandbox.harness) is made in a fresh temporary folder, the solution's folder is
copied beside it (bundle.py), and a new child process runs the harness there
(harness_child.py). The child reports over a pipe that only it was given (not stdout); the
parent enforces the time limit by killing the child's whole process group, and afterwards
checks by hash that the pristine copy is intact. This module holds what is asked (the
options, the harness's job) and the verdict drawn from what the child reported.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field, ValidationError

from kagent.core.errors import KagentError
from kagent.sandbox import static_checks
from kagent.sandbox.bundle import Bundle, make_writable, promote_cache
from kagent.sandbox.harness.job import Job
from kagent.sandbox.harness.kinds import Kind
from kagent.sandbox.harness_child import OUTPUT_TAIL_CHARS, ChildRun, device_memory_ran_out, run_harness_child
from kagent.sandbox.lease import LeaseRecord, lease_folder
from kagent.sandbox.results import (
    Bandwidth,
    CheckResult,
    Determinism,
    Environment,
    EvalResult,
    LaunchReport,
    ShapeTiming,
    StaticFinding,
    Verdict,
    check_verdict,
)
from kagent.sandbox.timeouts import EVAL_TIMEOUT_S, HANG_AFTER_S
from kagent.tasks import KINDS, TaskRef


class EvalOptions(BaseModel):
    """How to evaluate: every field has a default suited to the scale."""

    mode: Literal["eval", "check", "aa"] = Field(
        "eval", description="eval: check and time; check: correctness only; aa: the baseline timed against itself"
    )
    device: str = Field("cpu", description="torch device for the run: cpu, cuda, cuda:1")
    scale: Literal["smoke", "full"] = Field("smoke", description="smoke: tiny config for CPUs and CI")
    contexts: Optional[list[int]] = Field(None, description="Context lengths to time (default: all of the scale)")
    rounds: Optional[int] = Field(
        None,
        ge=1,
        description="Timed chains per contestant at the shape with the "
        "longest chain (shorter chains run more, to as many steps)",
    )
    warmup: Optional[int] = Field(None, ge=0, description="Untimed warm-up steps per contestant and shape")
    block_steps: Optional[int] = Field(
        None,
        ge=1,
        description="The fewest consecutive steps per timed block; "
        "the contestants alternate block by block (default 1)",
    )
    judged_chains: Optional[int] = Field(
        None,
        ge=0,
        description="Timed chains of each shape judged step by step against the reference afterwards, "
        "chosen at random (default 4; more catch a rarer wrong run, each costs the reference's steps)",
    )
    min_request_ms: Optional[float] = Field(
        None,
        ge=0,
        description="The least a timed request to a contestant's "
        "process should last: one whose step takes a quarter of it or more runs "
        "blocks of block_steps; any other as many steps per block as that takes, "
        "a fast one its whole chain several times per request (default 10 ms; "
        "0: blocks of block_steps)",
    )
    reference_workers: Optional[int] = Field(
        None,
        ge=0,
        description="Processes that compute a decode task's secret "
        "cases beside the referee (None: 4 on CUDA, 0 on the CPU)",
    )
    timeout_s: float = Field(
        EVAL_TIMEOUT_S,
        gt=0,
        description="Wall-clock limit for the child process (the second run of "
        "an evaluation whose device memory ran out while shared gets what is left of it)",
    )
    hang_after_s: float = Field(
        HANG_AFTER_S,
        gt=0,
        description="Once the solution is built, a request to it that runs this "
        "long (or 20x the baseline's time for its steps, if more) with no compiler running "
        "has hung: the evaluation ends with a diagnosis (sandbox/harness/watchdog.py)",
    )
    cache_dir: Optional[Path] = Field(None, description="Where reference weights, outputs and bandwidth are cached")
    home: Optional[Path] = Field(
        None,
        description="The solution's HOME, where its builds are cached (torch "
        "extensions, Triton); None: a fresh one per evaluation",
    )
    hidden_seeds: Optional[int] = Field(
        None,
        ge=1,
        description="Seeds drawn at run time, unknown to the solution (None: the task kind's hidden_seeds)",
    )
    atol: Optional[float] = Field(
        None,
        description="KernelBench files: absolute tolerance of allclose (None: KernelBench's for "
        "the output's precision, 1e-4 fp32, 1e-2 fp16 and bf16)",
    )
    rtol: Optional[float] = Field(None, description="KernelBench files: relative tolerance of allclose (as atol)")
    eval_mode: bool = Field(
        False,
        description="KernelBench files: both models in eval mode (default: left in training mode, "
        "as KernelBench leaves them, unless the problem file sets EVAL_MODE = True)",
    )
    correct_trials: Optional[int] = Field(
        None, ge=1, description="KernelBench files: input sets drawn from seed 42 as KernelBench does (None: 5)"
    )
    python: str = Field(default_factory=lambda: sys.executable, description="Interpreter for the child")

    def hidden_seeds_for(self, kind: str) -> int:
        """How many seeds an evaluation of a task of ``kind`` draws at run time."""
        return self.hidden_seeds or KINDS[kind].hidden_seeds


def _job(task: TaskRef, bundle: Bundle, options: EvalOptions) -> Job:
    """The harness's job for this evaluation, less how the referee runs (run_harness_child adds it)."""
    return Job(
        kind=Kind(**task.kind_of.harness()),  # the harness knows a kind only from its job
        mode=options.mode,
        task=str(bundle.task_path),
        solution=str(bundle.solution) if bundle.solution else None,
        scale=options.scale,
        device=options.device,
        timeout_s=options.timeout_s,
        hang_after_s=options.hang_after_s,
        hidden_seeds=options.hidden_seeds_for(task.kind),
        cache_dir=str(options.cache_dir) if options.cache_dir else None,
        cache_staging=str(bundle.cache_staging) if options.cache_dir else None,
        # Cache entries built from other task or harness files are rebuilt, not trusted.
        cache_identity=hashlib.sha256(json.dumps(bundle.digest(), sort_keys=True).encode()).hexdigest(),
        contexts=options.contexts,
        rounds=options.rounds,
        warmup=options.warmup,
        block_steps=options.block_steps,
        min_request_ms=options.min_request_ms,
        judged_chains=options.judged_chains,
        reference_workers=options.reference_workers,
        atol=options.atol,
        rtol=options.rtol,
        eval_mode=options.eval_mode,
        correct_trials=options.correct_trials,
    )


def _syntax_error(solution: Path) -> Optional[CheckResult]:
    """The load check's error for a solution that does not compile, said at once: the harness
    would say the same only once it has imported torch and built the reference's outputs and
    secret cases (7.7 s on a loaded 2-core machine, 17 s here), since it imports the solution
    after them. Compiling runs none of the solution's code."""
    try:
        compile(solution.read_bytes(), solution.name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:  # ValueError: a null byte in the source
        return CheckResult(
            name="load",
            status="error",
            reason=f"importing the solution raised {type(err).__name__}: {err}",
            details="".join(traceback.format_exception_only(type(err), err)),
        )
    return None


def _static(task: TaskRef, solution: Path) -> list[StaticFinding]:
    return [StaticFinding(**f.__dict__) for f in static_checks.scan(solution, task.forbidden_imports)]


def evaluate(
    task: TaskRef, solution: Optional[Path], options: EvalOptions, progress: Optional[Callable[[dict], None]] = None
) -> EvalResult:
    """Evaluate ``solution`` (None in A/A mode) on ``task``; never raises for a bad solution.
    ``progress`` gets the harness's events (phase, check, timing, ...) as they arrive. Under a
    device lease, an evaluation whose referee ran out of device memory runs once more, holding
    the device alone (``ran_alone_after`` says so)."""
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if options.mode != "aa":
        if solution is None:
            raise KagentError("a solution file is needed (or ask for an A/A run)")
        solution = solution.resolve()
        if not solution.is_file():
            raise KagentError(f"no solution file at {solution}")
    header = dict(
        task=task.name,
        task_kind=task.kind,
        mode=options.mode,
        scale=options.scale,
        device=options.device,
        started_at=started_at,
        solution=str(solution) if solution else None,
        solution_sha256=hashlib.sha256(solution.read_bytes()).hexdigest() if solution else None,
    )
    if solution is not None:
        unparsed = _syntax_error(solution)
        if unparsed is not None:
            return EvalResult(
                **header,
                verdict=Verdict.ERROR,
                checks=[unparsed],
                reason=f"{unparsed.name}: {unparsed.reason}",
                wall_seconds=round(time.monotonic() - started, 3),
            )
        findings = _static(task, solution)
        if findings:
            first = findings[0]
            return EvalResult(
                **header,
                verdict=Verdict.FORBIDDEN,
                static_findings=findings,
                reason=f"{first.rule} at {first.file}:{first.line}: {first.evidence}",
                wall_seconds=round(time.monotonic() - started, 3),
            )
    ran_out: Optional[str] = None
    begun, this_run = started, options
    for alone in (False, True):
        with tempfile.TemporaryDirectory(prefix="kagent-eval-") as tmp:
            bundle = Bundle(Path(tmp), task, solution)
            setup = time.monotonic() - begun
            try:
                child = run_harness_child(bundle, _job(task, bundle, options), this_run, progress, alone=alone)
                child_done = time.monotonic()
                tampered = bundle.tampering()
                if options.cache_dir is not None:
                    promote_cache(bundle.cache_staging, options.cache_dir, child.events)
            finally:
                for folder in bundle.read_only:
                    make_writable(folder)  # so the temporary folder can be removed
            # Once, where the device's memory ran out while other evaluations shared it: again,
            # with the device alone (see device_memory_ran_out), within what is left of the limit.
            left_s = options.timeout_s - (time.monotonic() - started)
            if not alone and lease_folder() is not None and not tampered and left_s >= 1:
                ran_out = device_memory_ran_out(child, aa=options.mode == "aa")
                if ran_out is not None:
                    if progress is not None:
                        progress({"event": "device_memory_ran_out", "reason": ran_out})
                    begun, this_run = time.monotonic(), options.model_copy(update={"timeout_s": left_s})
                    continue
            result = assemble(header, child, tampered, bundle.digest(), this_run)
            break
    result.ran_alone_after = ran_out
    result.wall_seconds = round(time.monotonic() - started, 3)
    result.overhead_seconds = {
        "setup": round(setup, 3),
        **child.overhead,
        "teardown": round(time.monotonic() - child_done, 3),
    }
    return result


def assemble(
    header: dict, child: ChildRun, tampered: list[str], bundle_digest: dict, options: EvalOptions
) -> EvalResult:
    """Turn the child's events into a validated EvalResult with one verdict."""
    checks, timings, launches, leases = [], [], [], []
    fields: dict = {}
    task_error = internal_error = None
    for event in child.events:
        kind = event.get("event")
        body = {k: v for k, v in event.items() if k != "event"}
        try:
            if kind == "check":
                core = {k: body.pop(k) for k in ("name", "status", "reason") if k in body}
                checks.append(CheckResult(**core, details=str(body.pop("details", ""))[:OUTPUT_TAIL_CHARS], data=body))
            elif kind == "timing":
                timings.append(ShapeTiming(**body))
            elif kind == "launches":
                launches.append(LaunchReport(**body))
            elif kind == "gpu_lease":
                leases.append(LeaseRecord(**body))
            elif kind == "environment":
                fields["environment"] = Environment(**body)
            elif kind == "bandwidth":
                fields["bandwidth"] = Bandwidth(**body)
            elif kind == "determinism":
                fields["determinism"] = Determinism(**body)
            elif kind == "score":
                fields["score"] = body["geomean_speedup"]
                fields["clocks_during_timing"] = {
                    "before": body.get("clocks_before", {}),
                    "after": body.get("clocks_after", {}),
                }
            elif kind == "done":
                fields.update(
                    phases=body.get("phases", {}),
                    start_up=body.get("start_up", {}),
                    hidden_seeds=body.get("hidden_seeds", []),
                    cache=body.get("cache", {}),
                )
            elif kind == "task_error":
                task_error = body["reason"]
            elif kind == "internal_error":
                internal_error = f"{body['reason']}\n{body.get('details', '')}"
        except (ValidationError, KeyError) as err:
            internal_error = f"malformed {kind} event from the harness: {err}"
    if task_error:
        raise KagentError(f"the task cannot be evaluated: {task_error}")
    done = any(e.get("event") == "done" for e in child.events)
    verdict, reason = _verdict(checks, done, child, tampered, internal_error, options)
    if verdict is not Verdict.PASS:
        fields.pop("score", None)
    return EvalResult(
        **header,
        **fields,
        verdict=verdict,
        reason=reason,
        checks=checks,
        timings=timings,
        launches=launches,
        gpu_leases=leases,
        wall_seconds=0.0,
        bundle_sha256=bundle_digest,
        exit_code=child.exit_code,
        stdout_tail=child.stdout_tail,
        stderr_tail=child.stderr_tail,
        limits_hit=child.resources.problems(),
        peak_host_memory_bytes=child.resources.peak_memory_bytes,
    )


def _verdict(
    checks: list[CheckResult],
    done: bool,
    child: ChildRun,
    tampered: list[str],
    internal_error: Optional[str],
    options: EvalOptions,
) -> tuple[Verdict, str]:
    if tampered:
        return Verdict.TAMPERED, f"the pristine task/harness copy changed during the run: {', '.join(tampered[:5])}"
    if child.forged:
        return Verdict.TAMPERED, (
            f"the result channel carried {len(child.forged)} line(s) the harness did not sign, "
            f"the first: {child.forged[0][:120]!r}: the solution wrote to it"
        )
    if child.timed_out:
        compiling = next((e for e in reversed(child.events) if e.get("event") == "watchdog"), None)
        still = (
            f" (the watchdog saw a step still compiling {compiling.get('seconds', 0):.0f} s in: "
            f"{', '.join(compiling.get('compilers') or ['Triton writing its cache'])})"
            if compiling
            else ""
        )
        return Verdict.TIMEOUT, (
            f"no verdict within the {options.timeout_s:g} s limit{still}; the process group was killed"
        )
    if internal_error:
        return Verdict.INTERNAL_ERROR, internal_error
    if not done:
        last = checks[-1].name if checks else "start-up"
        how = (
            f"killed by signal {-child.exit_code}"
            if child.exit_code and child.exit_code < 0
            else f"exit code {child.exit_code}"
        )
        limits = child.resources.problems()
        if limits:  # the likeliest cause, said first: a crash message after an OOM kill misleads
            return Verdict.CRASH, f"the process died after {last} ({how}): {'; '.join(limits)}"
        stderr = child.stderr_tail.strip().splitlines()
        return Verdict.CRASH, f"the process died after {last} ({how})" + (f": {stderr[-1][:300]}" if stderr else "")
    for check in checks:
        if check.status != "pass":
            limits = child.resources.problems() if check.status == "crash" else []
            # The limit that killed the solution's process is its likeliest cause: said with it.
            return check_verdict(check), f"{check.name}: {check.reason}" + "".join(f": {why}" for why in limits)
    if not checks:
        return Verdict.INTERNAL_ERROR, "the harness finished without running any check"
    if options.mode == "check":
        return Verdict.PASS, f"all {len(checks)} checks passed (not timed)"
    return Verdict.PASS, f"all {len(checks)} checks passed"
