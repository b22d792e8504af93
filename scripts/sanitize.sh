#!/usr/bin/env bash
# compute-sanitizer's memcheck, racecheck and synccheck over every kernel the compiler builds:
# dt-codegen's gpu_matches_reference test lowers every library and test spec, emits every
# kernel, element type and twin, and runs each at sizes drawn from 1, primes and non-multiples of
# every tile (clamped to the kernel's bounds), against the reference evaluator. Here it runs each
# spec's own schedule only, at small sizes, once per tool; the kernel list is the compiler's, so
# a kernel added to a spec is swept with no change here.
# Usage: scripts/sanitize.sh PATH/TO/gmr   (the test binary that scripts/device/build.sh copies to
# .gpu/gmr; run from the repository root on a machine with an NVIDIA GPU and compute-sanitizer).
# SANITIZE_TOOLS="memcheck" limits the tools, SANITIZE_SPECS=attention,softmax the specs (paths
# containing one of the names), SANITIZE_DRAWS (default 2) and SANITIZE_MAX_ELEMENTS (default
# 65536, the product of all sizes of a draw) set the sizes. Prints each tool's case count and
# error summary, and exits non-zero if any tool found an error or a case failed.
set -uo pipefail
GMR=${1:?usage: scripts/sanitize.sh PATH/TO/gmr}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$SAN" >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
LOGS=${SANITIZE_LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"
status=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
  start=$(date +%s)
  log="$LOGS/$tool.log"
  DT_GPU_SPECS=${SANITIZE_SPECS:-} DT_GPU_RANDOM_SCHEDULES=0 DT_GPU_SIZE_DRAWS=${SANITIZE_DRAWS:-2} \
    DT_GPU_MAX_ELEMENTS=${SANITIZE_MAX_ELEMENTS:-65536} \
    "$SAN" --tool "$tool" --error-exitcode 9 "$GMR" cuda_matches_reference_evaluator --exact --nocapture --test-threads 1 >"$log" 2>&1
  rc=$?
  cases=$(grep -a -o "[0-9]* GPU cases over [0-9]* kernel instances" "$log" | tail -1)
  summary=$(grep -a -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  echo "$tool: rc $rc, ${cases:-no case summary}, ${summary:-no error summary}, $(( $(date +%s) - start )) s (log: $log)"
  if [ $rc != 0 ]; then
    status=1
    grep -a -m 20 -E "=========|failed|panicked" "$log"
  fi
done
exit $status
