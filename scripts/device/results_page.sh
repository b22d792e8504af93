#!/usr/bin/env bash
# The bench of the library's ops (attention aside: scripts/device/attention.sh has its page) with
# every baseline, kept as it goes: JSON and results page under $OUT (`cargo xtask plot` draws the JSON).
# A run stopped by its time limit is finished by running this again with RESUME=path/to/json.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
resume=()
[ -n "${RESUME:-}" ] && resume=(--resume "$RESUME")
timeout ${T_BENCH:-540} .gpu/xtask bench --op matmul --op mm_leaky_relu --op softmax --op layernorm --op dyt --budget 0.5 \
  --json "$OUT/results-h100.json" --markdown "$OUT/results-h100.md" "${resume[@]}" 2>&1 | tee "$OUT/bench.log" | tail -12
