#!/bin/sh
# tests/run-gsl.sh — runs one .gsl test for automake's harness (GSL_LOG_COMPILER).
#
# tests/spmd/NAME.gsl: gslc --emit-spmd must print NAME.spmd (and --explain
# NAME.explain, --stats NAME.stats, where those files exist): golden
# partitioner tests.
#
# tests/ir/NAME.gsl: gslc --emit-ir must print NAME.ir (the global IR after
# sema and propagation): golden tests of those passes. A comment line
# "# GSLC --precision bf16 ..." gives gslc more options.
#
# tests/grad/NAME.gsl: compiled gradients against finite differences
# (tests/gradcheck.c says how).
#
# tests/errors/NAME.gsl: must fail to compile; gslc's stderr must equal
# NAME.err (a golden file, paths relative to the test's directory).
#
# tests/e2e/NAME.gsl: compiled and run; directives in its comments say how:
#   # INPUT name dtype d0,d1,... = v0 v1 ...     written to name.npy, bound with --input
#   # EXPECT name dtype d0,d1,... = v0 v1 ...    --output name.npy, compared (rtol 1e-5)
#   # ARGS --steps 3 ...                         more options for the program
#   # NP n                                       ranks (default 1)
#   # GSLC -D N=4 ...                            more options for gslc
#   # EXIT n                                     expected exit status (default 0)
#   # STDERR text                                text the program's stderr must contain
#   # CHECK prog.c                               a C reference: built and run in the
#                                                run directory after the program
#   # PROGRAM ../../examples/mlp.gsl             compile that file instead of this one
#   # MESH D=1 D=2 D=4                           run once per mesh (gslc -D D=2 and
#                                                mpirun -n 2, ...); outputs must agree
# A shape "[]" is a scalar's.
# Values may span several directive lines: a line "#+ v v v" continues the last.
set -u
untimed=1 # no limit here is scaled: lib.sh need not measure the load
. "$top_srcdir/tests/lib.sh"
test=$1
dir=$(cd "$(dirname "$test")" && pwd)
name=$(basename "$test" .gsl)

case $dir in
*/spmd)
  # golden per-device programs (and, where NAME.explain exists, reports)
  (cd "$dir" && "$GSLC" --emit-spmd "$name.gsl") >"$work/spmd" 2>&1 || fatal "$name: gslc --emit-spmd failed"
  diff -u "$dir/$name.spmd" "$work/spmd" || fail "$name: --emit-spmd differs from $name.spmd"
  if [ -f "$dir/$name.explain" ]; then
    (cd "$dir" && "$GSLC" --explain "$name.gsl") >"$work/explain" 2>&1 || fatal "$name: gslc --explain failed"
    diff -u "$dir/$name.explain" "$work/explain" || fail "$name: --explain differs"
  fi
  if [ -f "$dir/$name.stats" ]; then
    (cd "$dir" && "$GSLC" --stats "$name.gsl") >"$work/stats" 2>&1 || fatal "$name: gslc --stats failed"
    diff -u "$dir/$name.stats" "$work/stats" || fail "$name: --stats differs"
  fi
  [ $status -eq 0 ] && pass "$name"
  exit $status ;;
*/ir)
  flags=$(sed -n 's/^# GSLC //p' "$test")
  # shellcheck disable=SC2086 # the flags are words
  (cd "$dir" && "$GSLC" $flags --emit-ir "$name.gsl") >"$work/ir" 2>&1 || fatal "$name: gslc --emit-ir failed"
  diff -u "$dir/$name.ir" "$work/ir" || fatal "$name: --emit-ir differs from $name.ir"
  pass "$name"
  exit 0 ;;
*/grad)
  "$GRADCHECK" "$test" || fatal "$name: gradients differ from finite differences"
  pass "$name"
  exit 0 ;;
*/errors)
  (cd "$dir" && "$GSLC" "$name.gsl" -o "$work/prog") >"$work/out" 2>"$work/err"
  rc=$?
  [ $rc -eq 1 ] || { cat "$work/err"; fatal "$name: gslc exited $rc, expected 1"; }
  if ! diff -u "$dir/$name.err" "$work/err"; then
    fatal "$name: diagnostics differ from $name.err"
  fi
  pass "$name"
  exit 0 ;;
esac

