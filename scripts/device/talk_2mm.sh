#!/usr/bin/env bash
# The talk's two-matmul listing (dt-codegen/tests/specs/talk_2mm.dt, _2mm = (A B) C with the
# product A B kept on chip) against two cuBLAS calls, torch.mm(torch.mm(A, B), C) with TF32 off,
# on the GPU machine (binaries from scripts/device/build.sh in .gpu/). For each shape M x N x K x L
# and type: torch's time (bench/baselines.py's timer, no L2 flush, as the explorer times) in one
# process, then the listing's own schedule (the class a launch takes) timed by `xtask explore
# --samples 1` against it.
# The listing builds f32 (it names no type); f16 runs a copy of it with `_2mm.dtypes(f16);` added.
# LISTING names another schedule of the same algorithm (talk_2mm_blocked.dt, next to this script).
# XTASK names another build of the explorer (an A/B of two compilers). SAMPLES > 1 searches
# schedules near the listing's (TIME_LIMIT seconds at most per shape) and prints the best.
# Usage: OUT=out [DTYPES="f32 f16"] [LISTING=spec.dt] [XTASK=.gpu/xtask] scripts/device/talk_2mm.sh 64x128x32x32 512x1024x32x32 ...
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
listing=${LISTING:-dt-codegen/tests/specs/talk_2mm.dt}
sed 's/^_2mm.compile_to_kernel();/_2mm.dtypes(f16);\n&/' "$listing" > "$OUT/talk_2mm_f16.dt"
grep -q "dtypes(f16)" "$OUT/talk_2mm_f16.dt" || { echo "$listing: no \`_2mm.compile_to_kernel();\` line to add f16 before"; exit 1; }
for dtype in ${DTYPES:-f32 f16}; do
  spec=$listing
  [ "$dtype" = f32 ] || spec=$OUT/talk_2mm_f16.dt
  for shape in "$@"; do
    cublas=$(python3 - "$shape" "$dtype" <<'PY'
import sys
import torch
sys.path.insert(0, "bench")
import baselines

m, n, k, l = map(int, sys.argv[1].split("x"))
dt = {"f32": torch.float32, "f16": torch.float16}[sys.argv[2]]
torch.backends.cuda.matmul.allow_tf32 = False
g = torch.Generator(device="cuda").manual_seed(0)
a, b, c = (torch.randn(r, s, device="cuda", dtype=dt, generator=g) for r, s in ((m, k), (k, l), (l, n)))
print(f"{baselines.time_fn(lambda: torch.mm(torch.mm(a, b), c), 50, 5, False):.6f}")
PY
)
    # The class a launch runs: the listing's `l:0` is built for l up to 32, 64 and 128.
    l=${shape##*x}
    kernel=_2mm
    [ "$l" -le 64 ] && kernel=_2mm_64l
    [ "$l" -le 32 ] && kernel=_2mm_32l
    # A LISTING that bounds l has no such classes.
    "${DTC:-.gpu/dtc}" emit --target spec "$spec" | grep -q "^$kernel\.compile" || kernel=_2mm
    echo "=== $kernel $shape $dtype: two cuBLAS calls ${cublas:-failed} ms"
    timeout "${T_SHAPE:-120}" "${XTASK:-.gpu/xtask}" explore "$spec" --kernel "$kernel" --shape "$shape" --dtype "$dtype" \
      --samples "${SAMPLES:-1}" ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"} \
      --budget "${BUDGET:-0.2}" --cache "$OUT/cache" ${cublas:+--baseline-ms "$cublas"} > "$OUT/explore.log" 2>&1
    if [ "${SAMPLES:-1}" = 1 ]; then
      grep -E "spec's own schedule:|against the baseline|invalid|wrong|failed:" "$OUT/explore.log" | head -4
    else
      # A search: the report, with the best schedule.
      sed -n '/^explore /,$p' "$OUT/explore.log" | grep -vE "^a schedule that" | head -30
    fi
  done
done
