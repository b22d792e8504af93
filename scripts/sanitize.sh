#!/usr/bin/env bash
# Runs every library kernel through `dtc run --backend cuda` under compute-sanitizer (memcheck,
# racecheck and synccheck), at sizes that are not multiples of any tile, in f32, f16 and bf16;
# dtc picks the size class the library would run on this GPU (on sm_90, the warp-specialized
# matmul classes for the 16-bit matmuls of rows of 16-byte multiples).
# Usage: scripts/sanitize.sh PATH/TO/dtc   (on a machine with an NVIDIA GPU, numpy and
# compute-sanitizer; prints one line per run and a summary "N passed, N failed").
# SANITIZE_SPECS=matmul,mm_leaky_relu limits the runs to those specs, SANITIZE_DTYPES="f16" to
# those element types, SANITIZE_TOOLS="memcheck" to those tools.
set -uo pipefail
DTC=${1:?usage: sanitize.sh PATH/TO/dtc}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$SAN" >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
WORK=$(mktemp -d)
SPECS=$(cd "$(dirname "$0")/../dt-kernels/specs" && pwd)
python3 - "$WORK" <<'PY'
import sys, numpy as np
d = sys.argv[1]; r = np.random.default_rng(3)
def save(name, shape):
    a = r.standard_normal(shape).astype(np.float32)
    np.save(f"{d}/{name}_f32.npy", a); np.save(f"{d}/{name}_f16.npy", a.astype(np.float16))
save("a", (133, 45)); save("b", (45, 70)); save("a2", (70, 300)); save("b2", (300, 50))  # k: 2 and 10 steps
save("a3", (129, 72)); save("b3", (72, 264))  # rows of 16-byte multiples: tensor maps describe them
save("a4", (16, 136)); save("b4", (136, 1000))  # the same, 16 rows
save("x", (37, 1500)); save("w", (1500,)); save("bias", (1500,))
for n in (1000, 3000, 9000, 20000):  # one row length per size class of softmax and layernorm
    save(f"x{n}", (5, n)); save(f"w{n}", (n,)); save(f"bias{n}", (n,))
save("q", (2, 3, 77, 40)); save("k", (2, 3, 61, 40)); save("v", (2, 3, 61, 24))
PY
pass=0; fail=0
run() { # tool spec dtype-label file-dtype extra-args...
  local tool=$1 spec=$2 label=$3 fd=$4; shift 4
  [ -z "${SANITIZE_SPECS:-}" ] || [[ ",$SANITIZE_SPECS," == *",$spec,"* ]] || return 0
  local log="$WORK/$tool-$spec-$label.log"
  if "$SAN" --tool "$tool" --error-exitcode 9 "$DTC" run --backend cuda "$SPECS/$spec.dt" "$@" --output "$WORK/out.npy" >"$log" 2>&1; then
    pass=$((pass+1)); echo "ok    $tool $spec $label"
  else
    fail=$((fail+1)); echo "FAIL  $tool $spec $label"; tail -20 "$log"
  fi
}
for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
  for t in ${SANITIZE_DTYPES:-f32 f16 bf16}; do
    fd=$t; extra=(); [ $t = bf16 ] && { fd=f32; extra=(--dtype bf16); }
    for ab in a:b a2:b2 a3:b3 a4:b4; do
      a=${ab%%:*}; b=${ab##*:}
      run $tool matmul $t-$a $fd --input A=$WORK/${a}_$fd.npy --input B=$WORK/${b}_$fd.npy "${extra[@]}"
      run $tool mm_leaky_relu $t-$a $fd --input A=$WORK/${a}_$fd.npy --input B=$WORK/${b}_$fd.npy "${extra[@]}"
    done
    for class in 1k:1000 4k:3000 16k:9000 any:20000; do
      suffix=_${class%%:*}; [ $suffix = _any ] && suffix=; n=${class##*:}
      # dtc picks the class the library runs for the row length and element type.
      run $tool softmax $t-softmax$suffix $fd --input A=$WORK/x${n}_$fd.npy "${extra[@]}"
      run $tool layernorm $t-layernorm$suffix $fd --input X=$WORK/x${n}_$fd.npy --input W=$WORK/w${n}_$fd.npy --input B=$WORK/bias${n}_$fd.npy --scalar eps=1e-5 "${extra[@]}"
    done
    run $tool dyt $t $fd --input X=$WORK/x_$fd.npy --input W=$WORK/w_$fd.npy --input B=$WORK/bias_$fd.npy --scalar alpha=0.7 "${extra[@]}"
    run $tool dyt $t-dyt_1k $fd --input X=$WORK/x1000_$fd.npy --input W=$WORK/w1000_$fd.npy --input B=$WORK/bias1000_$fd.npy --scalar alpha=0.7 "${extra[@]}"
    for kern in attention attention_causal; do
      q=q; [ $kern = attention_causal ] && q=k   # causal: square scores (seq_q = seq_k)
      run $tool attention $t-$kern $fd --kernel $kern --input Q=$WORK/${q}_$fd.npy --input K=$WORK/k_$fd.npy --input V=$WORK/v_$fd.npy "${extra[@]}"
    done
  done
done
echo "sanitize: $pass passed, $fail failed"
[ $fail = 0 ]
