"""Whole evaluations of the flagship on a GPU, for lab/scripts/gpu_timing_truth.sh: A/A runs (per
context, with their wall time and phases), verdicts repeated on unchanged files, and every
broken variant of the coverage table at full scale.

    python3 lab/scripts/gpu_evaluations.py aa '[["aa_1", {}], ["aa_r12", {"rounds": 12}]]'
    python3 lab/scripts/gpu_evaluations.py verdicts 10 10 4   # honest file 10 times, rarely wrong one 10, 4 at once
    python3 lab/scripts/gpu_evaluations.py broken 4           # PARTS' variants of tests/test_eval_kimi.py, 4 at once

Results go to $OUT (each A/A run's EvalResult as JSON; verdicts.json for the rest); the
reference weights' cache is $KAGENT_HOME, so every evaluation after the first is warm. Checks
only (no timing) run several at once, under one device lease as a sweep's members do (its
folder a fresh temporary one, unless $KAGENT_GPU_LEASE names one): a verdict must not depend on the
machine's load, and a probe that reads the device busy beside another evaluation's work is
read again, and where still busy asked again with the device alone (each outcome counts them).

The honest solution is the reference's own code; every candidate here builds without the
reference's random draws (its weights are loaded after construction anyway), which spares
each evaluation some 17 s of drawing on the CPU."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.sandbox.lease import LEASE_DIR_ENV
from kagent.tasks import resolve_task

OUT = Path(os.environ["OUT"])
KIMI = resolve_task("02_kimi_linear_decode")
# The suite's own variants: the coverage table (PARTS, BROKEN) and the solution wrong on 1
# input in 10 (RARELY_WRONG), written once, there.
sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "tests")]
import test_eval_kimi as suite  # noqa: E402

WITHOUT_DRAWS = """
_reference_init = Model.__init__


def _init_without_draws(self, cfg, init_weights=False):
    _reference_init(self, cfg, init_weights=init_weights)


