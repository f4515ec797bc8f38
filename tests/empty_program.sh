#!/bin/sh
# tests/empty_program.sh — a program with no statements, and one with only
# a mesh, go through every pass: --emit-ir, --emit-spmd, --explain and a
# build that runs (its step does nothing). Under an ASan+UBSan build of
# gslc this also catches undefined behaviour on empty value and tensor
# lists (it halts on the first report).
set -u
. "$top_srcdir/tests/lib.sh"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1; export UBSAN_OPTIONS

: >"$work/empty.gsl"
printf '# a mesh and nothing on it\nmesh [d = 2]\n' >"$work/mesh_only.gsl"

# Compiles $1.gsl every way; $2 is the mesh line --emit-ir and --emit-spmd
# print (empty: none), $3 the ranks to run it on.
check() {
  for emit in --emit-ir --emit-spmd; do
    (cd "$work" && "$GSLC" $emit "$1.gsl") >"$work/out" 2>"$work/err" ||
      { cat "$work/err"; fatal "gslc $emit $1.gsl failed"; }
    printf '%s' "$2" | cmp -s - "$work/out" || { cat "$work/out" "$work/err"; fatal "gslc $emit $1.gsl printed other text"; }
  done
  (cd "$work" && "$GSLC" --explain "$1.gsl") >"$work/out" 2>"$work/err" ||
    { cat "$work/err"; fatal "gslc --explain $1.gsl failed"; }
  for want in "## collectives (bytes: received per device per step)" "none" \
      "bytes received per device per step: 0" "param and input bytes per device: 0"; do
    grep -qxF "$want" "$work/out" || { cat "$work/out"; fatal "--explain $1.gsl lacks the line: $want"; }
  done
  (cd "$work" && "$GSLC" "$1.gsl" -o "$1") 2>"$work/err" || { cat "$work/err"; fatal "gslc $1.gsl -o $1 failed"; }
  (cd "$work" && timeout 120 $MPIEXEC -n "$3" "./$1") >"$work/run" 2>&1 ||
    { cat "$work/run"; fatal "$1 failed on $3 ranks"; }
}

check empty "" 1
check mesh_only "mesh [d = 2]
" 2
pass "empty_program"
