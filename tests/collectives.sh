#!/bin/sh
# tests/collectives.sh — libgslrt's groups and collectives against plain
# references (tests/collectives_test.c) on 1, 2, 3 and 4 ranks, each a single
# run of every check; then the errors of bad group declarations.
set -u
. "$top_srcdir/tests/lib.sh"
test_bin=${COLLECTIVES_TEST:-tests/collectives_test}
[ -x "$test_bin" ] || fatal "no $test_bin (make check builds it)"
out=$work/out
for n in 1 2 3 4; do
  if timeout 300 $MPIEXEC -n $n "$test_bin" --quiet; then
    pass "$n rank(s)"
  else
    fail "$n rank(s)"
  fi
done
# bad groups: an error naming the problem, exit status 1, on every rank count
for bad in repeat:"named twice in one group" range:"names mesh axis"; do
  kind=${bad%%:*} want=${bad#*:}
  for n in 1 2; do
    COLLECTIVES_TEST_BAD=$kind timeout 120 $MPIEXEC -n $n "$test_bin" --quiet >"$out" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q "error: .*$want" "$out"; then
      pass "bad group ($kind) on $n rank(s)"
    else
      fail "bad group ($kind) on $n rank(s): exit status $rc, output:"; cat "$out"
    fi
  done
done
exit $status