Model.__init__ = _init_without_draws
"""


def full_scale(**extra) -> EvalOptions:
    return EvalOptions(device="cuda", scale="full", cache_dir=Path(os.environ["KAGENT_HOME"]), timeout_s=600.0, **extra)


def aa_runs(runs: list[tuple[str, dict]]) -> None:
    for label, extra in runs:
        started = time.monotonic()
        result = evaluate(KIMI, None, full_scale(mode="aa", **extra))
        (OUT / f"{label}.json").write_text(result.model_dump_json(indent=1))
        print(
            f"== {label} {extra}: {result.verdict.value} score={result.score} wall={result.wall_seconds:.1f}s "
            f"(process {time.monotonic() - started:.1f}s) phases={result.phases} outside={result.overhead_seconds}"
        )
        if result.verdict.value != "pass":
            print(f"   reason: {result.reason[:400]}\n   stderr: {result.stderr_tail[-1500:]}")
        for t in result.timings:
            print(
                f"   ctx {t.context_len}: {t.speedup:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}] "
                f"base {t.baseline.median_ms:.3f} cand {t.candidate.median_ms:.3f} isolated "
                f"{t.candidate_isolated_ms:.3f} blocks of {t.block_steps}/{t.candidate_block_steps}"
                f"x{t.candidate_chains_per_request} pairs={t.pairs} base p10-p90 {t.baseline.p10_ms:.2f}-"
                f"{t.baseline.p90_ms:.2f} cand p10-p90 {t.candidate.p10_ms:.2f}-{t.candidate.p90_ms:.2f}"
            )
        for launch in result.launches:
            print(
                f"   launches {launch.who}: {launch.launches} cached={launch.cached} device_ms={launch.device_ms} "
                f"({launch.reported_by})"
            )


def _candidate(label: str, patch: str) -> Path:
    folder = Path(f"/tmp/verdicts/{label}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "solution.py").write_text((KIMI.path / "reference.py").read_text() + WITHOUT_DRAWS + "\n" + patch)
    return folder / "solution.py"


def _checked(job: tuple[str, Path, dict]) -> dict:
    label, solution, extra = job
    started = time.monotonic()
    result = evaluate(KIMI, solution, full_scale(mode="check", **extra))
    failed = [c for c in result.checks if c.status != "pass"]
    asked_again = result.probes_asked_again
    confirming = [hold for hold in result.gpu_leases if hold.what.startswith("confirming")]
    return {
        "label": label,
        "verdict": result.verdict.value,
        "reason": result.reason[:300],
        "failed_check": failed[0].name if failed else None,
        "seconds": round(time.monotonic() - started, 1),
        "probes_asked_again": len(asked_again),
        "asked_alone": len(confirming),
        "waited_alone_s": round(sum(h.waited_s for h in confirming), 2),
        "phases": result.phases,
        "gpu_uuid": result.environment.gpu_uuid if result.environment else None,
    }


def _run_all(jobs: list[tuple[str, Path, dict]], parallel: int, name: str) -> list[dict]:
    """Every job's outcome, each printed and saved (``name`` in verdicts.json) as it comes in,
    so that a run stopped at its time limit still says what it got."""
    started = time.monotonic()
    outcomes = []
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for outcome in pool.map(_checked, jobs):
            print(
                f"== {outcome['label']}: {outcome['verdict']} in {outcome['seconds']}s "
                f"({outcome['probes_asked_again']} busy probes read again, {outcome['asked_alone']} of them with the "
                f"device alone after {outcome['waited_alone_s']}s): "
                f"{outcome['reason'][:160]}",
                flush=True,
            )
            outcomes.append(outcome)
            _save(name, outcomes)
    print(f"   {len(jobs)} evaluations, {parallel} at once: {time.monotonic() - started:.1f}s")
    return outcomes


def repeated_verdicts(honest_repeats: int, wrong_repeats: int, parallel: int) -> None:
    """The reference's own code as a solution, and the suite's solution wrong on 1 input in
    10, each checked that many times, unchanged."""
    honest, wrong = _candidate("honest", ""), _candidate("rarely_wrong", suite.RARELY_WRONG)
    # Two reference workers each: several evaluations share the machine's 16 cores.
    jobs = [(f"honest #{i + 1}", honest, {"reference_workers": 2}) for i in range(honest_repeats)] + [
        (f"rarely_wrong #{i + 1}", wrong, {"reference_workers": 2}) for i in range(wrong_repeats)
    ]
    outcomes = _run_all(jobs, parallel, "verdicts")
    for kind in ("honest", "rarely_wrong"):
        verdicts = [o["verdict"] for o in outcomes if o["label"].startswith(kind)]
        print(
            f"== {kind}: {verdicts.count('pass')} pass, {verdicts.count('incorrect')} incorrect, "
            f"{len(verdicts) - verdicts.count('pass') - verdicts.count('incorrect')} other, of {len(verdicts)}"
        )
    _save("verdicts", outcomes)


def broken_variants(parallel: int) -> None:
    """Every variant of the coverage table, each broken in one part of the math: each must
    fail, by the check the suite names, at full scale."""
    names = sorted({name for names in suite.PARTS.values() for name in names})
    # Each fails on the fixed seeds, checked before the secret ones: two secret cases suffice.
    jobs = [
        (name, _candidate(name, suite.BROKEN[name][0]), {"reference_workers": 1, "hidden_seeds": 2}) for name in names
    ]
    outcomes = _run_all(jobs, parallel, "broken")
    caught = 0
    for outcome in outcomes:
        _, verdict, check = suite.BROKEN[outcome["label"]]
        outcome["expected"] = f"{verdict.value} {check}"
        outcome["caught"] = outcome["verdict"] == verdict.value and outcome["reason"].startswith(check + ":")
        caught += outcome["caught"]
    print(
        f"== broken variants caught at full scale: {caught} of {len(outcomes)}"
        + "".join(
            f"\n   NOT CAUGHT {o['label']}: {o['verdict']} {o['reason'][:200]}" for o in outcomes if not o["caught"]
        )
    )
    _save("broken", outcomes)


def _save(name: str, outcomes: list[dict]) -> None:
    path = OUT / "verdicts.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    record[name] = outcomes
    path.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    os.environ.setdefault(LEASE_DIR_ENV, tempfile.mkdtemp(prefix="kagent-leases-"))
    if sys.argv[1] == "aa":
        aa_runs(json.loads(sys.argv[2]))
    elif sys.argv[1] == "verdicts":
        repeated_verdicts(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    else:
        broken_variants(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
