#!/usr/bin/env bash
# Shows on the GPU machine that an interrupted `xtask bench` keeps its rows and that `--resume`
# finishes the run, then runs the library's GPU tests. Binaries as in hopper_matmul.sh (.gpu/).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
args=(--op matmul --op softmax --dtype f16 --budget 0.5 --baseline torch_eager)
timeout ${T_CUT:-25} .gpu/xtask bench "${args[@]}" --json "$OUT/resume.json" 2>&1 | tail -4
echo "=== stopped (rc $?); rows kept:"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(len(r), 'rows:', [(x['op'], x['shape'], x['status'], len(x['baselines'])) for x in r])" "$OUT/resume.json"
echo "=== resumed"
timeout ${T_RESUME:-240} .gpu/xtask bench "${args[@]}" --resume "$OUT/resume.json" 2>&1 | tee "$OUT/resumed.log" | tail -24
echo "=== GPU tests"
timeout ${T_TESTS:-240} .gpu/api gpu_ hopper nvrtc into 2>&1 | tee "$OUT/tests.log" | grep -E "test result|FAILED|panicked"
