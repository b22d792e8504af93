#!/usr/bin/env bash
# Matmuls of few rows and many columns on the GPU machine (decision 0044), in steps (default:
# tests bench):
#   variants  schedule variants of the few-row tiles written over `mm_90a_m64` and `mm_90a_1k`
#             against cuBLAS (the measurements that chose the classes)
#   tests     every matmul and mm_leaky_relu kernel against the reference evaluator, the
#             sanitizers over them, the GPU property tests and `hopper_matmul_matches_reference`
#   bench     the library at the few-row shapes, f16 and bf16, against cuBLAS
# Usage (from the repository root, binaries from scripts/device/build.sh):
#   [STEPS="tests bench"] [OUT=out] scripts/device/few_rows.sh
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
shapes="64x4096x4096 128x4096x4096 256x4096x4096 512x4096x4096 128x11008x4096"
tile_128x64="block(x:128, y:64); tensorize(x:128, y:64, k:64); num_warps(8); num_stages(8)"
tile_128x128="block(x:128, y:128); tensorize(x:128, y:128, k:64); num_warps(8); num_stages(5)"
split_128x64="block(x:128, y:64, k:2048); tensorize(x:128, y:64, k:64); num_warps(8); num_stages(6); cluster(k:2)"
variants() {
  OP=matmul SPEC=matmul DTYPE=f16 BASELINE=cublas T_VARIANT=${T_VARIANT:-60} \
    timeout "${T_STEP:-300}" scripts/device/schedule_variants.sh "$@"
}
for step in ${STEPS:-tests bench}; do
  echo "=== $step ($(date +%T))"
  case $step in
    variants)
      # Each variant widens a class that comes before the few-row classes, so it takes their
      # shapes; `base` is the library as it is (before decision 0044: `mm_90a_m64` and `mm_90a`).
      CLASS=mm_90a_m64 VARIANTS="base|
b256|bound(x:256)
m256|bound(x:256); $tile_128x64
w256|bound(x:256); $tile_128x128" variants 64x4096x4096 128x4096x4096 256x4096x4096 128x11008x4096
      CLASS=mm_90a_m64 EDIT="s/^mm_90a_m64.persistent();//" VARIANTS="s64|block(x:64, y:64, k:2048); cluster(k:2)
s512|bound(x:512); $split_128x64" variants 64x4096x4096 128x4096x4096 512x4096x4096 128x11008x4096
      CLASS=mm_90a_1k VARIANTS="x512|bound(x:512)
x512w|bound(x:512); $tile_128x128" variants 256x4096x4096 512x4096x4096 1024x4096x4096 ;;
    tests)
      DT_GPU_SPECS=matmul,mm_leaky_relu DT_GPU_RANDOM_SCHEDULES=0 DT_GPU_SIZE_DRAWS=3 timeout "${T_GMR:-150}" \
        .gpu/gmr cuda_matches_reference_evaluator --nocapture 2>&1 | grep -E "GPU cases|test result|panicked|mismatch" | tail -4
      SANITIZE_SPECS=matmul,mm_leaky_relu SANITIZE_DRAWS=1 SANITIZE_MAX_ELEMENTS=32768 SANITIZE_LOGS="$OUT/san" \
        timeout "${T_SAN:-150}" scripts/sanitize.sh .gpu/gmr 2>&1 | tail -4
      DT_GPU_CASES=12 timeout "${T_API:-400}" .gpu/api hopper_matmul gpu_f16::m gpu_bf16::m gpu_f32::m 2>&1 |
        grep -E "^test |test result|panicked" | head -12 ;;
    bench)
      args=()
      for s in $shapes; do args+=(--shape "$s"); done
      timeout "${T_BENCH:-120}" .gpu/xtask bench --op matmul --op mm_leaky_relu --dtype f16 --dtype bf16 "${args[@]}" \
        --baseline cublas --budget "${BUDGET:-0.1}" --json "$OUT/fewrows.json" 2>&1 | grep -E "^\| (matmul|mm_leaky_relu) \| [a-z]" ;;
    *) echo "unknown step $step" ;;
  esac
done