# join continuation lines, then read the directives
sed -n 's/^# *\([A-Z][A-Z]*\) \(.*\)$/\1 \2/p; s/^#+ \(.*\)$/+ \1/p' "$test" |
  awk '/^\+ /{ line = line " " substr($0, 3); next } { if (line != "") print line; line = $0 } END { if (line != "") print line }' \
  >"$work/directives"

np=1; args=; gslc_args=; want_exit=0; program=$test; meshes=
shape() { [ "$1" = "[]" ] && echo "" || echo "$1"; }
while IFS= read -r line; do
  key=${line%% *}; rest=${line#* }
  case $key in
  NP) np=$rest ;;
  ARGS) args="$args $rest" ;;
  GSLC) gslc_args="$gslc_args $rest" ;;
  EXIT) want_exit=$rest ;;
  PROGRAM) program=$dir/$rest ;;
  MESH) meshes=$rest ;;
  INPUT)
    set -- ${rest%%=*}
    vals=${rest#*=}
    echo $vals | "$NPYTOOL" write "$work/$1.npy" "$2" "$(shape "$3")" - || fatal "$name: cannot write input $1"
    args="$args --input $1=$work/$1.npy" ;;
  EXPECT)
    set -- ${rest%%=*}
    args="$args --output $1=$1.npy" ;;
  esac
done <"$work/directives"

# Runs the program once, in directory $1, with gslc options $2 on $3 ranks,
# and checks what the directives expect of it.
run_once() {
  run=$1; mkdir -p "$run"
  # shellcheck disable=SC2086
  "$GSLC" $gslc_args $2 "$program" -o "$run/prog" || { echo "FAIL: $name: gslc failed ($2)"; return 1; }
  # shellcheck disable=SC2086
  (cd "$run" && timeout 300 $MPIEXEC -n "$3" ./prog $args) >"$run/stdout" 2>"$run/stderr"
  rc=$?
  cat "$run/stdout"
  [ $rc -eq "$want_exit" ] || { cat "$run/stderr"; echo "FAIL: $name: exited $rc, expected $want_exit (np $3 $2)"; return 1; }
  st=0
  while IFS= read -r line; do
    key=${line%% *}; rest=${line#* }
    case $key in
    EXPECT)
      set -- ${rest%%=*}
      vals=${rest#*=}
      echo $vals | "$NPYTOOL" compare "$run/$1.npy" "$2" "$(shape "$3")" --rtol 1e-5 --atol 1e-6 - ||
        { echo "FAIL: $name: output $1 differs"; st=1; } ;;
    STDERR)
      grep -qF -- "$rest" "$run/stderr" ||
        { cat "$run/stderr"; echo "FAIL: $name: stderr lacks: $rest"; st=1; } ;;
    CHECK)
      [ -x "$work/check" ] || ${CC:-cc} -std=c11 -O1 -o "$work/check" "$dir/$rest" -lm || fatal "$name: cannot build $rest"
      cp "$work"/*.npy "$run/" 2>/dev/null
      (cd "$run" && "$work/check") || { echo "FAIL: $name: $rest found a difference"; st=1; } ;;
    esac
  done <"$work/directives"
  return $st
}

if [ -z "$meshes" ]; then
  run_once "$work/r1" "" "$np" || status=1
else
  # MESH A=1,B=1 A=2,B=1 ...: one run per mesh, sized by -D, on as many
  # ranks as the product of the values; every output must agree with the
  # first run's to 1e-5 relative
  k=0
  for m in $meshes; do
    k=$((k + 1)); defs=; ranks=1
    for kv in $(echo "$m" | tr ',' ' '); do
      defs="$defs -D $kv"; ranks=$((ranks * ${kv#*=}))
    done
    echo "mesh $m: $ranks ranks"
    run_once "$work/r$k" "$defs" "$ranks" || { status=1; continue; }
    [ $k -eq 1 ] && continue
    for out in "$work/r1"/*.npy; do
      [ -f "$out" ] || continue
      f=$(basename "$out")
      case " $(cd "$work" && ls ./*.npy 2>/dev/null | tr '\n' ' ') " in *" ./$f "*) continue ;; esac  # an input
      head=$("$NPYTOOL" print "$out" | sed 1q)
      "$NPYTOOL" print "$out" | sed 1d |
        "$NPYTOOL" compare "$work/r$k/$f" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-5 --atol 1e-6 - ||
        fail "$name: $f on mesh $m differs from mesh $(echo $meshes | cut -d' ' -f1)"
    done
  done
fi
[ $status -eq 0 ] && pass "$name"
exit $status
