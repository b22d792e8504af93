#!/usr/bin/env bash
# Times the same bench rows with and without an environment setting that the compiler reads
# while the bench compiles the specs (a switch under trial), alternating ROUNDS times in one run
# on the GPU machine with one bench binary (.gpu/xtask): runs "a" without VAR_B, "b" with it.
# Usage: OP=attention VAR_B=NAME=VALUE [DTYPES=f16] [BASELINE=sdpa_cudnn] [ROUNDS=2] \
#        scripts/device/env_ab.sh SHAPE...
# T_RUN (seconds, default 150) bounds each bench run (its NVRTC compile of the spec included).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${OP:?}" "${VAR_B:?}"
args=(--op "$OP" --baseline "${BASELINE:-sdpa_cudnn}" --budget "${BUDGET:-0.3}")
for t in ${DTYPES:-f16}; do args+=(--dtype "$t"); done
for s in "$@"; do args+=(--shape "$s"); done
for round in $(seq "${ROUNDS:-2}"); do
  echo "== round $round: a"
  timeout "${T_RUN:-150}" .gpu/xtask bench "${args[@]}" 2>&1 | grep -E "^\| $OP|rror" | cut -d"|" -f3,4,5,6,10,11
  echo "== round $round: b ($VAR_B)"
  timeout "${T_RUN:-150}" env "$VAR_B" .gpu/xtask bench "${args[@]}" 2>&1 | grep -E "^\| $OP|rror" | cut -d"|" -f3,4,5,6,10,11
done
