#!/usr/bin/env bash
# The honest reference port of 10 KernelBench problems (6 of level 1, 4 of level 2) graded on
# the GPU: each problem's own Model, renamed ModelNew, must pass and read within noise of 1.0x.
# Prints, per problem, the speedup and its interval, kagent's baseline ms per call, and where
# KernelBench's published timings are given, theirs and the ratio.
#
#   KB_DIR=/path/to/KernelBench/KernelBench \
#   KB_TIMING=/path/to/KernelBench/results/timing/H100_modal/baseline_time_torch.json \
#   bash lab/scripts/kernelbench_h200.sh
#
# KB_DIR holds level1/ and level2/ (KernelBench's problem files); KB_TIMING is optional. About
# 30-60 s a problem on an H200. Exit 1 when a port fails or reads outside noise.
# KB_PROBLEMS (prefixes, as PROBLEMS below) runs some of them. KB_DEADLINE (epoch seconds) is a
# time guard for a device call of bounded length: no problem starts with less than
# KB_MIN_LEFT_S (default 60) seconds left, each one's --timeout ends by the deadline, and the
# count run is printed.
set -euo pipefail
: "${KB_DIR:?KB_DIR must name the KernelBench problem folder, with level1 and level2}"
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-$(mktemp -d -t kagent-kb-h200-XXXX)}
mkdir -p "$OUT"
PROBLEMS=(level1/1_ level1/19_ level1/23_ level1/33_ level1/40_ level1/47_ level2/1_ level2/2_ level2/3_ level2/4_)
if [ -n "${KB_PROBLEMS:-}" ]; then
  read -r -a PROBLEMS <<< "$KB_PROBLEMS"
fi
cat > "$OUT/summary.py" <<'PY'
import json
import sys

path, level, file, timing = sys.argv[1:5]
name = file.removesuffix(".py")
try:
    result = json.load(open(path))
except ValueError:  # kagent eval stopped before a verdict (a usage error, the time guard's --timeout)
    print(f"{level}/{name}: no result: kagent eval's error is above")
    sys.exit(1)
if result["verdict"] != "pass" or not result["timings"]:
    print(f"{level}/{name}: {result['verdict']}: {result['reason']}")
    sys.exit(1)
t = result["timings"][0]
line = (
    f"{level}/{name}: {t['speedup']:.3f}x [{t['ci_low']:.3f}, {t['ci_high']:.3f}] "
    f"{'within noise' if t['within_noise'] else 'NOT within noise'}; baseline {t['baseline']['median_ms']:.4g} ms/call "
    f"({t['pairs']} pairs, {t['candidate_block_steps']} calls a block)"
)
if timing:
    theirs = json.load(open(timing)).get(level, {}).get(file)
    if theirs:
        line += (
            f"; KernelBench {theirs['mean']:.4g} ms ({theirs.get('hardware', '?')}): "
            f"kagent/KernelBench {t['baseline']['median_ms'] / theirs['mean']:.3f}"
        )
print(line)
sys.exit(0 if t["within_noise"] else 1)
PY
status=0
ran=0
for prefix in "${PROBLEMS[@]}"; do
  timeout_args=()
  if [ -n "${KB_DEADLINE:-}" ]; then
    left=$(( KB_DEADLINE - $(date +%s) ))
    if [ "$left" -lt "${KB_MIN_LEFT_S:-60}" ]; then
      echo "time guard: $left s left, stopped before $prefix"
      break
    fi
    timeout_args=(--timeout "$left")
  fi
  file=$(ls "$KB_DIR/${prefix}"*.py | head -n 1)
  name=$(basename "$file" .py)
  level=$(basename "$(dirname "$file")")
  mkdir -p "$OUT/$level/$name"
  # The port: the reference's own code, its class renamed (super(Model, self) too).
  sed -e 's/\bclass Model\b/class ModelNew/' -e 's/super(Model, self)/super(ModelNew, self)/' \
    "$file" > "$OUT/$level/$name/solution.py"
  # python3 -m, not the kagent command: an install with pip --target (lab/scripts/gpu_setup.sh)
  # puts no console script on PATH.
  t0=$(date +%s)
  python3 -m kagent.agent.cli eval "$file" --solution "$OUT/$level/$name/solution.py" --device "$DEVICE" --json \
    ${timeout_args[@]+"${timeout_args[@]}"} > "$OUT/$level/$name/result.json" || true
  ran=$(( ran + 1 ))
  echo "($level/$name: $(( $(date +%s) - t0 )) s)"
  python3 "$OUT/summary.py" "$OUT/$level/$name/result.json" "$level" "$(basename "$file")" "${KB_TIMING:-}" || status=1
done
echo "ran $ran of ${#PROBLEMS[@]} problems; results under $OUT"
[ "$ran" -eq "${#PROBLEMS[@]}" ] || status=1
exit $status
