#!/usr/bin/env bash
# The per-step watchdog on a GPU (issue 13): a Triton kernel that deadlocks on its second
# launch (lab/scripts/deadlock_solution.py: a grid barrier whose counter carries over from the
# first launch) evaluated by `kagent eval` at full scale. Without the watchdog it would be
# killed at the evaluation's limit with "no verdict"; with it the evaluation must end with
# verdict timeout, the diagnosis "likely a grid-barrier deadlock" (the GPU 100% busy, no
# memory traffic), and under 90 s after the solution was built.
# Needs the wheels in .whl/ (bash lab/scripts/stage_wheels.sh), carried. Results land in $OUT.
set -uo pipefail
source lab/scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
mkdir -p /tmp/deadlock && cp lab/scripts/deadlock_solution.py /tmp/deadlock/solution.py
SECONDS=0
python3 -m kagent.agent.cli eval 02_kimi_linear_decode --solution /tmp/deadlock/solution.py --scale full \
    --device cuda --check-only --out "$OUT/deadlock.json"
status=$?
echo "kagent eval: exit code $status (1: the solution failed) after $SECONDS s"
# The GPU is free again: no process of the evaluation is left on it.
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
python3 - <<'PY'
import json, os, pathlib

result = json.loads((pathlib.Path(os.environ["OUT"]) / "deadlock.json").read_text())
print("verdict:", result["verdict"])
print("reason:", result["reason"])
hung = next((c for c in result["checks"] if c["status"] == "timeout"), None)
diagnosis = hung["data"]["diagnosis"] if hung else {}
print("diagnosis:", json.dumps(diagnosis, indent=1))
print("phases:", result["phases"], "wall:", result["wall_seconds"], "s")
# From the step's request (right after the build) to the diagnosis; the watchdog's sample and
# the solution's kill follow within seconds.
verdicts = {"timeout verdict": result["verdict"] == "timeout",
            "grid-barrier deadlock named": "grid-barrier deadlock" in result["reason"],
            "no compiler running": diagnosis.get("compiler_running") is False,
            "GPU sampled": bool(diagnosis.get("gpu") and "busy_pct" in diagnosis["gpu"]),
            "diagnosed within 90 s of the step": diagnosis.get("waited_s", 1e9) < 90}
for what, held in verdicts.items():
    print(f"{'PASS' if held else 'FAIL'}: {what}")
raise SystemExit(0 if all(verdicts.values()) else 1)
PY
