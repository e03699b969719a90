#!/usr/bin/env bash
# kagent's megakernel stage by stage on one GPU (issue 14's stage breakdown), each part
# switched by a variable: check.py at full scale (CHECK=1); the stages tool, its
# kagent_stop_after sweep and the kernel's own %globaltimer stamps, at every full-scale context
# (STAGES=1); the regression test of the harness against the kernel
# (lab/scripts/megakernel_regression.py, REPEATS=3 evaluations, each kagent eval given the options
# of EVAL_OPTIONS, e.g. "--min-request-ms=10"; KIMI_SPLIT_F=0 in the environment
# evaluates the kernel without its split down projection, and so on); Nsight Compute on one launch through the ncu_kernel
# tool (NCU=0; NCU_VIEWS=source_16384 for that view only, see lab/scripts/stage_tools_run.py);
# AA_RUNS=3 A/A evaluations (cold, then warm); TUNE=1: tune.py, the kernel as built against
# itself with each of its switches off (the split down projection SPLIT_F, the top-k computed
# once ROUTE_ONCE, the shared expert in 3 pieces SPLIT_SH with 32-column tiles, the counting
# grid barrier BAR_COUNT), all four off, and itself again, 4 rounds (TUNE_VARIANTS=FILE: the
# variants of FILE instead, one JSON object a line); ATTEND=1: the attention stage launched
# alone (lab/megakernel/attend_alone.py, its default variants, or with
# ATTEND_VARIANTS=FILE those of FILE, one JSON object a line); DIRECT=1: bench.py with the
# kernel's direct launch (KIMI_LAUNCH=direct, examples/02_kimi_linear_decode/solution.py);
# HOST_PROFILE=1: where the host's time a step goes, either launch (bench.py --host-profile). Run from the
# repository root:
#   bash lab/scripts/stage_wheels.sh   # then, through the device tool with carry [".whl"]:
#   bash lab/scripts/gpu_megakernel_stages.sh
# Everything lands in $OUT/stages.tar.gz beside log.txt.
set -uo pipefail
ROUND=/tmp/kagent-megakernel-stages-out
source lab/scripts/gpu_setup.sh
date -u
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
if [ "${CHECK:-1}" = 1 ]; then
  # The kernel against the task's reference at full scale, two chained steps per seed (plain and salient).
  timeout 240 python3 examples/02_kimi_linear_decode/check.py --scale full --seeds 0,1
  echo "check.py: exit $?"
fi
# --variant arguments from FILE, one JSON object a line, into the array variants.
variants_from() {
  if [ ! -f "$1" ]; then echo "gpu_megakernel_stages.sh: no variants file $1" >&2; exit 2; fi
  while IFS= read -r line; do [ -n "$line" ] && variants+=(--variant "$line"); done < "$1"
}
bench_summary() {
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); k=d['kernel']
print(sys.argv[1].split('/')[-1], 'loop ms', [round(c['best_ms'], 4) for c in d['single_launch']['chain']],
      'host ms a step', [round(c['host_enqueue_ms'], 4) for c in d['single_launch']['chain'] if 'host_enqueue_ms' in c],
      'regs', k['n_regs'], 'spills', k['n_spills'], 'shared', k['shared_bytes'])" "$1"
}
# The tools' children compile into the run's own HOME.
if [ "${STAGES:-1}" = 1 ]; then
  t0=$(date +%s)
  timeout 300 python3 lab/scripts/stage_tools_run.py megakernel "$OUT" /tmp/kagent-megakernel-stages > "$OUT/stages.log" 2>&1
  echo "stages: exit $? after $(( $(date +%s) - t0 )) s"
  cat "$OUT/stages.log"
  keep_round stages
fi
if [ "${DIRECT:-0}" = 1 ]; then
  # bench.py with the direct launch (KIMI_LAUNCH=direct): its loop and host time a step, how many
  # steps skipped Triton's dispatch, and 6 chained steps direct against dispatched, bitwise.
  t0=$(date +%s)
  KIMI_LAUNCH=direct timeout 200 python3 lab/megakernel/bench.py --out "$OUT/bench_direct.json" \
    > "$OUT/bench_direct.log" 2>&1
  echo "bench.py, direct launch: exit $? after $(( $(date +%s) - t0 )) s"
  bench_summary "$OUT/bench_direct.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
print('direct launches', d['single_launch'].get('direct'), 'agreement', d.get('launch_agreement'))" "$OUT/bench_direct.json"
  keep_round stages
