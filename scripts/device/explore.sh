#!/usr/bin/env bash
# Schedule search on the GPU machine (`xtask explore`, binaries from build.sh in .gpu/): for each
# op and shape, the size class the library runs there and the fastest baseline's time are taken
# from docs/bench/results-h100.json, or, with BASELINE=NAME (cublas, say), both from an
# `xtask bench` run of the library and that baseline at the shape on this machine; then SAMPLES
# schedules near the class's own (or anywhere, with ANYWHERE=1) are drawn, checked and timed.
# Each search's report and plot go to $OUT; the outcomes are cached in $OUT/cache, so running
# this again continues an interrupted search.
# Each search runs schedules for at most T_SEARCH seconds less 20 (half of it under 40 seconds:
# `--time-limit`), so that its report and plot are written before the command's own limit.
# Usage: OUT=out [SAMPLES=64] [DTYPE=f16] [BUDGET=0.1] [T_SEARCH=540] [BASELINE=cublas] \
#        scripts/device/explore.sh OP:SHAPE...
#   e.g. scripts/device/explore.sh softmax:4096x4096 layernorm:8192x1000 dyt:4096x4096
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
DTYPE=${DTYPE:-f16}
for job in "$@"; do
  op=${job%%:*} shape=${job#*:}
  if [ -n "${BASELINE:-}" ]; then
    # The bench's row: | op | kernel | shape | dtype | DT ms | rate | runs | best baseline | its ms | ...
    row=$(timeout 300 .gpu/xtask bench --op "$op" --dtype "$DTYPE" --shape "$shape" --baseline "$BASELINE" --budget 0.2 2>&1 |
      grep -E "^\| $op \|" | head -1)
    echo "=== $op $shape $DTYPE, measured here: $row"
    read -r kernel baseline < <(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); gsub(/ /, "", $10); print ($3 == "" ? "?" : $3), $10}')
  else
    read -r kernel baseline < <(python3 - "$op" "$shape" "$DTYPE" <<'PY'
import json, sys
op, shape, dtype = sys.argv[1:]
for r in json.load(open("docs/bench/results-h100.json")):
    if (r["op"], r["shape"], r["dtype"]) == (op, shape, dtype):
        print(r["kernel"], r.get("best_ms") or "")
        break
else:
    print("?", "")
PY
)
  fi
  if [ "${kernel:-?}" = "?" ]; then echo "=== $op $shape $DTYPE: no bench row"; continue; fi
  spec=dt-kernels/specs/$op.dt
  echo "=== $op $shape $DTYPE: kernel $kernel, fastest baseline ${baseline:-none} ms ($(date +%T))"
  timeout "${T_SEARCH:-540}" .gpu/xtask explore "$spec" --kernel "$kernel" --shape "$shape" --dtype "$DTYPE" \
    --samples "${SAMPLES:-64}" --budget "${BUDGET:-0.1}" --cache "$OUT/cache" ${baseline:+--baseline-ms "$baseline"} \
    --time-limit "$(( ${T_SEARCH:-540} > 40 ? ${T_SEARCH:-540} - 20 : ${T_SEARCH:-540} / 2 ))" \
    ${ANYWHERE:+--anywhere} --plot "$OUT/explore-$op-$shape-$DTYPE.svg" > "$OUT/explore-$op-$shape-$DTYPE.txt" 2> "$OUT/explore-$op-$shape-$DTYPE.log"
  echo "rc $?"; cat "$OUT/explore-$op-$shape-$DTYPE.txt"
done
