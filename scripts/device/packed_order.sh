#!/usr/bin/env bash
# Checks and times the packed grouped order and the 129-to-192-row class (decision 0046) on the
# GPU machine, from binaries built elsewhere and carried in .gpu/ (scripts/device/build.sh;
# for the bench also .gpu/xtask_before, built from the commit before, with that commit's
# `dt-kernels/specs` and `bench` in .gpu/before: `git archive REV dt-kernels/specs bench | tar
# -x -C .gpu/before`).
# Usage (from the repository root): scripts/device/packed_order.sh [STEP...]
# Steps: hopper (the library's Hopper classes, a size of the new class among them), gmr (every
# spec's kernels, own and drawn schedules, against the reference evaluator: the decoding is
# every kernel's), sanitize (compute-sanitizer over the matmul specs), bench (before and after,
# against cuBLAS in each process). Default: all, in that order. Logs go to $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(hopper gmr sanitize bench)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for step in "${steps[@]}"; do
  echo "=== $step ($(date +%T))"
  case $step in
    hopper) DT_GPU_CASES=${DT_GPU_CASES:-12} timeout ${T_HOPPER:-180} .gpu/api hopper_matmul gpu_f16::m gpu_bf16::m gpu_f32::m 2>&1 | tee "$OUT/hopper.log" | grep -E "^test |test result|panicked" ;;
    gmr) DT_GPU_RANDOM_SCHEDULES=${DT_GPU_RANDOM_SCHEDULES:-2} DT_GPU_SIZE_DRAWS=${DT_GPU_SIZE_DRAWS:-2} timeout ${T_GMR:-300} \
      .gpu/gmr cuda_matches_reference_evaluator --nocapture 2>&1 | tee "$OUT/gmr.log" | grep -vE "^\s*$" | tail -8 ;;
    sanitize) SANITIZE_TOOLS="memcheck racecheck synccheck" SANITIZE_SPECS=matmul,mm_leaky_relu SANITIZE_DRAWS=1 SANITIZE_MAX_ELEMENTS=32768 \
      SANITIZE_LOGS="$OUT/san" timeout ${T_SANITIZE:-120} scripts/sanitize.sh .gpu/gmr 2>&1 | tail -6 ;;
    bench) BEFORE_DIR=.gpu/before OP="matmul" DTYPES=f16 ROUNDS=${ROUNDS:-2} scripts/device/before_after.sh \
      256x11008x4096 512x11008x4096 192x4096x4096 160x4096x2048 1500x4096x4096 4096x4096x4096 ;;
    *) echo "unknown step $step" ;;
  esac
done
