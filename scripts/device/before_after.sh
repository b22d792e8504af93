#!/usr/bin/env bash
# Times the same bench rows with two bench binaries, alternating ROUNDS times in one run on the
# GPU machine: .gpu/xtask_before (built from an earlier commit: `git worktree add /tmp/before
# REV`, `cargo build --release -p xtask` there) and .gpu/xtask (scripts/device/build.sh), each
# against BASELINE in its own process, so that a change is read as the ratio of each row to
# its baseline in the same process.
# Usage: OP=matmul DTYPES="f16 bf16" [BASELINE=cublas] [ROUNDS=2] scripts/device/before_after.sh SHAPE...
# T_RUN (seconds, default 150) bounds each bench run: its first compile of a spec it has not
# built before (NVRTC) takes most of a minute for attention, more than 70 seconds on an H200.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${OP:?}"
args=(--op "$OP" --baseline "${BASELINE:-cublas}" --budget "${BUDGET:-0.4}")
for t in ${DTYPES:-f16}; do args+=(--dtype "$t"); done
for s in "$@"; do args+=(--shape "$s"); done
for round in $(seq "${ROUNDS:-2}"); do
  for b in xtask_before xtask; do
    echo "== round $round: $b"
    timeout "${T_RUN:-150}" ".gpu/$b" bench "${args[@]}" 2>&1 | grep -E "^\| $OP|rror" | cut -d'|' -f3,4,5,6,10,11
  done
done
