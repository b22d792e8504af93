# Sourced by spec_ab.sh and env_ab.sh: the bench arguments of an A/B run and one timed bench run.
# bench_args SHAPE...: sets `args` from OP, BASELINE, BUDGET, DTYPES and the shapes.
bench_args() {
  args=(--op "$OP" --baseline "${BASELINE:-sdpa_cudnn}" --budget "${BUDGET:-0.3}")
  for t in ${DTYPES:-f16}; do args+=(--dtype "$t"); done
  for s in "$@"; do args+=(--shape "$s"); done
}
# bench_rows [NAME=VALUE...]: one run of .gpu/xtask bench with `args` (and the settings given),
# bounded by T_RUN seconds (default 150, its NVRTC compile of the spec included), printing its
# rows of OP (kernel, shape, dtype, DT, baseline, ratio) and any error.
bench_rows() {
  timeout "${T_RUN:-150}" env "$@" .gpu/xtask bench "${args[@]}" 2>&1 | grep -E "^\| $OP|rror" | cut -d"|" -f3,4,5,6,10,11
}
