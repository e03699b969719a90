"""How long `kagent report` takes on a run of 300 turns, and how large its page is.

Usage: python lab/scripts/report_300_turns.py [--turns 300] [--repeat 3] [--keep FOLDER]

Builds the run with tests/long_run.py (a long run's folder through kagent's own writers), then
times the whole `kagent report` process, --repeat times, and prints the times and the page's size.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from long_run import KAGENT, build_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the run in this folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = (args.keep or Path(tmp)) / f"synthetic-{args.turns}-turns"
        started = time.perf_counter()
        build_run(run_dir, args.turns)
        trace = run_dir / "trace.jsonl"
        print(
            f"built {run_dir.name}: {len(trace.read_bytes().splitlines()):,} events, trace "
            f"{trace.stat().st_size / 1e6:.1f} MB, {len(list((run_dir / 'blobs').glob('*')))} blobs, in "
            f"{time.perf_counter() - started:.0f} s"
        )
        walls, cpus = [], []
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([KAGENT, "report", str(run_dir)], check=True, capture_output=True)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        page = run_dir / "report.html"
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        print(f"machine: {os.cpu_count()} CPUs, load average {load} (1, 5, 15 min) after the runs")
        print(
            f"`kagent report` (the whole process), {args.repeat} runs: wall {', '.join(f'{w:.2f}' for w in walls)} s "
            f"(median {statistics.median(walls):.2f} s); CPU {', '.join(f'{c:.2f}' for c in cpus)} s"
        )
        print(f"page: {page.stat().st_size / 1e6:.2f} MB ({page})")


if __name__ == "__main__":
    main()
