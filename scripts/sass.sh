#!/usr/bin/env bash
# The SASS of one generated kernel, on a machine without a GPU: cuts kernel KERNEL out of the
# generated CUDA file (the runtime header and helpers stay, the other kernels go), compiles it
# for sm_90a with the project's nvcc (.venv, from .ci/install-toolchains.sh), prints ptxas's
# report (registers, spills, wgmma notes such as C7515/C7519) and the lines of the SASS that
# match PATTERN, and keeps the whole SASS in $OUT/KERNEL.sass. A kernel compiles in seconds
# where the whole file takes minutes, so that where ptxas places waits and barriers can be
# read before a GPU run (docs/decisions/0037-quad-transpose-stores.md). cuobjdump and nvdisasm
# come from PyPI (13.2 reads 13.0 cubins) into a venv of their own.
# Usage: scripts/sass.sh dt-kernels/generated/attention.cu dt_attention_90a_128_f16 ['DEPBAR|HGMMA.*gsb0']
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1 kernel=$2 pattern=${3:-DEPBAR|HGMMA.*gsb0|BAR\.}
OUT=${OUT:-/tmp/dt-sass}
TOOLS=${SASS_TOOLS:-/tmp/dt-sass-tools}
mkdir -p "$OUT"
[ -x "$TOOLS/bin/pip" ] || python3 -m venv "$TOOLS"
bin=$TOOLS/lib/python3*/site-packages/nvidia/cu13/bin
if ! ls $bin/cuobjdump > /dev/null 2>&1; then
  "$TOOLS/bin/pip" install -q nvidia-cuda-cuobjdump==13.2.78 nvidia-cuda-nvdisasm==13.2.78
fi
bin=$(echo $bin)
python3 - "$src" "$kernel" "$OUT/$kernel.cu" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
out, i = [], 0
while i < len(lines):
    if lines[i].startswith('extern "C" __global__'):
        j = i
        while lines[j] != "}":
            j += 1
        if f" {sys.argv[2]}(" in lines[i]:
            out.extend(lines[i : j + 1])
        i = j + 1
        continue
    out.append(lines[i])
    i += 1
open(sys.argv[3], "w").write("\n".join(out))
PY
grep -q "$kernel(" "$OUT/$kernel.cu" || { echo "$src: no kernel $kernel"; exit 1; }
source .venv/toolchains.env
nvcc -cubin -arch=sm_90a -O3 -Xptxas -v -o "$OUT/$kernel.cubin" "$OUT/$kernel.cu" 2>&1 | grep -E "registers|spill|C75"
PATH=$bin:$PATH cuobjdump -sass "$OUT/$kernel.cubin" | grep -v '^\s*/\* 0x' > "$OUT/$kernel.sass"
grep -nE "$pattern" "$OUT/$kernel.sass" | sed -E 's@ +/\* 0x[0-9a-f]+ \*/@@; s/ +/ /g'
