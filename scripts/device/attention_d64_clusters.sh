#!/usr/bin/env bash
# Decision 0042's measurement: `attention_90a_64` at 4x32x4096x64 (f16) under ncu, the
# library's class against the classes that halve its L2 traffic, each written from the
# library's spec by editing the class's schedule block:
#   mc      K and V shared over clusters of two query blocks (`map(b, h, e, i)`, `multicast(i:2)`)
#   mc96    the same under `max_registers(96)`
#   q128    128 queries over two warpgroups (`block(... i:128 ...)`, `num_warps(8)`), 2 stages
#   q128s3  the same, 3 stages
# Run on the GPU machine from the repository root with the bench binaries to compare in BINS
# (default .gpu/xtask; decision 0042's rows "last warp refills" used a build with the
# done-count switch that the decision quotes, which is not in the tree).
set -uo pipefail
dir=$(mktemp -d)
python3 - "$dir" <<'PY'
import sys
out = sys.argv[1]
spec = open("dt-kernels/specs/attention.dt").read()
start = spec.index("schedule attention_90a_64 {")
end = spec.index("}", start)
block = spec[start:end]
edits = {
    "mc": [("  attention.num_warps(4);", "  attention.map(b, h, e, i);\n  attention.multicast(i:2);\n  attention.num_warps(4);")],
    "mc96": [("  attention.num_warps(4);", "  attention.map(b, h, e, i);\n  attention.multicast(i:2);\n  attention.max_registers(96);\n  attention.num_warps(4);")],
    "q128": [("i:64, e:64", "i:128, e:64"), ("num_warps(4)", "num_warps(8)")],
    "q128s3": [("i:64, e:64", "i:128, e:64"), ("num_warps(4)", "num_warps(8)"), ("num_stages(2)", "num_stages(3)")],
}
for name, pairs in edits.items():
    b = block
    for old, new in pairs:
        assert old in b, (name, old)
        b = b.replace(old, new, 1)
    open(f"{out}/{name}.dt", "w").write(spec[:start] + b + spec[end:])
PY
KERNEL=attention_90a_64_f16 SHAPE=4x32x4096x64 ROUNDS=${ROUNDS:-1} T_RUN=${T_RUN:-50} BINS=${BINS:-.gpu/xtask} \
  bash scripts/device/ncu_ab.sh "$dir/mc.dt" "$dir/mc96.dt" "$dir/q128.dt" "$dir/q128s3.dt"
