#!/usr/bin/env bash
# Times the same bench rows with variants of one library spec, alternating ROUNDS times in one
# run on the GPU machine with one bench binary (.gpu/xtask, which compiles the checkout's specs
# when it runs): each variant file is copied over dt-kernels/specs/SPEC.dt in turn (the
# checkout's own spec is the variant `base`), and the spec is put back at the end.
# Usage: OP=attention SPEC=attention [DTYPES=f16] [BASELINE=sdpa_cudnn] [ROUNDS=2] \
#        scripts/device/spec_ab.sh VARIANT.dt... -- SHAPE...
# T_RUN (seconds, default 150) bounds each bench run, which compiles (NVRTC) each kernel its rows
# run; bench binaries before 91bc6a1 compile a spec's whole file, most of a minute for attention.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${OP:?}" "${SPEC:?}"
spec="dt-kernels/specs/$SPEC.dt"
base=$(mktemp)
cp "$spec" "$base"
trap 'cp "$base" "$spec"' EXIT
# One bench run with variant file $2 as the spec, in round $1.
run_variant() {
  cp "$2" "$spec"
  if [ "$2" = "$base" ]; then echo "== round $1: base"; else echo "== round $1: $2"; fi
  bench_rows
}
# shellcheck source=scripts/device/ab_common.sh
. "$(dirname "$0")/ab_common.sh"
ab_rounds run_variant "$base" "$@"
