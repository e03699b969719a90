"""Where in its timing an A/A evaluation's two processes part: the ratio by round.

Each timed context's pairs are cut into its rounds (``rounds`` in the result: one chain of the
baseline's each), and the median ratio baseline/candidate of the pairs in each round is
printed, per context and as the median and mean over all the contexts read. In an A/A run both
sides run the same code, so every round should read 1.00; a round that stands apart shows
something one process pays and the other does not (2026-12-03: the first round at 1.034 over
42 H200 contexts, the baseline's allocator meeting sizes the solution's process had met in
the checks).

    python3 lab/scripts/aa_rounds.py lab/measurements/2026-12-03-h200-round-*/**/aa_*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def round_ratios(timing: dict) -> list[float]:
    """The median baseline/candidate ratio of the pairs of each round of one timed context."""
    baseline, candidate = timing["baseline_samples_ms"], timing["candidate_samples_ms"]
    rounds = int(timing.get("rounds") or 1)
    per_round = len(baseline) // rounds
    return [
        statistics.median(
            b / c
            for b, c in zip(
                baseline[i * per_round : (i + 1) * per_round],
                candidate[i * per_round : (i + 1) * per_round],
                strict=True,
            )
        )
        for i in range(rounds)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="EvalResult JSON files of A/A evaluations")
    options = parser.parse_args(argv)
    table = []
    for path in options.results:
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            parser.error(f"{path}: not a readable result file ({err})")
        for timing in result.get("timings") or []:
            ratios = round_ratios(timing)
            table.append(ratios)
            print(f"{path}: ctx {timing.get('context_len')}: " + " ".join(f"{r:.3f}" for r in ratios))
    if not table:
        print("no timed contexts in these files", file=sys.stderr)
        return 1
    width = min(len(row) for row in table)
    columns = [[row[i] for row in table] for i in range(width)]
    print(
        f"over {len(table)} contexts, by round: median "
        + " ".join(f"{statistics.median(col):.3f}" for col in columns)
        + "; mean "
        + " ".join(f"{statistics.fmean(col):.3f}" for col in columns)
    )
    first_apart = sum(row[0] > statistics.median(row[1:]) for row in table if len(row) > 1)
    print(f"the first round above the median of the others in {first_apart} of {len(table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
