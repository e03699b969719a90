"""Whole evaluations of the flagship on a GPU, for scripts/gpu_timing_truth.sh: A/A runs
(per context, with their wall time and phases) and verdicts repeated on unchanged files.

    python3 scripts/gpu_evaluations.py aa '[["aa_1", {}], ["aa_r12", {"rounds": 12}]]'
    python3 scripts/gpu_evaluations.py verdicts 4 10   # the reference 4 times, the rarely wrong one 10

Results go to $OUT (each A/A run's EvalResult as JSON); the reference weights' cache is
$KAGENT_HOME, so every evaluation after the first is warm."""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from kagent.sandbox.evaluate import EvalOptions, evaluate
from kagent.tasks import resolve_task

OUT = Path(os.environ["OUT"])
KIMI = resolve_task("02_kimi_linear_decode")


def full_scale(**extra) -> EvalOptions:
    return EvalOptions(device="cuda", scale="full", cache_dir=Path(os.environ["KAGENT_HOME"]), timeout_s=600.0,
                       **extra)


def aa_runs(runs: list[tuple[str, dict]]) -> None:
    for label, extra in runs:
        started = time.monotonic()
        result = evaluate(KIMI, None, full_scale(mode="aa", **extra))
        (OUT / f"{label}.json").write_text(result.model_dump_json(indent=1))
        print(f"== {label} {extra}: {result.verdict.value} score={result.score} wall={result.wall_seconds:.1f}s "
              f"(process {time.monotonic() - started:.1f}s) phases={result.phases}")
        for t in result.timings:
            print(f"   ctx {t.context_len}: {t.speedup:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}] "
                  f"base {t.baseline.median_ms:.3f} cand {t.candidate.median_ms:.3f} isolated "
                  f"{t.candidate_isolated_ms} blocks of {t.block_steps}/{t.candidate_block_steps}"
                  f"x{t.candidate_chains_per_request} n={t.candidate.n} base p10-p90 {t.baseline.p10_ms:.2f}-"
                  f"{t.baseline.p90_ms:.2f} cand p10-p90 {t.candidate.p10_ms:.2f}-{t.candidate.p90_ms:.2f}")


def repeated_verdicts(honest_repeats: int, wrong_repeats: int) -> None:
    """The reference as a solution, and the test suite's solution wrong on 1 input in 10,
    checked ``honest_repeats`` and ``wrong_repeats`` times."""
    source = (KIMI.path / "reference.py").read_text()
    quotes = "'" * 3
    test = Path("tests/test_eval_kimi.py").read_text()
    rarely_wrong = re.search(rf"^RARELY_WRONG = {quotes}(.*?){quotes}", test, re.S | re.M).group(1)
    for label, text, repeats in (("reference", source, honest_repeats),
                                 ("rarely_wrong", source + "\n" + rarely_wrong, wrong_repeats)):
        folder = Path(f"/tmp/verdicts/{label}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "solution.py").write_text(text)
        for i in range(repeats):
            started = time.monotonic()
            result = evaluate(KIMI, folder / "solution.py", full_scale(mode="check"))
            print(f"== {label} #{i + 1}: {result.verdict.value} in {time.monotonic() - started:.1f}s: "
                  f"{result.reason[:200]}")


if __name__ == "__main__":
    if sys.argv[1] == "aa":
        aa_runs(json.loads(sys.argv[2]))
    else:
        repeated_verdicts(int(sys.argv[2]), int(sys.argv[3] if len(sys.argv) > 3 else sys.argv[2]))