fi
if [ "${HOST_PROFILE:-0}" = 1 ]; then
  # Where the host's time a step goes, with Triton's dispatch and with the direct launch
  # (bench.py --host-profile: cProfile over 200 chained steps at ctx 2048).
  for launch in jit direct; do
    t0=$(date +%s)
    KIMI_LAUNCH=$launch timeout 200 python3 lab/megakernel/bench.py --host-profile \
      --out "$OUT/bench_profile_$launch.json" > "$OUT/bench_profile_$launch.log" 2>&1
    echo "bench.py --host-profile, $launch launch: exit $? after $(( $(date +%s) - t0 )) s"
    bench_summary "$OUT/bench_profile_$launch.json"
    python3 -c "import json,sys; h=json.load(open(sys.argv[1]))['single_launch']['host_profile']
print('profiled host ms a step', round(h['host_enqueue_ms_profiled'], 4))
for f in h['functions'][:12]:
    print('  %-64s %6.1f calls %7.1f us own %7.1f us cumulative' % (f['function'][:64], f['calls_a_step'],
          f['own_us_a_step'], f['cumulative_us_a_step']))" "$OUT/bench_profile_$launch.json"
  done
  keep_round stages
fi
if [ "${TUNE:-0}" = 1 ]; then
  # Side by side in rounds of turned order; "again" is the landed kernel once more (what a
  # difference of nothing reads as).
  t0=$(date +%s)
  variants=()
  if [ -n "${TUNE_VARIANTS:-}" ]; then
    variants_from "$TUNE_VARIANTS"
  else
    variants=(--variant '{"name": "now"}' --variant '{"name": "no SPLIT_F", "consts": {"SPLIT_F": 0}}'
      --variant '{"name": "no ROUTE_ONCE", "consts": {"ROUTE_ONCE": 0}}'
      --variant '{"name": "no SPLIT_SH", "consts": {"SPLIT_SH": 1, "BN_SH": 16}}'
      --variant '{"name": "no BAR_COUNT", "consts": {"BAR_COUNT": 0}}'
      --variant '{"name": "none", "consts": {"SPLIT_F": 0, "ROUTE_ONCE": 0, "SPLIT_SH": 1, "BN_SH": 16, "BAR_COUNT": 0}}'
      --variant '{"name": "again"}')
  fi
  timeout 480 python3 lab/megakernel/tune.py --out "$OUT/tune.json" --rounds 4 "${variants[@]}" \
    > "$OUT/tune.log" 2>&1
  echo "tune: exit $? after $(( $(date +%s) - t0 )) s"
  tail -30 "$OUT/tune.log"
  keep_round stages
fi
if [ "${ATTEND:-0}" = 1 ]; then
  # What the attention stage costs outside the megakernel, its partials checked against torch.
  t0=$(date +%s)
  variants=()
  if [ -n "${ATTEND_VARIANTS:-}" ]; then
    variants_from "$ATTEND_VARIANTS"
  fi
  timeout 300 python3 lab/megakernel/attend_alone.py --out "$OUT/attend.json" "${variants[@]}" \
    > "$OUT/attend.log" 2>&1
  echo "attend_alone: exit $? after $(( $(date +%s) - t0 )) s"
  cat "$OUT/attend.log"
  keep_round stages
fi
if [ "${REPEATS:-3}" -gt 0 ]; then
  # (bench.py and the evaluations share one build HOME: the kernel is compiled once.)
  t0=$(date +%s)
  eval_options=()
  for option in ${EVAL_OPTIONS:-}; do eval_options+=("--eval-option=$option"); done
  timeout 420 python3 lab/scripts/megakernel_regression.py run "$OUT" --repeats "${REPEATS:-3}" "${eval_options[@]}"
  echo "regression: exit $? (0: every criterion holds) after $(( $(date +%s) - t0 )) s"
  bench_summary "$OUT/bench.json"
  keep_round stages
fi
if [ "${NCU:-0}" = 1 ]; then
  # Nsight Compute on one launch, through the ncu_kernel tool: its full section set, then its
  # source view (stall samples by source line).
  t0=$(date +%s)
  timeout 480 python3 lab/scripts/stage_tools_run.py megakernel-ncu "$OUT" /tmp/kagent-megakernel-stages > "$OUT/ncu.log" 2>&1
  echo "ncu_kernel: exit $? after $(( $(date +%s) - t0 )) s"
  cat "$OUT/ncu.log"
  keep_round stages
fi
# A/A beside it (cold, then warm), AA_RUNS in all (3 by default; 0: none).
for i in $(seq 1 "${AA_RUNS:-3}"); do
  if [ "$i" -eq 1 ]; then aa_eval cold; else aa_eval "warm_$((i - 1))"; fi
done
python3 lab/scripts/aa_rounds.py "$OUT"/aa_*.json 2>/dev/null
keep_round stages
date -u
