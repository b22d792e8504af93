#!/usr/bin/env bash
# Times the same bench rows with and without environment settings that the compiler reads while
# the bench compiles the specs (switches under trial), alternating ROUNDS times in one run on the
# GPU machine with one bench binary (.gpu/xtask): the variant `base` has none of them, each other
# variant the settings of its argument ("NAME=VALUE [NAME=VALUE...]").
# Usage: OP=attention [DTYPES=f16] [BASELINE=sdpa_cudnn] [ROUNDS=2] \
#        scripts/device/env_ab.sh "NAME=VALUE..." ... -- SHAPE...
# T_RUN (seconds, default 150) bounds each bench run (its NVRTC compile of the spec included).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${OP:?}"
variants=("")
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
shift
args=(--op "$OP" --baseline "${BASELINE:-sdpa_cudnn}" --budget "${BUDGET:-0.3}")
for t in ${DTYPES:-f16}; do args+=(--dtype "$t"); done
for s in "$@"; do args+=(--shape "$s"); done
for round in $(seq "${ROUNDS:-2}"); do
  for v in "${variants[@]}"; do
    echo "== round $round: ${v:-base}"
    # shellcheck disable=SC2086 # each variant is a list of settings
    timeout "${T_RUN:-150}" env $v .gpu/xtask bench "${args[@]}" 2>&1 | grep -E "^\| $OP|rror" | cut -d"|" -f3,4,5,6,10,11
  done
done
