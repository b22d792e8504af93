#!/bin/bash
# Emits every spec of a folder (`cargo xtask variants --out DIR`) as CUDA and HIP with two dtc
# builds and lists each spec whose text, diagnostics or exit status differ between them.
# Usage: scripts/compare_compilers.sh OLD_DTC NEW_DTC DIR
set -u
old=$1; new=$2; dir=$3
specs=0; diffs=0
for f in "$dir"/*.dt; do
  specs=$((specs + 1))
  for target in cuda hip; do
    a=$("$old" emit --target "$target" "$f" 2>&1; echo "exit $?")
    b=$("$new" emit --target "$target" "$f" 2>&1; echo "exit $?")
    if [ "$a" != "$b" ]; then
      echo "differs: $target $f"
      diffs=$((diffs + 1))
    fi
  done
done
echo "$specs specs, $diffs differences"
[ "$diffs" -eq 0 ]
