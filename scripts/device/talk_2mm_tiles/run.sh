#!/usr/bin/env bash
# Candidate schedules of the talk's 2mm (w1..w5.dt here) at 4096x4096x64x64 f16, one explore run each
# (the spec's own schedule timed by xtask explore, binaries from scripts/device/build.sh).
# Usage: OUT=out scripts/device/talk_2mm_tiles/run.sh w1 w2 ...
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
for s in "$@"; do
  echo "== $s"
  timeout 60 .gpu/xtask explore scripts/device/talk_2mm_tiles/$s.dt --kernel _2mm_64l --shape 4096x4096x64x64 --dtype f16 --samples 1 --budget 0.1 --cache $OUT/c 2>&1 | grep -E "own schedule:"
done
