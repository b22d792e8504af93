#!/usr/bin/env bash
# Schedule search (`xtask explore`, binaries from build.sh in .gpu/) against a baseline measured
# on this machine, in this run: for each OP:SHAPE, `xtask bench` times the library and BASELINE
# (default cublas) at the shape, then the library's class there is searched near its own
# schedule with the baseline's time as the comparison. Report, plot and log go to $OUT; the
# outcomes are cached in $OUT/cache (a rerun continues). Each search stops starting schedules
# after T_SEARCH seconds (default 200).
# Usage: OUT=out [SAMPLES=64] [DTYPE=f16] [BUDGET=0.05] [BASELINE=cublas] [T_SEARCH=200] \
#        scripts/device/explore_measured.sh OP:SHAPE...
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
DTYPE=${DTYPE:-f16}
for job in "$@"; do
  op=${job%%:*} shape=${job#*:}
  # The bench's row: | op | kernel | shape | dtype | DT ms | rate | runs | best baseline | its ms | ...
  row=$(timeout 300 .gpu/xtask bench --op "$op" --dtype "$DTYPE" --shape "$shape" --baseline "${BASELINE:-cublas}" --budget 0.2 2>&1 |
    grep -E "^\| $op \|" | head -1)
  echo "=== $op $shape $DTYPE ($(date +%T)): $row"
  kernel=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
  baseline=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $10); print $10}')
  [ -n "$kernel" ] || { echo "no bench row"; continue; }
  name=explore-$op-$shape-$DTYPE
  timeout $(( ${T_SEARCH:-200} + 120 )) .gpu/xtask explore "dt-kernels/specs/$op.dt" --kernel "$kernel" --shape "$shape" \
    --dtype "$DTYPE" --samples "${SAMPLES:-64}" --budget "${BUDGET:-0.05}" --cache "$OUT/cache" --baseline-ms "$baseline" \
    --time-limit "${T_SEARCH:-200}" --plot "$OUT/$name.svg" >"$OUT/$name.txt" 2>"$OUT/$name.log"
  echo "rc $?"
  cat "$OUT/$name.txt"
done
