#!/bin/sh
# tests/collectives.sh — libgslrt's groups and collectives against plain
# references (tests/collectives_test.c) on 1, 2, 3 and 4 ranks, each a single
# run of every check; then the errors of bad group declarations.
set -u
status=0
test_bin=${COLLECTIVES_TEST:-tests/collectives_test}
[ -x "$test_bin" ] || { echo "FAIL: no $test_bin (make check builds it)"; exit 1; }
out=$(mktemp "${TMPDIR:-/tmp}/gslcoll.XXXXXX")
trap 'rm -f "$out"' EXIT
for n in 1 2 3 4; do
  if timeout 300 $MPIEXEC -n $n "$test_bin" --quiet; then
    echo "PASS: $n rank(s)"
  else
    echo "FAIL: $n rank(s)"; status=1
  fi
done
# bad groups: an error naming the problem, exit status 1, on every rank count
for bad in repeat:"named twice in one group" range:"names mesh axis"; do
  kind=${bad%%:*} want=${bad#*:}
  for n in 1 2; do
    COLLECTIVES_TEST_BAD=$kind timeout 120 $MPIEXEC -n $n "$test_bin" --quiet >"$out" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q "error: .*$want" "$out"; then
      echo "PASS: bad group ($kind) on $n rank(s)"
    else
      echo "FAIL: bad group ($kind) on $n rank(s): exit status $rc, output:"; cat "$out"; status=1
    fi
  done
done
exit $status
