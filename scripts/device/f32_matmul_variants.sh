#!/usr/bin/env bash
# Times schedule variants of a matmul class against cuBLAS on the GPU machine
# (docs/decisions/0019-f32-dots-on-cuda-cores.md), from the xtask binary carried in .gpu/: each
# variant is a copy of the specs with the schedule of class $CLASS (default `mm_128_f32`)
# replaced, benched in $DTYPE (default f32) from its own directory (the bench compiles the specs
# of its working directory). For `mm_128_f32`, class `mm_1k_f32` is bounded to one row, so that
# the variant runs every shape benched.
# Usage (from the repository root): [CLASS=mm_1k_f32] [DTYPE=f16] [VARIANTS="name|block|tensorize|warps|stages ..."]
#   scripts/device/f32_matmul_variants.sh [SHAPE...]
set -uo pipefail
R=$PWD
OUT=${OUT:-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
CLASS=${CLASS:-mm_128_f32}
DTYPE=${DTYPE:-f32}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(512x512x512 1024x1024x1024 4096x4096x4096 1000x3000x77 16x4096x4096)
shape_args=()
for s in "${shapes[@]}"; do shape_args+=(--shape "$s"); done
# name | block | tensorize | warps | stages, one variant per line
VARIANTS=${VARIANTS:-"128x128_k16_w8_s3|x:128, y:128|x:128, y:128, k:16|8|3
128x64_k16_w4_s3|x:128, y:64|x:128, y:64, k:16|4|3
128x128_k8_w8_s4|x:128, y:128|x:128, y:128, k:8|8|4
64x64_k16_w4_s3|x:64, y:64|x:64, y:64, k:16|4|3
128x128_k16_w4_s3|x:128, y:128|x:128, y:128, k:16|4|3
64x128_k16_w4_s3|x:64, y:128|x:64, y:128, k:16|4|3"}
while IFS="|" read -r name block tensorize warps stages; do
  [ -n "$name" ] || continue
  dir=/tmp/matmul_variants/$CLASS/$name
  rm -rf "$dir" && mkdir -p "$dir/dt-kernels" && cp -r "$R/bench" "$dir/" && cp -r "$R/dt-kernels/specs" "$dir/dt-kernels/"
  spec=$dir/dt-kernels/specs/matmul.dt
  sed -i -e "s/^$CLASS.block(.*/$CLASS.block($block);/" \
    -e "s/^$CLASS.tensorize(.*/$CLASS.tensorize($tensorize);/" \
    -e "s/^$CLASS.num_warps(.*/$CLASS.num_warps($warps);/" \
    -e "s/^$CLASS.num_stages(.*/$CLASS.num_stages($stages);/" "$spec"
  [ "$CLASS" != mm_128_f32 ] || sed -i "s/^mm_1k_f32.bound(.*/mm_1k_f32.bound(x:1);/" "$spec"
  echo "=== $CLASS $name: $(grep "^$CLASS\.\(block\|tensorize\|num_warps\|num_stages\)" "$spec" | tr '\n' ' ')"
  (cd "$dir" && timeout "${T_VARIANT:-90}" "$R/.gpu/xtask" bench --op matmul --dtype "$DTYPE" --baseline cublas --budget 0.5 "${shape_args[@]}" \
    --json "$OUT/${CLASS}_$name.json" 2>&1 | grep -E "^\| matmul|rror")
done <<<"$VARIANTS"
