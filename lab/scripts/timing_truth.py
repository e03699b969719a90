"""Does the harness's clock tell the truth about a fast kernel? (issue 10)

Times lab/scripts/stream_weights.py (one launch per step that streams all of the flagship's int4
weights) three ways and prints them side by side:

- in this process, as a user's own decode loop would: consecutive steps between two CUDA
  events (the plain loop), single steps synchronized around (isolated), and the profiler's
  device time of one step;
- through the harness's own timing code, unchanged (sandbox/harness/timing.py, as
  sandbox/harness/mega.py's ``performance`` runs it): the kernel's process against the
  baseline's, in alternating blocks, once per least block size asked for. Only the correctness checks are left out
  (the kernel computes nothing right), so nothing here can be signed or scored.

Then it says whether the harness's steady time per step is within 3% of the plain loop and
10% of the device time, and how wide the intervals of its steady time and of the speedup are. It prints JSON lines and
writes the whole record to ``--out``.

    python lab/scripts/timing_truth.py --device cuda --contexts 2048 8192 --block-steps 1 8
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kagent.sandbox.bundle import HARNESS
from kagent.sandbox.results import Stats
from kagent.tasks import KINDS, resolve_task

# The harness as an evaluation runs it: a pristine copy, imported as kagent_harness (the
# solution's process imports that name too).
_LIB = Path(tempfile.mkdtemp(prefix="kagent-timing-truth-"))
HARNESS.write(_LIB / "kagent_harness")
sys.path.insert(0, str(_LIB))
from kagent_harness import launches, remote, timing  # noqa: E402
from kagent_harness.job import Job  # noqa: E402
from kagent_harness.kinds import Kind  # noqa: E402
from kagent_harness.loading import load_module  # noqa: E402
from kagent_harness.mega import MegaEvaluation  # noqa: E402
from kagent_harness.protocol import Channel  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAIN_LOOP_STEPS = 32
REPEATS = 5
ISOLATED_STEPS = 20
# What the issue asks of the harness's steady time for such a kernel.
PLAIN_LOOP_TOLERANCE = 0.03
DEVICE_TIME_TOLERANCE = 0.10
INTERVAL_HALF_WIDTH = 0.03


class RequestLog:
    """Every request's figures (the referee's clock, the probe, and the contestant process's
    own view), to see where a block's time goes beyond the steps themselves."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self._request = remote.ContestantProcess.request

    def __enter__(self) -> RequestLog:
        log, request = self, self._request

        def logged(process, message: dict, what: str) -> dict:
            reply = request(process, message, what)
            log.entries.append(
                {
                    "who": process.who,
                    "op": message.get("op"),
                    "steps": message.get("steps"),
                    "chains": message.get("chains"),
                    "first": message.get("record_from"),
                    "fresh": message.get("fresh"),
                    **{k: reply.get(k) for k in ("answered_ms", "probe_ms", "block_ms", "device_ms", "handled_ms")},
                }
            )
            return reply

        remote.ContestantProcess.request = logged
        return self

    def __exit__(self, *exc) -> None:
        remote.ContestantProcess.request = self._request

    def summary(self) -> dict:
        """Medians, per contestant and kind of request, of what the referee saw beyond the
        process's own work."""
        out = {}
        for who in ("solution", "baseline"):
            mine = [e for e in self.entries if e["who"] == who and e["answered_ms"] is not None]
            for label, chosen in (
                ("noop", [e for e in mine if e["op"] == "noop"]),
                ("stage", [e for e in mine if e["op"] == "stage"]),
                ("chain", [e for e in mine if e["op"] == "chain" and e["steps"] > 1]),
                ("single_step", [e for e in mine if e["op"] == "chain" and e["steps"] == 1]),
            ):
                if not chosen:
                    continue
                out[f"{who}_{label}"] = {
                    "n": len(chosen),
                    **{
                        name: statistics.median(value(e) for e in chosen)
                        for name, value in (
                            ("answered_ms", lambda e: e["answered_ms"]),
                            ("transport_ms", lambda e: e["answered_ms"] - e["handled_ms"]),
                            ("probe_ms", lambda e: e["probe_ms"]),
                            ("handled_beyond_events_ms", lambda e: e["handled_ms"] - (e["device_ms"] or 0.0)),
                        )
                    },
                }
        return out


