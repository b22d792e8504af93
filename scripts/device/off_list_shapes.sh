#!/usr/bin/env bash
# Times the library at shapes off the bench's fixed list, against the fastest baselines in the
# same process, to find the shapes its size classes serve badly: matmuls with few rows, long
# contractions on small outputs, sizes that are no multiple of a tile; attention at head
# dimension 64 over sequence lengths (a shape off the list runs causal and not). 128x4096x4096,
# since on the list, stays here with the other row counts it is compared with.
# Usage (from the repository root, binaries from scripts/device/build.sh):
#   [OPS="matmul attention"] [DTYPE=f16] [BUDGET=0.3] scripts/device/off_list_shapes.sh
# T_OP (seconds, default 250) bounds each op's bench run.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for op in ${OPS:-matmul attention}; do
  case $op in
    matmul) shapes="512x512x2048 512x512x4096 512x512x8192 1024x1024x2048 1024x1024x4096 1024x1024x8192
              1000x1000x1000 16x2048x4096 16x8192x4096 32x4096x4096 64x4096x4096 128x4096x4096
              256x4096x4096 128x11008x4096 2048x2048x2048 4096x4096x1024 8192x8192x1024"
            baselines="cublas torch_eager" ;;
    attention) shapes="4x32x512x64 4x32x2048x64 4x32x8192x64 2x32x1024x64 8x32x1024x64"
               baselines="sdpa_cudnn torch_compile" ;;
    *) echo "$op: no shapes here for it"; continue ;;
  esac
  args=()
  for s in $shapes; do args+=(--shape "$s"); done
  for b in $baselines; do args+=(--baseline "$b"); done
  echo "== $op"
  timeout "${T_OP:-250}" .gpu/xtask bench --op "$op" --dtype "${DTYPE:-f16}" --budget "${BUDGET:-0.3}" "${args[@]}" 2>&1 |
    grep -E "^\| $op \| [a-z]"
done
