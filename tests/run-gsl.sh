#!/bin/sh
# tests/run-gsl.sh — runs one .gsl test for automake's harness (GSL_LOG_COMPILER).
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
# A shape "[]" is a scalar's.
# Values may span several directive lines: a line "#+ v v v" continues the last.
set -u
test=$1
dir=$(cd "$(dirname "$test")" && pwd)
name=$(basename "$test" .gsl)
work=$(mktemp -d "${TMPDIR:-/tmp}/gsltest.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $name: $*"; exit 1; }

case $dir in
*/errors)
  (cd "$dir" && "$GSLC" "$name.gsl" -o "$work/prog") >"$work/out" 2>"$work/err"
  rc=$?
  [ $rc -eq 1 ] || { cat "$work/err"; fail "gslc exited $rc, expected 1"; }
  if ! diff -u "$dir/$name.err" "$work/err"; then
    fail "diagnostics differ from $name.err"
  fi
  echo "PASS: $name"
  exit 0 ;;
esac

# join continuation lines, then read the directives
sed -n 's/^# *\([A-Z][A-Z]*\) \(.*\)$/\1 \2/p; s/^#+ \(.*\)$/+ \1/p' "$test" |
  awk '/^\+ /{ line = line " " substr($0, 3); next } { if (line != "") print line; line = $0 } END { if (line != "") print line }' \
  >"$work/directives"

np=1; args=; gslc_args=; want_exit=0; program=$test
shape() { [ "$1" = "[]" ] && echo "" || echo "$1"; }
while IFS= read -r line; do
  key=${line%% *}; rest=${line#* }
  case $key in
  NP) np=$rest ;;
  ARGS) args="$args $rest" ;;
  GSLC) gslc_args="$gslc_args $rest" ;;
  EXIT) want_exit=$rest ;;
  PROGRAM) program=$dir/$rest ;;
  INPUT)
    set -- ${rest%%=*}
    vals=${rest#*=}
    echo $vals | "$NPYTOOL" write "$work/$1.npy" "$2" "$(shape "$3")" - || fail "cannot write input $1"
    args="$args --input $1=$work/$1.npy" ;;
  EXPECT)
    set -- ${rest%%=*}
    args="$args --output $1=$work/$1.npy" ;;
  esac
done <"$work/directives"

# shellcheck disable=SC2086
"$GSLC" $gslc_args "$program" -o "$work/prog" || fail "gslc failed"
# shellcheck disable=SC2086
(cd "$work" && timeout 120 $MPIEXEC -n "$np" ./prog $args) >"$work/stdout" 2>"$work/stderr"
rc=$?
cat "$work/stdout"
[ $rc -eq "$want_exit" ] || { cat "$work/stderr"; fail "program exited $rc, expected $want_exit"; }

status=0
while IFS= read -r line; do
  key=${line%% *}; rest=${line#* }
  case $key in
  EXPECT)
    set -- ${rest%%=*}
    vals=${rest#*=}
    echo $vals | "$NPYTOOL" compare "$work/$1.npy" "$2" "$(shape "$3")" --rtol 1e-5 --atol 1e-6 - ||
      { echo "FAIL: $name: output $1 differs"; status=1; } ;;
  STDERR)
    grep -qF -- "$rest" "$work/stderr" ||
      { cat "$work/stderr"; echo "FAIL: $name: stderr lacks: $rest"; status=1; } ;;
  CHECK)
    ${CC:-cc} -std=c11 -O1 -o "$work/check" "$dir/$rest" -lm || fail "cannot build $rest"
    (cd "$work" && ./check) || { echo "FAIL: $name: $rest found a difference"; status=1; } ;;
  esac
done <"$work/directives"
[ $status -eq 0 ] && echo "PASS: $name"
exit $status
