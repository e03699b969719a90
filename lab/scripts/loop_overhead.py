"""The agent loop's own overhead, measured on a scripted session (no GPU, no model service).

Usage: python lab/scripts/loop_overhead.py [TURNS]
Prints: the time one trace event takes to append (flushed and fsync'ed), one checkpoint
(commit + attempt ref + best tag) in a workspace, and the loop's wall time per turn for a
scripted session whose tools cost next to nothing (design and list_files).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kagent.agent.lifecycle.runs import start_run
from kagent.agent.settings import Budget, RunSettings
from kagent.agent.storage.trace import TraceWriter, UserNotice
from kagent.agent.storage.workspace import Workspace
from kagent.tasks import resolve_task


def trace_append_ms(count: int, folder: Path) -> list[float]:
    writer = TraceWriter(folder)
    times = []
    for i in range(count):
        started = time.perf_counter()
        writer.append(UserNotice(turn=i, text="x" * 400))
        times.append((time.perf_counter() - started) * 1e3)
    writer.close()
    return times


def checkpoint_ms(count: int, folder: Path) -> list[float]:
    task = resolve_task("02_kimi_linear_decode")
    workspace = Workspace.create(folder / "workspace", task.files())
    times = []
    for i in range(count):
        (workspace.root / "solution.py").write_text(f"# version {i}\n" * 50)
        started = time.perf_counter()
        sha = workspace.commit(f"attempt {i + 1}", {"Kagent-Attempt": str(i + 1), "Kagent-Verdict": "pass"})
        workspace.mark_attempt(i + 1, sha)
        workspace.tag_best(sha)
        times.append((time.perf_counter() - started) * 1e3)
    return times


def session_turn_ms(turns: int, folder: Path) -> float:
    script = [
        {
            "tool_calls": [
                {"name": "design", "arguments": {"hypothesis": f"idea {i}", "predicted": "1.0x"}},
                {"name": "list_files", "arguments": {}},
            ]
        }
        for i in range(turns)
    ]
    script.append({"tool_calls": [{"name": "finish", "arguments": {"summary": "measured the loop"}}]})
    path = folder / "script.json"
    path.write_text(json.dumps(script))
    options = RunSettings(
        task="02_kimi_linear_decode",
        model=f"scripted:{path}",
        budget=Budget(wall_s=3600),
        device="cpu",
        scale="smoke",
        runs_root=folder / "runs",
    )
    started = time.perf_counter()
    _, report = start_run(options)
    total = time.perf_counter() - started
    # The final re-verification does not run (no attempt was benchmarked): the time is the loop's.
    return total / report.turns * 1e3


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        appends = trace_append_ms(1000, folder / "trace")
        commits = checkpoint_ms(50, folder)
        per_turn = session_turn_ms(turns, folder)
    print(
        f"trace append (fsync): median {statistics.median(appends):.3f} ms, "
        f"p90 {statistics.quantiles(appends, n=10)[-1]:.3f} ms over {len(appends)} events"
    )
    print(
        f"checkpoint (commit + ref + tag): median {statistics.median(commits):.1f} ms, "
        f"p90 {statistics.quantiles(commits, n=10)[-1]:.1f} ms over {len(commits)} attempts"
    )
    print(
        f"loop wall time per turn (scripted model, 2 cheap tools a turn, {turns} turns, events and "
        f"status written): {per_turn:.1f} ms"
    )


if __name__ == "__main__":
    main()
