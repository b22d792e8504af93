#!/usr/bin/env bash
# Times the same bench rows with two bench binaries, alternating ROUNDS times in one run on the
# GPU machine: .gpu/xtask_before (built from an earlier commit: `git worktree add /tmp/before
# REV`, `cargo build --release -p xtask` there) and .gpu/xtask (scripts/device/build.sh), each
# against BASELINE in its own process, so that a change is read as the ratio of each row to
# its baseline in the same process. Printed per row: op, kernel, shape, type, DT ms, the
# baseline's ms, DT / baseline and the copy fraction.
# Usage: OP=matmul DTYPES="f16 bf16" [BASELINE=cublas] [ROUNDS=2] [BEFORE_DIR=DIR] \
#        scripts/device/before_after.sh SHAPE...
# OP may list several ops ("softmax layernorm dyt"). The bench compiles the specs of the
# directory it runs in: where the earlier commit's specs or bench/baselines.py differ (the
# earlier compiler may not read today's specs), copy its `dt-kernels/specs` and `bench` into
# BEFORE_DIR (e.g. .gpu/before) and xtask_before runs there.
# BINS (default "xtask_before xtask") names the binaries under .gpu to alternate, for more than
# two variants; every one but xtask runs in BEFORE_DIR.
# T_RUN (seconds, default 150) bounds each bench run, which compiles (NVRTC) each kernel its rows
# run; bench binaries before 91bc6a1 compile a spec's whole file, most of a minute for attention.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
: "${OP:?}"
R=$PWD
args=(--baseline "${BASELINE:-cublas}" --budget "${BUDGET:-0.4}")
for o in $OP; do args+=(--op "$o"); done
for t in ${DTYPES:-f16}; do args+=(--dtype "$t"); done
for s in "$@"; do args+=(--shape "$s"); done
ops=$(echo "$OP" | tr ' ' '|')
for round in $(seq "${ROUNDS:-2}"); do
  for b in ${BINS:-xtask_before xtask}; do
    echo "== round $round: $b"
    dir=$R
    [ "$b" = xtask ] || dir=${BEFORE_DIR:-$R}
    (cd "$dir" && timeout "${T_RUN:-150}" "$R/.gpu/$b" bench "${args[@]}" 2>&1 | grep -E "^\| ($ops) |rror" | cut -d'|' -f2,3,4,5,6,10,11,12)
  done
done
