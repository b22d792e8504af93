#!/usr/bin/env bash
# Checks and times the warp-specialized (Hopper) matmul classes on the GPU machine, from
# binaries built elsewhere and carried in .gpu/ (the machine has no Rust):
#   .gpu/api   = dt-kernels' api_matches_reference test binary
#   .gpu/gmr   = dt-codegen's gpu_matches_reference test binary
#   .gpu/dtc, .gpu/xtask
# Usage (from the repository root): scripts/device/hopper_matmul.sh [STEP...]
# Steps: hopper (the library's Hopper classes), bench (matmul and mm_leaky_relu against cuBLAS
# and torch; BENCH_ARGS adds options such as --dtype or --baseline), bench_f32 (the f32 builds
# against every baseline, with a results page), sanitize (compute-sanitizer over the matmul specs), props (the GPU property tests
# of the matmuls), gmr (the compiler's runner over the matmul specs). Default: all, in that order.
# Logs and the bench's JSON go to $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(hopper bench sanitize props gmr)
nvidia-smi --query-gpu=name,serial,driver_version --format=csv,noheader
for step in "${steps[@]}"; do
  echo "=== $step ($(date +%T))"
  case $step in
    hopper) timeout ${T_HOPPER:-240} .gpu/api hopper_matmul_matches_reference --nocapture 2>&1 | tee "$OUT/hopper.log" | tail -8 ;;
    bench) timeout ${T_BENCH:-300} .gpu/xtask bench --op matmul --op mm_leaky_relu --budget 1 ${BENCH_ARGS:-} --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -40 ;;
    bench_f32) timeout ${T_BENCH:-300} .gpu/xtask bench --op matmul --op mm_leaky_relu --dtype f32 --budget 1 --json "$OUT/bench_f32.json" --markdown "$OUT/bench_f32.md" 2>&1 | tee "$OUT/bench_f32.log" | tail -16 ;;
    sanitize) SANITIZE_SPECS=matmul,mm_leaky_relu timeout ${T_SANITIZE:-300} scripts/sanitize.sh .gpu/gmr 2>&1 | tee "$OUT/sanitize.log" | tail -30 ;;
    props) timeout ${T_PROPS:-300} .gpu/api matmul mm_leaky nvrtc 2>&1 | tee "$OUT/props.log" | grep -E "^test |test result|panicked" ;;
    gmr) DT_GPU_SPECS=matmul,mm_leaky_relu timeout ${T_GMR:-400} .gpu/gmr --nocapture 2>&1 | tee "$OUT/gmr.log" | grep -vE "^\s*$" | tail -12 ;;
    *) echo "unknown step $step" ;;
  esac
done
