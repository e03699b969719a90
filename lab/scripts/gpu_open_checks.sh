#!/usr/bin/env bash
# One GPU call for the harness's open checks, each part under a limit of its own so that the
# whole stays inside one device call (10 minutes):
#   1. the per-step watchdog on a deadlocked kernel (issue 13, lab/scripts/gpu_watchdog.sh); its
#      evaluation also builds the reference weights' cache, so what follows runs warm;
#   2. then lab/scripts/gpu_timing_truth.sh's parts aa, truth and verdicts: A/A twice, warm (per-context
#      figures, the warm evaluation's wall time, phases and overhead; issues 9, 10), the stream
#      kernel against a plain loop, the profiler and its intervals, and verdicts repeated on
#      unchanged files, the honest one and one wrong on 1 input in 10 (issue 10).
# Needs the wheels in .whl/ (bash lab/scripts/stage_wheels.sh), carried. Results in $OUT:
# watchdog_log.txt, deadlock.json, log.txt, aa_1.json, aa_2.json, timing_truth.json, verdicts.json.
set -uo pipefail
started=$(date +%s)
echo "== the watchdog on a deadlocked kernel"
timeout "${WATCHDOG_LIMIT_S:-170}" bash lab/scripts/gpu_watchdog.sh
echo "watchdog: exit $? [$(( $(date +%s) - started )) s]"
# gpu_watchdog.sh's log.txt is its own; gpu_timing_truth.sh writes the next one.
out=${OUT:-/tmp/kagent-gpu-out}
[ -f "$out/log.txt" ] && mv "$out/log.txt" "$out/watchdog_log.txt"
PARTS="aa truth verdicts" AA_RUNS='[["aa_1", {}], ["aa_2", {}]]' AA_LIMIT_S=${AA_LIMIT_S:-90} \
  TRUTH_LIMIT_S=${TRUTH_LIMIT_S:-70} VERDICTS_LIMIT_S=${VERDICTS_LIMIT_S:-230} VERDICTS=${VERDICTS:-10 10 6} \
  bash lab/scripts/gpu_timing_truth.sh
echo "== done [$(( $(date +%s) - started )) s]"
