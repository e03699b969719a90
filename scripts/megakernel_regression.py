"""The harness against kagent's own megakernel, on a GPU (issue 14's regression test).

kagent's single-launch kernel (examples/02_kimi_linear_decode/) is a positive control: a fast
kernel whose true speed is known from a plain chain loop in its own process (bench.py). The
harness must keep saying the same about it:

- every evaluation passes, with the same verdict each time (5 of 5 by default);
- one launch per step, counted by the profiler in the solution's process;
- at every context, the evaluation's steady time per step within 3% of the plain chain loop
  (the median of bench.py's rounds).

    python3 scripts/megakernel_regression.py run OUT [--repeats 5]   # bench.py, then the evaluations
    python3 scripts/megakernel_regression.py judge BENCH.json EVAL.json...   # the criteria alone

``run`` writes OUT/bench.json, OUT/eval_N.json and OUT/regression.json (the criteria, each with
its figures) and exits 1 when any criterion does not hold. scripts/gpu_megakernel_regression.sh
runs it on the lent GPU."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kagent.sandbox.results import EvalResult

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "02_kimi_linear_decode"
STEADY_TOLERANCE = 0.03


def plain_loop_ms(bench: dict) -> dict[int, float]:
    """bench.py's plain chain loop per context: the median of its rounds' ms per step."""
    return {row["context"]: statistics.median(row["ms_per_step"]) for row in bench["single_launch"]["chain"]}


def judge(bench: dict, evaluations: list[EvalResult], tolerance: float = STEADY_TOLERANCE) -> list[dict]:
    """Each criterion with whether it holds and the figures it was judged on."""
    loop = plain_loop_ms(bench)
    verdicts = [result.verdict.value for result in evaluations]
    failed = [result.reason for result in evaluations if result.verdict.value != "pass"]
    criteria = [{"criterion": "every evaluation passes", "holds": bool(verdicts) and not failed,
                 "verdicts": verdicts, "reasons": failed},
                {"criterion": f"the same verdict in {len(verdicts)} of {len(verdicts)}",
                 "holds": len(set(verdicts)) == 1, "verdicts": verdicts}]
    launches = [[report.launches for report in result.launches if report.who == "candidate"] for result in evaluations]
    criteria.append({"criterion": "one launch per step", "holds": all(counts == [1] for counts in launches),
                     "launches": launches})
    steady = []
    for i, result in enumerate(evaluations):
        for timing in result.timings:
            reference = loop.get(timing.context_len) if timing.context_len is not None else None
            if reference is None:
                steady.append({"evaluation": i + 1, "context": timing.context_len, "holds": False,
                               "why": "bench.py has no plain loop at this context"})
                continue
            off = timing.candidate.median_ms / reference - 1
            steady.append({"evaluation": i + 1, "context": timing.context_len, "steady_ms": timing.candidate.median_ms,
                           "plain_loop_ms": reference, "off": round(off, 4), "holds": abs(off) <= tolerance})
    timed = all(result.timings for result in evaluations) and bool(evaluations)
    criteria.append({"criterion": f"steady within {tolerance * 100:g}% of the plain chain loop at every context",
                     "holds": timed and all(row["holds"] for row in steady), "per_context": steady,
                     **({} if timed else {"why": "an evaluation has no timing"})})
    return criteria


def show(criteria: list[dict]) -> str:
    lines = []
    for criterion in criteria:
        lines.append(f"{'HOLDS' if criterion['holds'] else 'FAILS'}  {criterion['criterion']}")
        for row in criterion.get("per_context", []):
            figures = (f"steady {row['steady_ms']:.4f} ms, plain loop {row['plain_loop_ms']:.4f} ms, {row['off']:+.1%}"
                       if "off" in row else row["why"])
            lines.append(f"       evaluation {row['evaluation']}, ctx {row['context']}: {figures}")
        if "verdicts" in criterion:
            lines.append(f"       verdicts: {', '.join(criterion['verdicts'])}")
        if "launches" in criterion:
            lines.append(f"       launches per step: {criterion['launches']}")
        for reason in criterion.get("reasons", []):
            lines.append(f"       {reason[:300]}")
    return "\n".join(lines)


def run(out: Path, repeats: int, recording: bool = False) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    bench = subprocess.run([sys.executable, str(EXAMPLE / "bench.py"), "--out", str(out / "bench.json"),
                            *(["--recording"] if recording else [])],
                           capture_output=True, text=True, timeout=300)
    (out / "bench.log").write_text(bench.stdout + bench.stderr)
    print(f"bench.py: exit {bench.returncode} [{time.monotonic() - started:.0f} s]", flush=True)
    if bench.returncode != 0:
        raise SystemExit(f"bench.py failed; its log: {out / 'bench.log'}\n{(bench.stdout + bench.stderr)[-2000:]}")
    evaluations = []
    for i in range(repeats):
        path = out / f"eval_{i + 1}.json"
        done = subprocess.run([sys.executable, "-m", "kagent.agent.cli", "eval", "02_kimi_linear_decode", "--solution",
                               str(EXAMPLE / "solution.py"), "--device", "cuda", "--out", str(path)],
                              capture_output=True, text=True, timeout=300)
        if not path.exists():
            raise SystemExit(f"evaluation {i + 1} wrote no result (exit {done.returncode}):\n"
                             f"{(done.stdout + done.stderr)[-2000:]}")
        result = EvalResult.model_validate_json(path.read_text())
        evaluations.append(result)
        print(f"evaluation {i + 1}: {result.verdict.value}, score {result.score}, wall {result.wall_seconds:.1f} s "
              f"(exit {done.returncode}) [{time.monotonic() - started:.0f} s]", flush=True)
    return judge(json.loads((out / "bench.json").read_text()), evaluations)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    running = sub.add_parser("run")
    running.add_argument("out", type=Path)
    running.add_argument("--repeats", type=int, default=5)
    running.add_argument("--recording", action="store_true",
                         help="bench.py also times its loop with each step's hidden recorded, as timed chains do")
    judging = sub.add_parser("judge")
    judging.add_argument("bench", type=Path)
    judging.add_argument("evaluations", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "run":
        criteria = run(args.out, args.repeats, args.recording)
        (args.out / "regression.json").write_text(json.dumps(criteria, indent=1))
    else:
        try:
            criteria = judge(json.loads(args.bench.read_text()),
                             [EvalResult.model_validate_json(path.read_text()) for path in args.evaluations])
        except (OSError, ValueError, KeyError) as err:  # pydantic's ValidationError is a ValueError
            print(f"megakernel_regression: cannot judge these files: {type(err).__name__}: {err}"[:1000],
                  file=sys.stderr)
            return 2
    print(show(criteria))
    return 0 if all(criterion["holds"] for criterion in criteria) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
