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
# One bench run with the settings $2 (none for the base), in round $1.
run_variant() {
  echo "== round $1: ${2:-base}"
  # shellcheck disable=SC2086 # a variant is a list of settings
  bench_rows $2
}
# shellcheck source=scripts/device/ab_common.sh
. "$(dirname "$0")/ab_common.sh"
ab_rounds run_variant "" "$@"
