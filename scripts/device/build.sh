#!/usr/bin/env bash
# Builds, on a machine with Rust, the binaries the GPU machine runs (it has no Rust) and copies
# them into .gpu/ (git-ignored; name it in the device run's `carry`):
#   .gpu/xtask  the bench (`xtask bench`) and plots
#   .gpu/dtc    the compiler's command line
#   .gpu/api    dt-kernels' api_matches_reference test binary (the library on the GPU)
#   .gpu/gmr    dt-codegen's gpu_matches_reference test binary (every spec on the GPU)
# The bench reads bench/baselines.py from the checkout it runs in, which the device run copies.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu
# nvcc (from .ci/install-toolchains.sh) makes the library's fatbins; without it the binaries
# compile every kernel with NVRTC when first launched, which the GPU tests then spend their time
# limits on.
[ -f .venv/toolchains.env ] && source .venv/toolchains.env
if [ -z "${NVCC:-}" ] && ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "build.sh: no nvcc (run .ci/install-toolchains.sh): the kernels will be compiled by NVRTC at run time" >&2
fi
cargo build --release -q -p xtask && cargo build --release -q -p dt-codegen --bin dtc
cp target/release/xtask target/release/dtc .gpu/
# A test binary's path holds a hash: ask cargo for it.
test_binary() {
  cargo test --release -q -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2"
}
cp "$(test_binary dt-kernels api_matches_reference)" .gpu/api
cp "$(test_binary dt-codegen gpu_matches_reference)" .gpu/gmr
ls -la .gpu/
