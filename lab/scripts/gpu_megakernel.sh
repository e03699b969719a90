#!/usr/bin/env bash
# The megakernel playbook's figures and the stage instruments, on one GPU (issue 13), in one call:
# the stages tool and ncu_kernel on a two-stage kernel of our own (through the jail), grid-barrier
# costs (Triton software barrier; cooperative grid.sync and a software barrier through
# load_inline), launch costs, %globaltimer's resolution and an int4 GEMV's bandwidth. The
# load_inline build runs in the background while the GPU-timed parts run; the host-timed launch
# costs come after it, on an idle CPU. Needs the wheels in .whl/ (see gpu_setup.sh).
#   bash lab/scripts/gpu_megakernel.sh      (results under $OUT)
set -uo pipefail
source lab/scripts/gpu_setup.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch-extensions MAX_JOBS=8
date -u; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
(cd lab/scripts && timeout 300 python3 -c "import megakernel_probes as m; e, s = m.build_extension(); print(f'load_inline build {s:.1f} s')") &
build=$!
timeout 150 python3 lab/scripts/stage_tools_run.py stages "$OUT"; echo "stages tool: exit $?"
wait $build; echo "load_inline build: exit $?"
timeout 90 python3 lab/scripts/megakernel_probes.py triton "$OUT/probes_triton.json" >/dev/null; echo "triton probes: exit $?"
timeout 120 python3 lab/scripts/megakernel_probes.py cuda "$OUT/probes_cuda.json" >/dev/null; echo "cuda probes: exit $?"
echo "--- summary"
python3 lab/scripts/megakernel_probes.py summary "$OUT/probes_triton.json" "$OUT/probes_cuda.json"
timeout 120 python3 lab/scripts/stage_tools_run.py ncu "$OUT"; echo "ncu_kernel tool: exit $?"
date -u
