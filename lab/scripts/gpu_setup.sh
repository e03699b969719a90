# Sourced by the GPU scripts (from the repository root): installs the wheels carried in .whl/
# into /tmp/site, points kagent at scratch folders, and copies all output to $OUT/log.txt.
# With ROUND set (a scratch folder, not exported), the script's files gather there instead
# (OUT becomes ROUND, emptied first) and `keep_round NAME` tars them into the device tool's
# $OUT (FINAL_OUT) as NAME.tar.gz beside a copy of the log: the tool brings back 8 files at most.
OUT=${OUT:-/tmp/kagent-gpu-out}
if [ -n "${ROUND:-}" ]; then
  FINAL_OUT=$OUT
  rm -rf "$ROUND" && mkdir -p "$ROUND" "$FINAL_OUT"
  OUT=$ROUND
fi
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 OUT
export KAGENT_HOME=/tmp/kagent-home KAGENT_RUNS=/tmp/kagent-runs
exec > >(tee "$OUT/log.txt") 2>&1

# One A/A evaluation of the flagship (the baseline against itself), its result in
# $OUT/aa_NAME.json and its screen in $OUT/aa_NAME.txt.
aa_eval() {
  local t0
  t0=$(date +%s)
  timeout 200 python3 -m kagent.agent.cli eval 02_kimi_linear_decode --aa --device cuda --out "$OUT/aa_$1.json" \
    > "$OUT/aa_$1.txt" 2>&1
  echo "A/A $1: exit $? after $(( $(date +%s) - t0 )) s"
  tail -5 "$OUT/aa_$1.txt"
}

keep_round() {
  tar -czf "$FINAL_OUT/${1:-round}.tar.gz" -C "$ROUND" .
  cp "$OUT/log.txt" "$FINAL_OUT/log.txt"
}
