#!/usr/bin/env bash
# One GPU call for the 2026-12-07 round (issues 42, 44, 46), most important first, each part under
# a limit of its own so that the whole stays inside one call:
#   1. the first message's machine paragraph, as a run on this GPU gives it (issue 46);
#   2. kagent's own megakernel through the regression script: bench.py, two evaluations with
#      today's integrity checks (timed steps judged against the reference from secret inputs),
#      the public board's check.py and benchmark.py, kagent eval of the board's folder (42, 44);
#   3. A/A, the baseline against itself (44: 1.00 +- 0.02 per context);
#   4. the honest reference as a solution, checked (not timed: it is the slow oracle) with the
#      solution's box on CUDA (44): does the exchange's CUDA memory cross the box?
# Run from the repository root, the wheels carried (bash lab/scripts/stage_wheels.sh) and the
# public folder staged at BOARD (default .gpu/board): `bash lab/scripts/gpu_round3.sh`. Its files
# gather in ROUND and come back as round3.tar.gz beside log.txt.
set -uo pipefail
ROUND=${ROUND:-/tmp/round3}
source lab/scripts/gpu_setup.sh
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
started=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - started )) s]"; }

echo "== 1. the machine paragraph $(elapsed)"
timeout 120 python3 -c "import sys, pathlib; from kagent.agent.lifecycle.device import machine_text; \
print(machine_text('cuda', sys.executable, pathlib.Path('tasks/02_kimi_linear_decode')))"
echo "machine paragraph: exit $? $(elapsed)"

echo "== 2. the megakernel's regression, with the public board $(elapsed)"
timeout "${REGRESSION_LIMIT_S:-330}" python3 lab/scripts/megakernel_regression.py run "$OUT/regression" \
  --repeats "${REPEATS:-2}" --board "${BOARD:-.gpu/board}"
echo "regression: exit $? (0: every criterion holds) $(elapsed)"

echo "== 3. A/A $(elapsed)"
aa_eval warm

echo "== 4. the honest reference in the solution's box on CUDA $(elapsed)"
mkdir -p /tmp/honest && cp tasks/02_kimi_linear_decode/reference.py /tmp/honest/solution.py
KAGENT_SOLUTION_BOX_ON_CUDA=1 COLUMNS=160 timeout 150 python3 -m kagent.agent.cli eval 02_kimi_linear_decode \
  --solution /tmp/honest/solution.py --device cuda --check-only --out "$OUT/boxed_honest.json" > "$OUT/boxed_honest.txt" 2>&1
echo "boxed honest reference: exit $? $(elapsed)"
tail -25 "$OUT/boxed_honest.txt"
echo "== done $(elapsed)"
keep_round round3
