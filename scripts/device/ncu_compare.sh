#!/usr/bin/env bash
# Profiles, with the same ncu metrics, DT's kernel in a bench run of .gpu/xtask and the kernels
# cuBLAS runs for torch's matmul at the same shape (scripts/device/torch_matmul.py), one launch
# each after warm-up: duration, DRAM and L2 throughput, bytes read from DRAM, tensor pipe,
# long-scoreboard stalls, grid, registers.
# Usage: KERNEL=mm_90a_m16_split SHAPE=16x4096x4096 [OP=matmul] [DTYPE=f16] scripts/device/ncu_compare.sh
# STALLS=1 adds the warp-state breakdown: each stall reason in cycles per issued instruction.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${KERNEL:?}" "${SHAPE:?}"
metrics="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum"
metrics+=",lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
metrics+=",smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,launch__grid_size"
metrics+=",launch__block_size,launch__registers_per_thread,sm__throughput.avg.pct_of_peak_sustained_elapsed"
if [ -n "${STALLS:-}" ]; then
  for r in barrier membar sleeping wait long_scoreboard short_scoreboard math_pipe_throttle mio_throttle \
    lg_throttle dispatch_stall no_instruction branch_resolving drain misc not_selected selected; do
    metrics+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  metrics+=",smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active"
fi
# One line per profiled kernel: its name, then each metric's name (shortened), unit and value.
lines() {
  grep -E "^  [A-Za-z_].*\(|^ +(gpu__|dram__|lts__|sm__|smsp__|launch__)" |
    sed -E 's/^  ([A-Za-z0-9_]+).*/@\1/; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//;
            s/.avg.pct_of_peak_sustained_(elapsed|active)//; s/ +/ /g' |
    tr '\n' ' ' | sed 's/ @/\n/g; s/^@//'
  echo
}
echo "== DT: $KERNEL"
timeout "${T_RUN:-200}" ncu --clock-control none --kernel-name "regex:$KERNEL" --launch-skip 2 --launch-count 1 \
  --metrics "$metrics" .gpu/xtask bench --op "${OP:-matmul}" --dtype "${DTYPE:-f16}" --baseline cublas \
  --budget 0.05 --shape "$SHAPE" 2>&1 | lines
echo "== torch (cuBLAS)"
timeout "${T_RUN:-200}" ncu --clock-control none --kernel-name "regex:${BASE_KERNEL:-gemm|gemv|splitK|xmma|cutlass|Kernel}" \
  --launch-skip 6 --launch-count "${BASE_LAUNCHES:-2}" --metrics "$metrics" \
  python3 scripts/device/torch_matmul.py "$SHAPE" "${DTYPE:-f16}" 2>&1 | lines
