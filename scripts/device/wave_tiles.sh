#!/usr/bin/env bash
# Measures the Hopper matmul's 128 x 256 tiles (`mm_90a` as it stands) against 128 x 128 tiles
# over shapes whose tiles fill the GPU's last wave differently (decision 0046, "Left: tiles by the
# wave they fill"), each against cuBLAS in its own process, from the binaries carried in .gpu/:
# the data for a class rule by tile count. Usage (from the repository root, on the GPU machine):
#   [DTYPE=f16] [COLS="4096 11008"] [ROWS="256 384 ..."] scripts/device/wave_tiles.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
shapes=()
for n in ${COLS:-4096 11008}; do
  for m in ${ROWS:-256 384 512 768 1024 1500 2048 3000}; do shapes+=("${m}x${n}x4096"); done
done
OP=matmul SPEC=matmul CLASS=mm_90a DTYPE=${DTYPE:-f16} BASELINE=cublas VARIANTS='base|
t128x128|block(x:128, y:128); tensorize(x:128, y:128, k:64); num_stages(5)' \
  scripts/device/schedule_variants.sh "${shapes[@]}" 2>&1 | grep -E "^===|^\| matmul" | cut -d'|' -f1,3,4,6,10,11