class _Unchecked:
    """Stands in for a validated chain: no outputs to repeat, no near-tie."""

    outputs: list = []

    def first_near_tie(self) -> None:
        return None


class TimingOnly(MegaEvaluation):
    """The harness's evaluation with its correctness checks left out, its timing unchanged."""

    def correctness(self) -> bool:
        self.first_chains = {shape["context_len"]: _Unchecked() for shape in self.timing_shapes}
        return True


def solution_folder(task_dir: Path) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="kagent-stream-"))
    shutil.copy(HERE / "stream_weights.py", folder / "solution.py")
    shutil.copy(task_dir / "reference.py", folder / "kimi_reference.py")
    return folder


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _elapsed_ms(device: torch.device, work) -> float:
    """``work``'s milliseconds: CUDA events around it on a GPU, the host's clock on the CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    begin = time.perf_counter()
    work()
    return (time.perf_counter() - begin) * 1e3


def in_process(folder: Path, task_dir: Path, scale: str, contexts: list[int], device: torch.device) -> dict:
    """The kernel in this process: the plain loop, isolated steps and the profiler, per context."""
    sys.path.insert(0, str(folder))
    try:
        reference = load_module("kimi_reference", folder / "kimi_reference.py")
        shapes = load_module("_timing_truth_shapes", task_dir / "shapes.py")
        solution = load_module("_timing_truth_solution", folder / "solution.py")
    finally:
        sys.path.remove(str(folder))
    chosen = shapes.SHAPES if scale == "full" else shapes.SMOKE_SHAPES
    figures = {}
    with torch.no_grad():
        model = None
        for shape in chosen:
            ctx = shape["context_len"]
            if ctx not in contexts:
                continue
            cfg = reference.build_config(shape)
            if model is None:
                model = solution.Model(cfg).to(device).eval()
                for payload in model.buffers():  # random bytes to stream, as weights would be
                    if payload.dtype == torch.uint8:
                        payload.random_(0, 256)
            hidden = reference.init_token(cfg, 0, device=device)
            state = reference.init_state(cfg, ctx, 0, device=device)
            chain = [hidden, state]

            def steps(count: int, chain: list = chain, model=model) -> None:
                for _ in range(count):
                    chain[:] = model.step(*chain)

            steps(3)  # compiles and warms
            _synchronize(device)
            plain = [_elapsed_ms(device, lambda: steps(PLAIN_LOOP_STEPS)) / PLAIN_LOOP_STEPS for _ in range(REPEATS)]
            isolated = []
            for _ in range(ISOLATED_STEPS):
                _synchronize(device)
                isolated.append(timing.wall_ms(device, lambda: steps(1)))
            profiled = launches.count_launches(device, lambda: steps(1))
            figures[ctx] = {
                "plain_loop_ms": statistics.median(plain),
                "plain_loop_all_ms": plain,
                "isolated_ms": statistics.median(isolated),
                "profiler_device_ms": profiled.get("device_ms"),
                "launches": profiled.get("launches"),
            }
        model = None  # its weights copy goes before the harness loads its own
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return figures


def through_harness(
    folder: Path,
    task_dir: Path,
    scale: str,
    contexts: list[int],
    device: torch.device,
    block_steps: int,
    rounds: int,
    cache: Path,
) -> dict:
    """The harness's own timing of the kernel (a process of its own) against the baseline."""
    home = Path(tempfile.mkdtemp(prefix="kagent-stream-home-"))
    # The cache's entries are read whoever built them (no identity), so the evaluations' warm
    # cache serves here too; one secret case, drawn here (no reference workers).
    job = Job(
        kind=Kind(**KINDS["mega"].harness()),
        mode="eval",
        task=str(task_dir),
        solution=str(folder / "solution.py"),
        scale=scale,
        device=str(device),
        timeout_s=3600,
        hang_after_s=600,
        hidden_seeds=1,
        cache_dir=str(cache),
        cache_staging=None,
        cache_identity=None,
        contexts=contexts,
        rounds=rounds,
        warmup=2,
        block_steps=block_steps,
        reference_workers=0,
        solution_home=str(home),
    )
    channel = Channel(None)
    with RequestLog() as log:
        evaluation = TimingOnly(job, channel)
        try:
            evaluation.run()
        finally:
            evaluation.close_solution()
    failed = [e for e in channel.sent if e["event"] == "check" and e["status"] != "pass"]
    if failed:
        raise SystemExit(f"the harness stopped: {failed[0]['name']}: {failed[0]['reason']}")
    internal = [e for e in channel.sent if e["event"] == "internal_error"]
    if internal:
        raise SystemExit(f"the harness failed: {internal[0]['reason']}\n{internal[0].get('details', '')}")
    facts = next(e for e in channel.sent if e["event"] == "check" and e["name"] == "load")
    return {
        "timings": {e["context_len"]: e for e in channel.sent if e["event"] == "timing"},
        "launches": [e for e in channel.sent if e["event"] == "launches"],
        "request_floor_ms": facts.get("request_floor_ms"),
        "probe_idle_ms": facts.get("probe_idle_ms"),
        "requests": log.entries,
        "request_summary": log.summary(),
    }


