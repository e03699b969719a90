#!/usr/bin/env bash
# One GPU call for the harness's open checks, each part under a limit of its own so that the
# whole stays inside one device call (10 minutes):
#   1. the per-step watchdog on a deadlocked kernel (issue 13, scripts/gpu_watchdog.sh); its
#      evaluation also builds the reference weights' cache, so what follows runs warm;
#   2. A/A twice, warm: per-context figures, the warm evaluation's wall time and phases (issues 9, 10);
#   3. the stream kernel against a plain loop, the profiler and its intervals (issue 10);
#   4. verdicts repeated on unchanged files: the honest file and one wrong on 1 input in 10 (issue 10).
# Needs the wheels in .whl/ (bash scripts/stage_wheels.sh), carried. Results in $OUT: log.txt,
# deadlock.json, aa_1.json, aa_2.json, timing_truth.json, verdicts.json.
set -uo pipefail
started=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - started )) s]"; }
echo "== the watchdog on a deadlocked kernel $(elapsed)"
timeout "${WATCHDOG_LIMIT_S:-170}" bash scripts/gpu_watchdog.sh
echo "watchdog: exit $? $(elapsed)"
# gpu_watchdog.sh's log.txt is its own; from here on, this script's.
mv "${OUT:-/tmp/kagent-gpu-out}/log.txt" "${OUT:-/tmp/kagent-gpu-out}/watchdog_log.txt"
source scripts/gpu_setup.sh
echo "== A/A, warm, twice $(elapsed)"
timeout "${AA_LIMIT_S:-90}" python3 scripts/gpu_evaluations.py aa '[["aa_1", {}], ["aa_2", {}]]'
echo "== the stream kernel against a plain loop and the profiler $(elapsed)"
timeout "${TRUTH_LIMIT_S:-70}" python3 scripts/timing_truth.py --device cuda --contexts 2048 8192 16384 --rounds 4 \
  --cache "$KAGENT_HOME" --out "$OUT/timing_truth.json"
echo "== verdicts that repeat: the honest file 10 times, one wrong on 1 input in 10 10 times $(elapsed)"
timeout "${VERDICTS_LIMIT_S:-230}" python3 scripts/gpu_evaluations.py verdicts ${VERDICTS:-10 10 6}
echo "== done $(elapsed)"
