#!/usr/bin/env bash
# Attention on the GPU machine, in steps (default: bench sanitize tests):
#   bench   the library's attention at the bench shapes, in DTYPES (default "f16 bf16"), against
#           BASELINES (default: every attention baseline), BUDGET GPU seconds per row
#   before  the same rows from .gpu/xtask_before (a bench binary built from an earlier commit,
#           if present), with sdpa_flash as the same-run anchor
#   sanitize  memcheck and racecheck over every attention kernel (scripts/sanitize.sh)
#   tests   the GPU property tests of attention (dt-kernels) and every attention kernel under
#           random schedules against the reference evaluator (dt-codegen)
# Usage: STEPS="bench tests" OUT=out scripts/device/attention.sh   (binaries from build.sh)
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for step in ${STEPS:-bench sanitize tests}; do
  echo "=== $step ($(date +%T))"
  case $step in
    bench) dtypes=() baselines=()
           for t in ${DTYPES:-f16 bf16}; do dtypes+=(--dtype "$t"); done
           for b in ${BASELINES:-}; do baselines+=(--baseline "$b"); done
           timeout ${T_BENCH:-300} .gpu/xtask bench --op attention "${dtypes[@]}" ${baselines[@]+"${baselines[@]}"} --budget ${BUDGET:-0.5} \
             --json "$OUT/attention-h100.json" --markdown "$OUT/attention-h100.md" 2>&1 | tee "$OUT/bench.log" | tail -16 ;;
    before) [ -x .gpu/xtask_before ] && timeout ${T_BEFORE:-200} .gpu/xtask_before bench --op attention --dtype f16 \
             --budget ${BUDGET:-0.5} --baseline sdpa_flash --json "$OUT/before.json" 2>&1 | tee "$OUT/before.log" | tail -9 ;;
    sanitize) SANITIZE_SPECS=attention SANITIZE_TOOLS="${TOOLS:-memcheck racecheck}" SANITIZE_DRAWS=1 SANITIZE_LOGS="$OUT/san" timeout ${T_SAN:-120} scripts/sanitize.sh .gpu/gmr ;;
    tests) DT_GPU_CASES=${CASES:-12} timeout ${T_TESTS:-240} .gpu/api attention 2>&1 | grep -E "^test |test result|panicked|Test failed" | head -20
           DT_GPU_SPECS=attention timeout ${T_GMR:-200} .gpu/gmr cuda_matches_reference_evaluator --nocapture 2>&1 | grep -E "GPU cases|failures\)|panicked" | tail -3 ;;
    *) echo "unknown step $step" ;;
  esac
done
