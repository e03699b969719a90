"""How long `kagent resume` takes on a run of a few hundred events.

Usage: python lab/scripts/resume_time.py [EVENTS]
Starts a scripted session (cheap tools: design and list_files) with `kagent run`, kills it
with SIGKILL once its trace holds EVENTS events, then times `kagent resume` (the whole
process, which re-reads the trace, rebuilds the conversation, puts the workspace back and
drives the few turns left) and, in process, the rebuild alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kagent.agent.lifecycle.resume import rebuild
from kagent.agent.storage.trace import read_trace

KAGENT = str(Path(sys.executable).parent / "kagent")


def main() -> None:
    target = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        turns = target // 6 + 5  # about six events a turn
        script = [
            {
                "tool_calls": [
                    {"name": "design", "arguments": {"hypothesis": f"idea {i}", "predicted": "1x"}},
                    {"name": "list_files", "arguments": {}},
                ]
            }
            for i in range(turns)
        ]
        script.append({"tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]})
        (folder / "script.json").write_text(json.dumps(script))
        env = {**os.environ, "KAGENT_RUNS": str(folder / "runs")}
        run = subprocess.Popen(
            [
                KAGENT,
                "run",
                "02_kimi_linear_decode",
                "--model",
                f"scripted:{folder / 'script.json'}",
                "--budget",
                "30m",
                "--device",
                "cpu",
                "--quiet",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        while run.poll() is None:
            traces = list((folder / "runs").glob("*/trace.jsonl"))
            if traces and len(traces[0].read_bytes().splitlines()) >= target:
                run.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
        run.wait()
        trace = traces[0]
        events = read_trace(trace).events
        started = time.perf_counter()
        rebuild(events, trace.parent)
        rebuild_ms = (time.perf_counter() - started) * 1e3
        started = time.perf_counter()
        resumed = subprocess.run([KAGENT, "resume", trace.parent.name, "--quiet"], env=env, capture_output=True)
        resume_s = time.perf_counter() - started
        final = len(read_trace(trace).events)
    print(f"killed at {len(events)} events; rebuilding the conversation from them: {rebuild_ms:.1f} ms")
    print(
        f"`kagent resume` (whole process: start, rebuild, workspace put back, the remaining turns, "
        f"the end; {final - len(events)} more events): {resume_s:.2f} s, exit {resumed.returncode}"
    )


if __name__ == "__main__":
    main()
