#!/usr/bin/env bash
# Times schedule variants of one size class of a library spec on the GPU machine, from the xtask
# and dtc binaries carried in .gpu/: each variant is a copy of the specs, the class's schedule
# block written out (`dtc emit --target spec`), with some of its schedule statements replaced,
# benched from its own directory (the bench compiles the specs of its working directory), one
# after the other in one run.
# Usage (from the repository root):
#   OP=matmul SPEC=matmul CLASS=mm_128_f32 DTYPE=f32 VARIANTS='NAME|PRIM(ARGS); PRIM(ARGS)...
#   NAME|...' [BASELINE=cublas] [EDIT='sed expression'] scripts/device/schedule_variants.sh SHAPE...
# Each variant line names the variant and lists statements `PRIM(ARGS)` (block, tensorize,
# num_warps, num_stages, ...): the class's statement of that primitive becomes `CLASS.PRIM(ARGS);`,
# or, where the class has none, is added before its `compile()`
# (CLASS may list several classes, separated by spaces, to change them alike).
# EDIT is applied to the spec of every variant too (to bound another class out of the way).
# The rows go to stdout and each variant's JSON to $OUT.
set -uo pipefail
R=$PWD
OUT=${OUT:-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
: "${OP:?}" "${SPEC:?}" "${CLASS:?}" "${DTYPE:?}" "${VARIANTS:?}"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
shape_args=()
for s in "$@"; do shape_args+=(--shape "$s"); done
while IFS="|" read -r name statements; do
  name=$(echo "$name" | sed 's/^ *//; s/ *$//')
  [ -n "$name" ] || continue
  [[ $name =~ ^[A-Za-z0-9_.+-]+$ && $name != *..* ]] || { echo "$name: a variant name is letters, digits and _.+- only"; continue; }
  dir=/tmp/schedule_variants/${CLASS// /+}/$name
  rm -rf "$dir" && mkdir -p "$dir/dt-kernels" && cp -r "$R/bench" "$dir/" && cp -r "$R/dt-kernels/specs" "$dir/dt-kernels/"
  spec=$dir/dt-kernels/specs/$SPEC.dt
  # Schedule blocks written out, so that each class's statements are lines `CLASS.PRIM(...);`.
  "$R/.gpu/dtc" emit --target spec "$spec" -o "$spec.flat" && mv "$spec.flat" "$spec" || { echo "$name: dtc emit --target spec failed"; continue; }
  IFS=";" read -ra stmts <<<"$statements"
  for st in "${stmts[@]}"; do
    st=$(echo "$st" | sed 's/^ *//; s/ *$//')
    [ -n "$st" ] || continue
    prim=${st%%(*}
    # `|` delimits the substitution (a statement holds none: it separates name and statements);
    # `&` and `\` in the statement stand for themselves.
    for class in $CLASS; do
      replacement=$(printf '%s' "$class.$st;" | sed 's/[&\\|]/\\&/g')
      if grep -q "^$class\.$prim(" "$spec"; then
        sed -i "s|^$class\.$prim(.*|$replacement|" "$spec"
      else
        # A statement the class lacks (`requires(sm_90)`, `max_registers(128)`) goes before its
        # `compile()`.
        grep -q "^$class\.compile();" "$spec" || { echo "$name: $class has no compile() statement"; continue 3; }
        sed -i "s|^$class\.compile();|$replacement\n$class.compile();|" "$spec"
      fi
      grep -qxF "$class.$st;" "$spec" || { echo "$name: the edit of $class.$prim failed"; continue 3; }
    done
  done
  [ -z "${EDIT:-}" ] || sed -i "$EDIT" "$spec"
  echo "=== $CLASS $name: $(for class in $CLASS; do grep "^$class\." "$spec" | grep -v compile; done | tr '\n' ' ')"
  (cd "$dir" && timeout "${T_VARIANT:-90}" "$R/.gpu/xtask" bench --op "$OP" --dtype "$DTYPE" --baseline "${BASELINE:-none}" --budget 0.5 \
    ${shape_args[@]+"${shape_args[@]}"} --json "$OUT/${CLASS// /+}_$name.json" </dev/null >"$dir/bench.log" 2>&1
    rc=$?
    grep -E "^\| $OP|rror" "$dir/bench.log"
    [ $rc = 0 ] || echo "$name: the bench exited with $rc (124: past T_VARIANT); its log: $dir/bench.log")
done <<<"$VARIANTS"
