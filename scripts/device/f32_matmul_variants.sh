#!/usr/bin/env bash
# Times schedule variants of the f32 matmul classes against cuBLAS on the GPU
# machine (docs/decisions/0019-f32-dots-on-cuda-cores.md), from the xtask binary carried in
# .gpu/: each variant is a copy of the specs with the schedule of class `mm_128_f32` replaced
# and class `mm_1k_f32` bounded to one row, so that the variant runs every shape benched, each
# benched from its own directory (the bench compiles the specs of its working directory).
# Usage (from the repository root): scripts/device/f32_matmul_variants.sh [SHAPE...]
set -uo pipefail
R=$PWD
OUT=${OUT:-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(512x512x512 1024x1024x1024 4096x4096x4096 1000x3000x77 16x4096x4096)
shape_args=()
for s in "${shapes[@]}"; do shape_args+=(--shape "$s"); done
# name | block | tensorize | warps | stages
variants=(
  "128x128_k16_w8_s3|x:128, y:128|x:128, y:128, k:16|8|3"
  "128x64_k16_w4_s3|x:128, y:64|x:128, y:64, k:16|4|3"
  "128x128_k8_w8_s4|x:128, y:128|x:128, y:128, k:8|8|4"
  "64x64_k16_w4_s3|x:64, y:64|x:64, y:64, k:16|4|3"
  "128x128_k16_w4_s3|x:128, y:128|x:128, y:128, k:16|4|3"
  "64x128_k16_w4_s3|x:64, y:128|x:64, y:128, k:16|4|3"
)
for v in "${variants[@]}"; do
  IFS="|" read -r name block tensorize warps stages <<<"$v"
  dir=/tmp/f32_variants/$name
  rm -rf "$dir" && mkdir -p "$dir/dt-kernels" && cp -r "$R/bench" "$dir/" && cp -r "$R/dt-kernels/specs" "$dir/dt-kernels/"
  sed -i -e "s/^mm_128_f32.block(.*/mm_128_f32.block($block);/" \
    -e "s/^mm_128_f32.tensorize(.*/mm_128_f32.tensorize($tensorize);/" \
    -e "s/^mm_128_f32.num_warps(.*/mm_128_f32.num_warps($warps);/" \
    -e "s/^mm_128_f32.num_stages(.*/mm_128_f32.num_stages($stages);/" \
    -e "s/^mm_1k_f32.bound(.*/mm_1k_f32.bound(x:1);/" "$dir/dt-kernels/specs/matmul.dt"
  echo "=== $name"
  grep "^mm_128_f32" "$dir/dt-kernels/specs/matmul.dt" | tr '\n' ' '; echo
  (cd "$dir" && timeout "${T_VARIANT:-90}" "$R/.gpu/xtask" bench --op matmul --dtype f32 --baseline cublas --budget 0.5 "${shape_args[@]}" \
    --json "$OUT/f32_$name.json" 2>&1 | grep -E "^\| matmul|rror")
done
