#!/usr/bin/env bash
# Profiles one kernel with ncu in a bench process, with the checkout's spec and then with each
# variant file copied over it, ROUNDS times (default 2), on the GPU machine with each bench binary
# of BINS (default .gpu/xtask; each compiles the checkout's specs when it runs, so that
# BINS=".gpu/xtask_before .gpu/xtask" compares two compilers on one spec). Prints, per run, the
# kernel's duration, the tensor pipe's activity, L2's throughput, the issue slots' activity and
# the stalls at barriers, on `wgmma` and on fixed latencies (cycles per issued instruction) of
# LAUNCHES launches (default 2), which repeat far more closely than the bench's times between
# processes.
# Usage: KERNEL=attention_90a_128_f16 SHAPE=4x32x4096x128 [OP=attention] [SPEC=attention] \
#        [DTYPE=f16] [BINS=...] scripts/device/ncu_ab.sh [VARIANT.dt...]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${KERNEL:?}" "${SHAPE:?}"
OP=${OP:-attention}
spec="dt-kernels/specs/${SPEC:-attention}.dt"
base=$(mktemp)
cp "$spec" "$base"
trap 'cp "$base" "$spec"' EXIT
metrics="regex:smsp__average_warps_issue_stalled_(barrier|gmma|wait)_per_issue_active.ratio"
metrics+=",sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
# How busy L2 and the issue slots are (decision 0041: attention at head dimension 64 keeps L2
# at 73% of its peak).
metrics+=",lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active"
for round in $(seq "${ROUNDS:-2}"); do
  for v in "$base" "$@"; do
    cp "$v" "$spec"
    for bin in ${BINS:-.gpu/xtask}; do
      if [ "$v" = "$base" ]; then echo "== round $round: base, $bin"; else echo "== round $round: $v, $bin"; fi
      timeout "${T_RUN:-250}" ncu --clock-control none --kernel-name "regex:$KERNEL" --launch-skip 2 \
        --launch-count "${LAUNCHES:-2}" --metrics "$metrics" \
        "$bin" bench --op "$OP" --dtype "${DTYPE:-f16}" --baseline sdpa_cudnn --budget 0.05 --shape "$SHAPE" 2>&1 |
        grep -E "^ +(smsp|sm__|gpu__|lts__)" |
        sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/.avg.pct_of_peak_sustained_(active|elapsed)//; s/ +/ /g' |
        paste -sd' '
    done
  done
done
