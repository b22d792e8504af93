#!/usr/bin/env bash
# Installs the GPU compilers the project's tests use, on Debian 12 (root), from
# PyPI and Debian apt only. Idempotent: a second run is a fast no-op.
#
#   nvcc 13.0   : pip wheels in $REPO/.venv, exposed as $REPO/.venv/cuda (CUDA_HOME)
#   hipcc 5.2   : Debian's hipcc (clang 15, ROCm 5.2 headers/device libs); gfx90a etc.
#   clang-19    : Debian's clang-19 + lld-19 as a HIP device compiler for gfx942
#                 (MI300), which clang 15 does not know; wrapper .venv/rocm/bin/hipcc-clang19
#
# Writes $REPO/.venv/toolchains.env (export lines); callers `source` it.
# Knobs: PYTHON (interpreter for the venv, default python3),
#        INSTALL_LIBCLANG_DEV=1 (also apt-get install libclang-dev: +30 MB download,
#        +297 MB disk; not needed for bindgen, hipcc already brings libclang1-15),
#        SKIP_CLANG19=1 (no gfx942 compiler).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
ENV_FILE="$VENV/toolchains.env"
PIP_SPECS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
)
APT_BITCODE=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode   # Debian's rocm-device-libs
export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

T_START=$(date +%s.%N)
log() { printf '[install-toolchains] %s\n' "$*" >&2; }
# timed NAME CMD...: runs CMD and logs how long it took.
timed() {
  local name=$1 t0
  shift
  t0=$(date +%s.%N)
  "$@"
  log "$(awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$name" 'BEGIN{printf "%-30s %6.1fs", n, b-a}')"
}

apt_missing() { # prints the packages among "$@" that are not installed
  local p
  for p in "$@"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
      printf '%s ' "$p"
    fi
  done
}

APT_UPDATED=0
apt_install() { # apt_install [apt-get flags...] -- pkgs...: installs only what is missing
  local flags=() pkgs=() missing
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  pkgs=("$@")
  missing=$(apt_missing "${pkgs[@]}")
  [ -z "$missing" ] && return 0
  if [ "$APT_UPDATED" = 0 ]; then
    timed "apt-get update" $SUDO apt-get update -qq
    APT_UPDATED=1
  fi
  # shellcheck disable=SC2086
  timed "apt install ${missing% }" $SUDO apt-get install -y -q -o DPkg::Lock::Timeout=300 \
    "${flags[@]}" $missing >/dev/null
}

# ---------------------------------------------------------------- 1. nvcc (PyPI)
# nvcc preprocesses with the host gcc even for -cubin/-ptx (Debian 12: gcc 12).
apt_install -- g++
PY="${PYTHON:-python3}"
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_install -- python3-venv
    PY=/usr/bin/python3
  fi
  timed "python venv" "$PY" -m venv "$VENV"
fi

STAMP="$VENV/.cuda-pip.stamp"
find_cu13() {
  local d
  for d in "$VENV"/lib/python3*/site-packages/nvidia/cu13; do
    if [ -x "$d/bin/nvcc" ]; then echo "$d"; break; fi
  done
  return 0
}
CU13="$(find_cu13)"
if [ -z "$CU13" ] || [ ! -x "$CU13/bin/nvcc" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "${PIP_SPECS[*]}" ]; then
  timed "pip install nvcc wheels" "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    --no-input "${PIP_SPECS[@]}"
  CU13="$(find_cu13)"
  printf '%s\n' "${PIP_SPECS[*]}" >"$STAMP"
fi
NVCC_REAL="$CU13/bin/nvcc"
[ -x "$NVCC_REAL" ] || { log "nvcc missing at $NVCC_REAL"; exit 1; }

# CUDA_HOME layout. nvcc reads bin/nvcc.profile relative to the *unresolved* bin
# directory it was called from (TOP = bin/..), so bin must be a symlinked
# directory (a symlink to the nvcc file alone loses nvcc.profile). The profile
# points at TOP/include, TOP/include/cccl, TOP/nvvm/{bin/cicc,libdevice}, TOP/lib
# (LD_LIBRARY_PATH) and -L TOP/lib64: the wheels ship lib/, so lib64/ is made
# here, with the unversioned libcudart.so that -lcudart needs.
CUDA_HOME="$VENV/cuda"
rel="${CU13#"$VENV"/}"                 # lib/python3.X/site-packages/nvidia/cu13
mkdir -p "$CUDA_HOME/lib64"
for d in bin include nvvm lib; do
  ln -sfn "../$rel/$d" "$CUDA_HOME/$d"
