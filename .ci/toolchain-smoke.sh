#!/usr/bin/env bash
# Compiles the smoke kernels in .ci/toolchain-smoke/ with the toolchains that
# .ci/install-toolchains.sh installed (nvcc sm_80/sm_90a, hipcc gfx90a, and
# clang-19 gfx942 when installed), warnings as errors. Exits non-zero on failure.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV_FILE="$REPO/.venv/toolchains.env"
SRC="$REPO/.ci/toolchain-smoke"
if [ ! -f "$ENV_FILE" ]; then
  echo "toolchain-smoke: $ENV_FILE missing; run .ci/install-toolchains.sh first" >&2
  exit 1
fi
# shellcheck disable=SC1090
. "$ENV_FILE"

OUTDIR="$(mktemp -d)"
trap 'rm -rf "$OUTDIR"' EXIT
cd "$OUTDIR"   # nvcc/hipcc drop temporaries in the working directory

# Warnings as errors: nvcc front end (-Werror all-warnings) and ptxas
# (-Xptxas -Werror); hipcc/clang: -Wall -Wextra -Werror.
NVCC_W=(-Werror all-warnings -Xptxas -Werror)
HIP_W=(-Wall -Wextra -Werror)

passed=0 failed=0
check() { # check NAME CMD...
  local name=$1 t0 dt
  shift
  t0=$(date +%s.%N)
  if "$@" >"$OUTDIR/log" 2>&1; then
    passed=$((passed + 1))
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    echo "ok   $name (${dt}s)"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    sed 's/^/     /' "$OUTDIR/log"
  fi
}
ELF=7f454c46
BUNDLE=5f5f434c414e475f4f46464c4f41445f42554e444c455f5f   # __CLANG_OFFLOAD_BUNDLE__

cu="$SRC/smoke.cu"
hip="$SRC/smoke.hip"

check "nvcc -cubin sm_80" \
  bash -c '"$NVCC" -cubin -arch=sm_80 "${@:3}" -o sm80.cubin "$1" && [ "$(head -c4 sm80.cubin | od -An -tx1 | tr -d " \n")" = "$2" ]' _ "$cu" "$ELF" "${NVCC_W[@]}"
check "nvcc -cubin sm_90a" \
  bash -c '"$NVCC" -cubin -gencode=arch=compute_90a,code=sm_90a "${@:3}" -o sm90a.cubin "$1" && [ "$(head -c4 sm90a.cubin | od -An -tx1 | tr -d " \n")" = "$2" ]' _ "$cu" "$ELF" "${NVCC_W[@]}"
check "nvcc -fatbin sm_80+sm_90a+compute_90" \
  "$NVCC" -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
  -gencode arch=compute_90,code=compute_90 "${NVCC_W[@]}" -o smoke.fatbin "$cu"
check "nvcc -ptx sm_90a (mma.sync, cp.async)" \
  bash -c '"$NVCC" -ptx -arch=sm_90a "${@:2}" -o smoke.ptx "$1" && grep -q "^\.target sm_90a" smoke.ptx && grep -q "mma.sync.aligned.m16n8k16" smoke.ptx && grep -q "cp.async.cg.shared.global" smoke.ptx' _ "$cu" "${NVCC_W[@]}"
check "hipcc --genco gfx90a" \
  bash -c '"$HIPCC" --genco --offload-arch=gfx90a "${@:3}" -o gfx90a.hsaco "$1" && [ "$(head -c24 gfx90a.hsaco | od -An -tx1 | tr -d " \n")" = "$2" ]' _ "$hip" "$BUNDLE" "${HIP_W[@]}"
if [ -n "${HIPCC_CLANG19:-}" ]; then
  check "hipcc-clang19 --genco gfx942" \
    bash -c '"$HIPCC_CLANG19" --genco --offload-arch=gfx942 "${@:3}" -o gfx942.hsaco "$1" && [ "$(head -c4 gfx942.hsaco | od -An -tx1 | tr -d " \n")" = "$2" ]' _ "$hip" "$ELF" "${HIP_W[@]}"
fi

# The warning flags really turn warnings into errors.
printf '__global__ void k(float* p) { int unused; p[0] = 1.0f; }\n' >warn.cu
printf '#include <hip/hip_runtime.h>\n__global__ void k(float* p) { int unused; p[0] = 1.0f; }\n' >warn.hip
check "nvcc rejects a warning" bash -c '! "$NVCC" -cubin -arch=sm_80 "$@" -o warn.cubin warn.cu' _ "${NVCC_W[@]}"
check "hipcc rejects a warning" bash -c '! "$HIPCC" --genco --offload-arch=gfx90a "$@" -o warn.hsaco warn.hip' _ "${HIP_W[@]}"

echo "toolchain-smoke: $passed passed, $failed failed"
[ "$failed" = 0 ]
