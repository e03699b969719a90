# Sourced by the GPU scripts (from the repository root): installs the wheels carried in .whl/
# into /tmp/site, points kagent at scratch folders, and copies all output to $OUT/log.txt.
OUT=${OUT:-/tmp/kagent-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 OUT
export KAGENT_HOME=/tmp/kagent-home KAGENT_RUNS=/tmp/kagent-runs
exec > >(tee "$OUT/log.txt") 2>&1
