"""The lab's sweep figures (lab/scripts/sweep_figures.py): what lab/scripts/gpu_sweep.sh reports
from a sweep's record."""

from __future__ import annotations

import json
from pathlib import Path

from lab_isolation import isolated_env  # noqa: F401  (autouse)


def test_the_sweep_figures_count_each_baseline_measurement_once(tmp_path):
    """lab/scripts/sweep_figures.py's A/A of a sweep: a member whose baseline call read another
    member's measurement (one lease folder, tools/baseline.py) adds no second A/A of it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "sweep_figures", Path(__file__).parents[1] / "scripts" / "sweep_figures.py"
    )
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)

    def baseline_call(data: dict) -> str:
        return json.dumps({"type": "tool_finished", "name": "baseline", "is_error": False, "data": data})

    timings = [{"label": "ctx 16", "speedup": 0.99}, {"label": "ctx 32", "speedup": 1.01}]
    (tmp_path / "measured").mkdir()
    (tmp_path / "measured" / "trace.jsonl").write_text(baseline_call({"timings": timings}) + "\n")
    (tmp_path / "read").mkdir()
    (tmp_path / "read" / "trace.jsonl").write_text(
        baseline_call({"timings": timings, "shared_from": {"holder": "m01", "measured_at": 0.0, "lease": "vm-gpu0"}})
        + "\n"
    )
    (only,) = figures.member_aa(tmp_path / "measured")
    assert only["per_shape"] == {"ctx 16": 0.99, "ctx 32": 1.01} and abs(only["score"] - (0.99 * 1.01) ** 0.5) < 1e-12
    assert figures.member_aa(tmp_path / "read") == []
