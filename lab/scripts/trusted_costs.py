"""Where a decode task's trusted work goes, one piece at a time, in one process.

A warm evaluation of the flagship spends about 1 s making its fixed cases ("reference_outputs")
and 4-6 s drawing its 48 secret cases with four reference workers ("secret_cases"), both on the
way to the solution's first step. This times the pieces those are made of, each synchronized
on the device, in the referee's own code (mega.case_inputs, reference_case, draw_secret_case):

- a case's inputs from init_state alone, and from the salient state, per check context;
- the reference's step on them, and its decision margin;
- secret cases drawn as an evaluation draws them, with the seeds drawn again at a near-tie;
- a profile of a few draws (the functions that took most of their time).

It builds the reference from the cache that an evaluation on this machine left (KAGENT_HOME;
anything missing is built, which takes longer), so run it after one.

    python3 lab/scripts/trusted_costs.py --device cuda [--scale full] [--draws 12]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

from kagent.sandbox.harness import mega
from kagent.sandbox.harness.loading import DiskCache

TASK = Path(mega.__file__).resolve().parents[2] / "tasks" / "02_kimi_linear_decode"


def seconds(device: torch.device, work) -> tuple[float, object]:
    """``work()``'s result and its seconds, the device synchronized on both sides."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    value = work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", default="full")
    parser.add_argument("--draws", type=int, default=12, help="secret cases drawn (as an evaluation's kinds)")
    parser.add_argument("--repeats", type=int, default=3, help="timings of each piece (the median is printed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    device = torch.device(args.device)
    figures: dict = {
        "device": args.device,
        "scale": args.scale,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }
    with torch.no_grad():
        task = mega.Task(TASK, args.scale, device)
        home = os.environ.get("KAGENT_HOME")
        cache = DiskCache(Path(home) if home else None)
        built, (reference, _) = seconds(device, lambda: mega.build_reference(task, cache))
        figures["reference_built_s"] = round(built, 3)
        print(f"reference built or loaded in {built:.2f} s (cache hits {cache.hits}, misses {cache.misses})")
        pieces: dict[str, float] = {}
        for context_len in task.check_contexts:
            for salient in (False, True):
                kind = f"ctx {context_len}{' salient' if salient else ''}"
                made, ran = [], []
                for seed in range(args.repeats):
                    t, inputs = seconds(
                        device,
                        lambda: mega.case_inputs(
                            task,
                            reference,
                            context_len,  # noqa: B023
                            seed,  # noqa: B023
                            salient,  # noqa: B023
                        ),
                    )
                    made.append(t)
                    t, _ = seconds(device, lambda: mega.reference_case(task, reference, *inputs))  # noqa: B023
                    ran.append(t)
                pieces[f"{kind}: inputs"] = statistics.median(made)
                pieces[f"{kind}: reference step and margin"] = statistics.median(ran)
        for name, value in pieces.items():
            print(f"{name:44s} {value * 1e3:9.1f} ms")
        figures["pieces_ms"] = {name: round(value * 1e3, 2) for name, value in pieces.items()}
        kinds = mega.secret_case_kinds(task, args.draws)
        draws = []
        for context_len, salient in kinds:
            t, case = seconds(device, lambda: mega.draw_secret_case(task, reference, context_len, salient))  # noqa: B023
            draws.append(
                {"context_len": context_len, "salient": salient, "ms": round(t * 1e3, 1), "redrawn": case.redrawn}
            )
        total = sum(d["ms"] for d in draws)
        print(
            f"{len(draws)} secret cases drawn in {total / 1e3:.2f} s ({total / len(draws):.0f} ms a case, "
            f"{sum(d['redrawn'] for d in draws)} seeds drawn again)"
        )
        for d in draws:
            print(
                f"  ctx {d['context_len']:6d}{' salient' if d['salient'] else '        '} {d['ms']:8.1f} ms"
                f"  drawn again {d['redrawn']}"
            )
        figures["draws"] = draws
        profiler = cProfile.Profile()
        profiler.enable()
        for context_len, salient in kinds[:6]:
            mega.draw_secret_case(task, reference, context_len, salient)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        profiler.disable()
        shown = io.StringIO()
        pstats.Stats(profiler, stream=shown).sort_stats("cumulative").print_stats(30)
        print(shown.getvalue())
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
