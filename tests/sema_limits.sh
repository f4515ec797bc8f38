#!/bin/sh
# tests/sema_limits.sh — sema on long but legal programs: chains of 9000
# terms (a + a + ..., x[0][0]..., - - ... x) compile, or stop at a clean
# located error, with a 1 MiB stack (an eighth of the default), and the
# first two also through code generation to programs that run; calls
# nested 4000 deep compile on the default stack; 50 000 lets bind in well
# under the time a linear name lookup takes (15 s); errors in a body
# inlined 4^9 times stop the elaboration once past the errors shown.
# Each time is as on an idle machine, scaled by tests/lib.sh's slow (a
# busy machine slows the linear and the quadratic alike).
set -u
. "$top_srcdir/tests/lib.sh"

# gen FILE HEAD UNIT N TAIL: HEAD, then UNIT N times, then TAIL
gen() {
  awk -v head="$2" -v unit="$3" -v n="$4" -v tail="$5" \
    'BEGIN { printf "%s", head; for (i = 0; i < n; i++) printf "%s", unit; printf "%s\n", tail }' >"$work/$1"
}
gen add.gsl  'input a: f32[2]
let y = a' ' + a' 9000 '
output y'
gen neg.gsl  'input x: f32[2]
let y = ' '- ' 9000 'x
const K = 2
output y'
gen negk.gsl 'const K = ' '- ' 9000 '7
input x: f32[2]
let y = x * K
output y'
gen idx.gsl  'input x: f32[2, 2]
let y = x' '[0]' 9000 '
output y'
gen call.gsl 'input a: f32[2]
let y = ' 'exp(' 4000 'a'
awk 'BEGIN { for (i = 0; i < 4000; i++) printf ")"; printf "\noutput y\n" }' >>"$work/call.gsl"

# run NAME STACK_KIB WANT: gslc --emit-ir under ulimit -s; WANT is ok or error
run() {
  (ulimit -s "$2" && cd "$work" && "$GSLC" --emit-ir "$1.gsl" >/dev/null 2>"$1.err")
  rc=$?
  case $3 in
  ok) [ $rc -eq 0 ] || fail "$1 with a ${2} KiB stack: exit $rc: $(head -n 1 "$work/$1.err")" ;;
  error)
    [ $rc -eq 1 ] || fail "$1 with a ${2} KiB stack: exit $rc, wanted a clean error"
    grep -q "^$1.gsl:[0-9]*:[0-9]*: error: " "$work/$1.err" || fail "$1: no located error" ;;
  esac
}
for st in 8192 1024; do
  run add $st ok
  run neg $st ok
  run negk $st ok
  run idx $st error
done
run call 8192 ok
grep -q "cannot index a scalar" "$work/idx.err" || fail "idx: $(head -n 1 "$work/idx.err")"
[ "$(grep -c 'error:' "$work/idx.err")" -eq 1 ] || fail "idx: more than one error"

# the constant folds to -7 or 7 by the parity of the minus signs: 9000 is even
(cd "$work" && "$GSLC" --emit-ir negk.gsl) | grep -q 'const 7' || fail "negk: - - ... 7 is not 7"

# the same chains through code generation and run: codegen fuses at most
# a bounded chain of ops into one loop body (plan.c), so its recursion over
# a fused expression stays shallow even with a 1 MiB stack; a + a + ... of
# 9001 terms is 9001 a, and 9000 minus signs give x back
echo "1 2" | "$NPYTOOL" write "$work/in.npy" f32 2 - || fail "cannot write in.npy"
for prog in add neg; do
  (ulimit -s 1024 && cd "$work" && "$GSLC" "$prog.gsl" -o "$prog" 2>"$prog.cg.err") ||
    fail "$prog: gslc with a 1 MiB stack: $(head -n 1 "$work/$prog.cg.err")"
done
(cd "$work" && ./add --input a=in.npy --output y=add.npy --quiet) || fail "add did not run"
echo "9001 18002" | "$NPYTOOL" compare "$work/add.npy" f32 2 --rtol 1e-6 - || fail "add: 9001 a differs"
(cd "$work" && ./neg --input x=in.npy --output y=neg.npy --quiet) || fail "neg did not run"
echo "1 2" | "$NPYTOOL" compare "$work/neg.npy" f32 2 --rtol 0 - || fail "neg: 9000 minus signs differ from x"

awk 'BEGIN { print "input a: f32[2]"; for (i = 0; i < 50000; i++) printf "let v%d = a\n", i;
             print "output v49999" }' >"$work/lets.gsl"
start=$(date +%s)
(cd "$work" && timeout "$(scaled 20)" "$GSLC" --emit-ir lets.gsl >/dev/null) || fail "50000 lets did not compile"
took=$(( $(date +%s) - start ))
[ "$took" -le "$(scaled 3)" ] || fail "50000 lets took ${took} s (at most 3 s on an idle machine, here $(scaled 3))"

# a body with 2000 errors, inlined through ten functions that each call the
# one before four times (4^9 calls): once past the errors shown, nothing
# more is inlined (the fuzzer found this taking 50 s; it takes a fraction
# of a second)
awk 'BEGIN { print "fn f0(x) {\n  return x + 1\n}\nfn f1(x) {"; printf "  return f0(x)";
             for (i = 0; i < 2000; i++) printf " + f0"; print "\n}";
             for (k = 2; k <= 10; k++) printf "fn f%d(x) {\n  return f%d(x) + f%d(x) + f%d(x) + f%d(x)\n}\n", k, k-1, k-1, k-1, k-1;
             print "input a: f32[2]\nlet y = f10(a)\noutput y" }' >"$work/flood.gsl"
start=$(date +%s)
(cd "$work" && timeout "$(scaled 20)" "$GSLC" --emit-ir flood.gsl >/dev/null 2>flood.err)
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 1 ] || fail "a flood of errors through inlined calls: gslc exited $rc, expected 1"
grep -q "too many errors; the first 50 are shown above" "$work/flood.err" || fail "the flood did not end with the count line"
[ "$took" -le "$(scaled 5)" ] || fail "a flood of errors through inlined calls took ${took} s (at most 5 s on an idle machine, here $(scaled 5))"

# a loop of 40000 iterations, each evaluating a sum of 1000 terms (some
# 80 million operations): stopped at 2^25 operations evaluated, a located
# error in well under the 6 s the whole took (the fuzzer found it)
awk 'BEGIN { print "input a: f32[2]\nlet s = 0\nfor i in 0..40000 {"; printf "  let s = i";
             for (k = 0; k < 999; k++) printf " + i"; print "\n}\nlet y = a * s\noutput y" }' >"$work/evals.gsl"
start=$(date +%s)
(cd "$work" && timeout "$(scaled 20)" "$GSLC" --emit-ir evals.gsl >/dev/null 2>evals.err)
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 1 ] && grep -q "^evals.gsl:4:3: error: this statement takes the program past 33554432 operations evaluated while loops unroll" "$work/evals.err" ||
  fail "a long sum in 40000 iterations: exit $rc: $(head -n 1 "$work/evals.err")"
[ "$took" -le "$(scaled 5)" ] || fail "a long sum in 40000 iterations took ${took} s (at most 5 s on an idle machine, here $(scaled 5))"

[ $status -eq 0 ] && pass "sema_limits"
exit $status
