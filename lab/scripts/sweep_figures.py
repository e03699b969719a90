"""The figures of `kagent sweep` for the lab notebook (lab/notebook/) (lab/scripts/gpu_sweep.sh prints them).

For each sweep folder: its running time; each GPU's busy and timed time per hour (from its
lease's records) and nvidia-smi's utilization; every pair of holds where an exclusive one
overlapped another (there must be none); each member's A/A, from its `baseline` calls (the
task's baseline timed against itself, inside the sweep). With --alone, the busy time per hour
of each sweep over that of the sweep run alone, and with --aa the A/A of an evaluation outside
any sweep, for comparison.

    python3 lab/scripts/sweep_figures.py SWEEP_DIR [SWEEP_DIR ...] [--alone SWEEP_DIR] [--aa RESULT.json]

Prints one JSON object; exit 0 when every check named in it holds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Optional

from kagent.agent.sweep.board import summarize
from kagent.agent.sweep.record import fold, read_record
from kagent.agent.sweep.usage import overlapping_exclusive
from kagent.sandbox.lease import read_records

AA_TOLERANCE = 0.02
BUSY_RATIO_TARGET = 3.0


def _geomean(values: list[float]) -> Optional[float]:
    """None where a value is not positive: no geometric mean, and a check that fails (a loaded
    CPU's A/A has read -0.58, its blocks' times less the request's cost below zero)."""
    if not values or min(values) <= 0:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def member_aa(run_dir: Path) -> list[dict]:
    """Each baseline call's A/A in a member's trace: per shape and over the shapes. A call
    that read another member's measurement of the task (tools/baseline.py) is that member's."""
    found = []
    for line in (run_dir / "trace.jsonl").read_text().splitlines():
        event = json.loads(line)
        if (
            event.get("type") == "tool_finished"
            and event["name"] == "baseline"
            and not event["is_error"]
            and "shared_from" not in event["data"]
        ):
            per_shape = {t["label"]: t["speedup"] for t in event["data"]["timings"]}
            found.append({"per_shape": per_shape, "score": _geomean(list(per_shape.values()))})
    return found


def sweep_figures(sweep_dir: Path) -> dict:
    summary = summarize(sweep_dir)
    view = fold(read_record(sweep_dir))
    overlaps = []
    for path in sorted((sweep_dir / "leases").glob("*.jsonl")):
        for first, second in overlapping_exclusive(read_records(path)):
            overlaps.append({"lease": path.stem, "first": first.model_dump(), "second": second.model_dump()})
    members = [{"run_id": m.run_id, "state": m.state, "aa": member_aa(sweep_dir / m.run_dir)} for m in summary.members]
    return {
        "sweep": str(sweep_dir),
        "members": len(summary.members),
        "per_gpu": summary.spec.per_gpu,
        "running_s": round(sum(b - a for a, b in view.segments), 1),
        "gpus": [
            {
                **u.model_dump(),
                "busy_per_hour_s": round(u.busy_fraction * 3600, 1),
                "sampled_busy_per_hour_s": round(u.sampled_utilization * 3600, 1)
                if u.sampled_utilization is not None
                else None,
            }
            for u in summary.gpus
        ],
        "overlapping_holds": overlaps,
        "member_aa": members,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--alone", type=Path, help="A sweep of one member: the busy time others are compared to")
    parser.add_argument("--aa", type=Path, help="An A/A evaluation's result outside any sweep (kagent eval --aa)")
    args = parser.parse_args()
    report: dict = {"sweeps": [sweep_figures(path) for path in args.sweeps], "checks": {}}
    checks = report["checks"]
    alone = sweep_figures(args.alone) if args.alone else None
    every = [*report["sweeps"], *([alone] if alone else [])]
    checks["no_timed_hold_overlaps_another"] = all(not s["overlapping_holds"] for s in every)
    scores = [aa["score"] for s in every for m in s["member_aa"] for aa in m["aa"]]
    if scores:
        report["aa_scores_in_sweeps"] = [round(s, 4) if s is not None else None for s in scores]
        checks[f"aa_within_{AA_TOLERANCE}"] = all(s is not None and abs(s - 1) <= AA_TOLERANCE for s in scores)
    if args.aa:
        result = json.loads(args.aa.read_text())
        report["aa_alone"] = {
            "score": result.get("score"),
            "per_shape": {t["label"]: t["speedup"] for t in result.get("timings", [])},
        }
    if alone:
        report["alone"] = alone
        for key in ("busy_per_hour_s", "sampled_busy_per_hour_s"):
            base = sum(g[key] or 0 for g in alone["gpus"])
            ratios = [round(sum(g[key] or 0 for g in s["gpus"]) / base, 3) if base else None for s in report["sweeps"]]
            report[f"{key}_over_alone"] = ratios
        checks[f"busy_at_least_{BUSY_RATIO_TARGET:g}x_alone"] = all(
            r is not None and r >= BUSY_RATIO_TARGET for r in report["busy_per_hour_s_over_alone"]
        )
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
