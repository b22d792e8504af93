#!/usr/bin/env bash
# Adds Liger-Kernel's baselines (carried as a wheel in .whl/, bench/README.md) to a results run
# made without it: `--resume` takes every measured row and runs the missing baseline only.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cp "${RESUME:?the JSON of the run to finish}" "$OUT/results-h100.json"
timeout ${T_BENCH:-300} .gpu/xtask bench --op matmul --op mm_leaky_relu --op softmax --op layernorm --op dyt --budget 0.5 \
  --baseline liger --resume "$OUT/results-h100.json" --markdown "$OUT/results-h100.md" 2>&1 | tee "$OUT/bench.log" | tail -8
