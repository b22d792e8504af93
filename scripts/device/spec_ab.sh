#!/usr/bin/env bash
# Times the same bench rows with variants of one library spec, alternating ROUNDS times in one
# run on the GPU machine with one bench binary (.gpu/xtask, which compiles the checkout's specs
# when it runs): each variant file is copied over dt-kernels/specs/SPEC.dt in turn (the
# checkout's own spec is the variant `base`), and the spec is put back at the end.
# Usage: OP=attention SPEC=attention [DTYPES=f16] [BASELINE=sdpa_cudnn] [ROUNDS=2] \
#        scripts/device/spec_ab.sh VARIANT.dt... -- SHAPE...
# T_RUN (seconds, default 150) bounds each bench run: its first compile of a spec it has not
# built before (NVRTC) takes most of a minute for attention, more than 70 seconds on an H200.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${OP:?}" "${SPEC:?}"
spec="dt-kernels/specs/$SPEC.dt"
base=$(mktemp)
cp "$spec" "$base"
trap 'cp "$base" "$spec"' EXIT
variants=("$base")
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
shift
# shellcheck source=scripts/device/ab_common.sh
. "$(dirname "$0")/ab_common.sh"
bench_args "$@"
for round in $(seq "${ROUNDS:-2}"); do
  for v in "${variants[@]}"; do
    cp "$v" "$spec"
    if [ "$v" = "$base" ]; then echo "== round $round: base"; else echo "== round $round: $v"; fi
    bench_rows
  done
done
