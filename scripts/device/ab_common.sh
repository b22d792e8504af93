# Sourced by spec_ab.sh and env_ab.sh, which time variants of one bench run against each other.
# ab_rounds RUN BASE VARIANT... -- SHAPE...: sets `args` (the bench's arguments, from OP,
# BASELINE, BUDGET, DTYPES and the shapes), then ROUNDS times (default 2) calls
# `RUN ROUND V` for BASE and each variant in turn.
ab_rounds() {
  local run=$1 round v variants=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
  shift
  args=(--op "$OP" --baseline "${BASELINE:-sdpa_cudnn}" --budget "${BUDGET:-0.3}")
  for t in ${DTYPES:-f16}; do args+=(--dtype "$t"); done
  for s in "$@"; do args+=(--shape "$s"); done
  for round in $(seq "${ROUNDS:-2}"); do
    for v in "${variants[@]}"; do "$run" "$round" "$v"; done
  done
}
# bench_rows [NAME=VALUE...]: one run of .gpu/xtask bench with `args` (and the settings given),
# bounded by T_RUN seconds (default 150, its NVRTC compile of the spec included), printing its
# rows of OP (kernel, shape, dtype, DT, baseline, ratio) and any error.
bench_rows() {
  timeout "${T_RUN:-150}" env "$@" .gpu/xtask bench "${args[@]}" 2>&1 | grep -E "^\| $OP|rror" | cut -d"|" -f3,4,5,6,10,11
}