def verdicts(own: dict, harness: dict) -> dict:
    """The issue's three figures for one context and block size."""
    steady = harness["candidate"]["median_ms"]
    out = {
        "steady_ms": steady,
        "speedup": harness["speedup"],
        "ci_low": harness["ci_low"],
        "ci_high": harness["ci_high"],
        "candidate_isolated_ms": harness.get("candidate_isolated_ms"),
        "candidate_self_timed_ms": harness.get("candidate_self_timed_ms"),
        "vs_plain_loop": steady / own["plain_loop_ms"] - 1,
        "interval_half_width": (harness["ci_high"] - harness["ci_low"]) / 2 / harness["speedup"],
        "steady_interval_half_width": Stats(**harness["candidate"]).median_half_width,
    }
    out["within_plain_loop_tolerance"] = abs(out["vs_plain_loop"]) <= PLAIN_LOOP_TOLERANCE
    # Both intervals, each against the issue's ±3%: the steady ms per step's own (how precisely
    # the kernel was measured) and the speedup's (which also carries the baseline's noise).
    out["steady_interval_within_tolerance"] = out["steady_interval_half_width"] < INTERVAL_HALF_WIDTH
    out["interval_within_tolerance"] = out["interval_half_width"] < INTERVAL_HALF_WIDTH
    if own.get("profiler_device_ms"):
        out["vs_device_time"] = steady / own["profiler_device_ms"] - 1
        out["within_device_time_tolerance"] = abs(out["vs_device_time"]) <= DEVICE_TIME_TOLERANCE
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", default="full", choices=["full", "smoke"])
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument(
        "--block-steps",
        type=int,
        nargs="+",
        default=[timing.DEFAULT_BLOCK_STEPS],
        help="the fewest steps per timed block, one harness run each",
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cache", type=Path, default=None, help="the reference's cache (default: a fresh folder)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    task_dir = resolve_task("02_kimi_linear_decode").path
    folder = solution_folder(task_dir)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="kagent-stream-cache-"))
    record = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "scale": args.scale,
        "in_process": in_process(folder, task_dir, args.scale, args.contexts, device),
        "harness": {},
    }
    print(json.dumps({"in_process": record["in_process"]}))
    for block_steps in args.block_steps:
        harness = through_harness(folder, task_dir, args.scale, args.contexts, device, block_steps, args.rounds, cache)
        per_context = {ctx: verdicts(record["in_process"][ctx], t) for ctx, t in harness["timings"].items()}
        record["harness"][block_steps] = {**harness, "verdicts": per_context}
        print(
            json.dumps(
                {
                    "block_steps": block_steps,
                    "requests": harness["request_summary"],
                    "probe_idle_ms": harness["probe_idle_ms"],
                }
            )
        )
        for ctx, v in per_context.items():
            print(
                json.dumps(
                    {
                        "block_steps": block_steps,
                        "context_len": ctx,
                        **v,
                        "plain_loop_ms": record["in_process"][ctx]["plain_loop_ms"],
                        "profiler_device_ms": record["in_process"][ctx]["profiler_device_ms"],
                        "request_floor_ms": harness["request_floor_ms"],
                    }
                )
            )
    if args.out:
        args.out.write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