done
for f in "$CU13"/lib/*; do
  ln -sfn "../../$rel/lib/$(basename "$f")" "$CUDA_HOME/lib64/$(basename "$f")"
done
ln -sfn libcudart.so.13 "$CUDA_HOME/lib64/libcudart.so"
"$CUDA_HOME/bin/nvcc" --version >/dev/null

# ---------------------------------------------------------------- 2. hipcc (apt)
# hipcc pulls clang-15, lld-15, rocm-device-libs, libamdhip64-dev (107 MB
# download, 673 MB on disk). Keep its recommends: the tested set.
apt_install -- hipcc
if [ "${SKIP_CLANG19:-0}" != 1 ]; then
  # gfx942: clang 15 rejects it ("invalid target ID"); clang-19 knows it.
  # clang-offload-bundler is not in clang-19, so the wrapper emits raw ELF code
  # objects (--no-gpu-bundle-output). 49 MB download, 263 MB on disk.
  apt_install --no-install-recommends -- clang-19 lld-19
fi
if [ "${INSTALL_LIBCLANG_DEV:-0}" = 1 ]; then
  apt_install -- libclang-dev
fi

ROCM_DIR="$VENV/rocm"
HIPCC_CLANG19=""
if [ "${SKIP_CLANG19:-0}" != 1 ]; then
  # ROCm 5.2's device libs have no oclc_isa_version_942.bc: make a bitcode dir of
  # symlinks plus a generated one (it only defines __oclc_ISA_version = 9402).
  BC="$ROCM_DIR/amdgcn/bitcode"
  mkdir -p "$BC" "$ROCM_DIR/bin"
  for f in "$APT_BITCODE"/*.bc; do ln -sfn "$f" "$BC/$(basename "$f")"; done
  if [ ! -s "$BC/oclc_isa_version_942.bc" ]; then
    llvm-dis-15 "$APT_BITCODE/oclc_isa_version_940.bc" -o - |
      sed 's/constant i32 9400,/constant i32 9402,/' |
      llvm-as-15 -o "$BC/oclc_isa_version_942.bc.tmp"
    mv "$BC/oclc_isa_version_942.bc.tmp" "$BC/oclc_isa_version_942.bc"
  fi
  HIPCC_CLANG19="$ROCM_DIR/bin/hipcc-clang19"
  cat >"$HIPCC_CLANG19.tmp" <<EOF
#!/usr/bin/env bash
# HIP device compiler for targets Debian's hipcc (clang 15) lacks, e.g. gfx942.
# Written by .ci/install-toolchains.sh. Usage like hipcc for device code:
#   hipcc-clang19 --genco --offload-arch=gfx942 -o k.hsaco k.hip
# --genco here gives a raw ELF code object (hipcc's is a clang offload bundle);
# hipModuleLoad takes both. Compiles HIP sources only (-x hip).
args=()
for a in "\$@"; do
  case "\$a" in
    --genco) args+=(--cuda-device-only --no-gpu-bundle-output) ;;
    *) args+=("\$a") ;;
  esac
done
exec clang++-19 -x hip --rocm-path=/usr --rocm-device-lib-path="$BC" -O3 \\
  -mllvm -amdgpu-early-inline-all=true -mllvm -amdgpu-function-calls=false "\${args[@]}"
EOF
  chmod +x "$HIPCC_CLANG19.tmp"
  mv "$HIPCC_CLANG19.tmp" "$HIPCC_CLANG19"
fi

# ---------------------------------------------------------------- 3. env file
# HIP_PLATFORM=amd is required: Debian has no plain `clang++`, so hipcc's
# auto-detection falls through to "nvidia" as soon as nvcc is on PATH.
cat >"$ENV_FILE.tmp" <<EOF
# Written by .ci/install-toolchains.sh; source it.
export CUDA_HOME="$CUDA_HOME"
export CUDA_PATH="$CUDA_HOME"
export NVCC="$CUDA_HOME/bin/nvcc"
export HIPCC=/usr/bin/hipcc
export HIP_PLATFORM=amd
export HIP_PATH=/usr
export ROCM_PATH=/usr
export DEVICE_LIB_PATH="$APT_BITCODE"
export HIPCC_CLANG19="$HIPCC_CLANG19"
export LIBCLANG_PATH=/usr/lib/llvm-15/lib
case ":\$PATH:" in *":$CUDA_HOME/bin:"*) ;; *) export PATH="$CUDA_HOME/bin:\$PATH" ;; esac
EOF
if [ -n "$HIPCC_CLANG19" ]; then
  echo "case \":\$PATH:\" in *\":$ROCM_DIR/bin:\"*) ;; *) export PATH=\"$ROCM_DIR/bin:\$PATH\" ;; esac" >>"$ENV_FILE.tmp"
fi
mv "$ENV_FILE.tmp" "$ENV_FILE"

# ---------------------------------------------------------------- versions
# shellcheck disable=SC1090
. "$ENV_FILE"
log "nvcc:   $("$NVCC" --version | grep -o "release.*")"
# hipcc --version runs rocm_agent_enumerator, which prints a traceback without a GPU.
log "hipcc:  $("$HIPCC" --version 2>/dev/null | grep -E '^HIP version' || true), $(clang++-15 --version | head -n1)"
if [ -n "$HIPCC_CLANG19" ]; then log "gfx942: $(clang++-19 --version | head -n1)"; fi
log "env:    $ENV_FILE"
log "$(awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN{printf "total %.1fs", b-a}')"
