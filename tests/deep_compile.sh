#!/bin/sh
# tests/deep_compile.sh — compile time of deep trained programs (issue 18,
# item 5). Four programs trained with sgd go through every pass up to the
# buffer plan and its check (gslc --stats) within LIMIT = 25 s each:
#   power  y = x * a * a * ... * a, one factor 32 000 times
#   chain  y = x * a1 * a2 * ... * a32000, a factor of its own each
#   tied   h1 = tanh(x @ w) ... h12000 = tanh(h11999 @ w), one weight
#   stack  h1 = tanh(x @ w1) ... h12000 = tanh(h11999 @ w12000)
# About 1 to 2 s each on this machine alone (up to 5 s beside the rest of
# make -j2 check), where placing a buffer by sorting every buffer live
# beside it (plan.c before its byte sets) took 34, 59, 13 and 24 s: the
# limit leaves room for a loaded machine and still catches the first two.
# LIMIT is what it is on an idle machine, scaled by tests/lib.sh's slow.
# Each plan must need no more than the most bytes live at one step.
# Small ones of the same shape are compiled, run and checked by hand:
#   chain of N = 100 factors, all ones, x = [0.5, 1, 1.5, 2], lr = 0.001,
#     two steps: step 1 has y = x, so each factor's gradient is 2 x^2 and
#     every factor becomes c = 1 - 2 lr x^2; step 2 has y = x c^N and the
#     gradient 2 x^2 c^(2N - 1), so the factors end as c - 2 lr x^2 c^(2N - 1)
#   power of N = 50 factors, a all ones, x and lr as above, two steps: the
#     gradient is 2 N x^2 a^(2N - 1), so a becomes c = 1 - 2 lr N x^2, then
#     c - 2 lr N x^2 c^(2N - 1), with y = x c^N at step 2
#   stack of L = 8 layers, every w all ones [2, 2], x = [[0.05, -0.025]],
#     lr = 0.01, one step: h_k = [s_k, s_k] with s_1 = tanh(x0 + x1) and
#     s_k = tanh(2 s_(k-1)); the loss sum(h_L^2) has dL/dz_L = d_L =
#     2 s_L (1 - s_L^2) per entry and d_(k-1) = 2 d_k (1 - s_(k-1)^2), so
#     w_L's gradient is s_(L-1) d_L everywhere and w_1's row i is x_i d_1.
set -u
. "$top_srcdir/tests/lib.sh"
LIMIT=$(scaled 25)

# gen_chain FILE N INIT: x times a1 ... aN (f32[4] each), trained
gen_chain() {
  awk -v n="$2" -v init="$3" 'BEGIN {
    print "input x: f32[4]"
    for (i = 1; i <= n; i++) printf "param a%d: f32[4] = %s\n", i, init
    printf "let y = x"; for (i = 1; i <= n; i++) printf " * a%d", i; print ""
    printf "output y, a1, a%d\n", n
    print "train sum(y * y) with sgd(lr = 0.001)" }' >"$work/$1"
}
# gen_power FILE N INIT: x times a, N times, trained
gen_power() {
  awk -v n="$2" -v init="$3" 'BEGIN {
    print "input x: f32[4]"
    printf "param a: f32[4] = %s\n", init
    printf "let y = x"; for (i = 1; i <= n; i++) printf " * a"; print ""
    print "output y, a"
    print "train sum(y * y) with sgd(lr = 0.001)" }' >"$work/$1"
}
# gen_tied FILE L: L layers tanh(h @ w) of width 16 on a batch of 4, one w, trained
gen_tied() {
  awk -v n="$2" 'BEGIN {
    print "input x: f32[4, 16]"
    print "param w: f32[16, 16] = normal(0.25)"
    print "let h0 = x"
    for (i = 1; i <= n; i++) printf "let h%d = tanh(h%d @ w)\n", i, i - 1
    printf "output h%d\n", n
    printf "train sum(h%d * h%d) with sgd(lr = 0.01)\n", n, n }' >"$work/$1"
}
# gen_stack FILE L B W INIT: L layers tanh(h @ w) of width W on a batch of B, trained
gen_stack() {
  awk -v n="$2" -v b="$3" -v w="$4" -v init="$5" 'BEGIN {
    printf "input x: f32[%d, %d]\n", b, w
    for (i = 1; i <= n; i++) printf "param w%d: f32[%d, %d] = %s\n", i, w, w, init
    print "let h0 = x"
    for (i = 1; i <= n; i++) printf "let h%d = tanh(h%d @ w%d)\n", i, i - 1, i
    printf "output h%d, w1, w%d\n", n, n
    printf "train sum(h%d * h%d) with sgd(lr = 0.01)\n", n, n }' >"$work/$1"
}

# deep NAME: gslc --stats NAME.gsl within LIMIT s, the arena no larger than the most live
deep() {
  start=$(date +%s.%N)
  (cd "$work" && timeout $LIMIT "$GSLC" --stats "$1.gsl" >"$1.stats" 2>"$1.err")
  rc=$?
  took=$(echo "$start $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')
  if [ $rc -eq 124 ]; then
    fail "$1: gslc --stats took more than $LIMIT s"
  elif [ $rc -ne 0 ]; then
    fail "$1: gslc --stats exited $rc: $(head -n 3 "$work/$1.err")"
  else
    sed -n 's/^intermediates, planned *\([0-9]*\) .*most live at once: \([0-9]*\)).*/\1 \2/p' "$work/$1.stats" |
      awk '{ ok = NF == 2 && $1 == $2 } END { exit !ok }' ||
      fail "$1: the plan is larger than the most bytes live at once: $(grep planned "$work/$1.stats")"
    times="$times $1 ${took}s"
  fi
}
times=
gen_power power.gsl 32000 'normal(0.01)'
gen_chain chain.gsl 32000 'normal(0.01)'
gen_tied tied.gsl 12000
gen_stack stack.gsl 12000 4 16 'normal(0.25)'
for prog in power chain tied stack; do
  deep $prog
done

# run NAME ARGS...: compile NAME.gsl and run it with ARGS
run() {
  name=$1
  shift
  "$GSLC" "$work/$name.gsl" -o "$work/$name" 2>"$work/$name.err" ||
    { fail "$name: gslc: $(head -n 3 "$work/$name.err")"; return 1; }
  (cd "$work" && timeout 300 $MPIEXEC -n 1 "./$name" --quiet "$@") || { fail "$name did not run"; return 1; }
}
# same FILE SHAPE: FILE holds the values on stdin
same() { "$NPYTOOL" compare "$work/$1" f32 "$2" --rtol 1e-4 --atol 1e-7 - || fail "$1 differs from the hand's"; }
"$NPYTOOL" write "$work/x.npy" f32 4 0.5 1 1.5 2 || fail "cannot write x.npy"
"$NPYTOOL" write "$work/x2.npy" f32 1,2 0.05 -0.025 || fail "cannot write x2.npy"

# each N K EXPR: EXPR for each element x of x.npy, with c = 1 - 2 lr K x^2, n = N, lr = 0.001
each() {
  echo 0.5 1 1.5 2 | awk -v n="$1" -v k="$2" \
    "{ lr = 0.001; for (i = 1; i <= NF; i++) { x = \$i; c = 1 - 2 * lr * k * x * x; print $3 } }"
}
gen_chain small_chain.gsl 100 'ones()'
if run small_chain --steps 2 --input x=x.npy --output y=y.npy --output a1=a1.npy --output a100=a100.npy; then
  each 100 1 'x * c ^ n' | same y.npy 4
  each 100 1 'c - 2 * lr * x * x * c ^ (2 * n - 1)' | same a1.npy 4
  each 100 1 'c - 2 * lr * x * x * c ^ (2 * n - 1)' | same a100.npy 4
fi
gen_power small_power.gsl 50 'ones()'
if run small_power --steps 2 --input x=x.npy --output y=py.npy --output a=pa.npy; then
  each 50 50 'x * c ^ n' | same py.npy 4
  each 50 50 'c - 2 * lr * n * x * x * c ^ (2 * n - 1)' | same pa.npy 4
fi

# stack STATEMENTS: awk STATEMENTS run with s[k] and d[k] of the 8-layer stack set
stack() {
  awk "function th(z) { return (exp(2 * z) - 1) / (exp(2 * z) + 1) }
    BEGIN { L = 8; lr = 0.01; x0 = 0.05; x1 = -0.025; s[1] = th(x0 + x1)
      for (k = 2; k <= L; k++) s[k] = th(2 * s[k - 1])
      d[L] = 2 * s[L] * (1 - s[L] ^ 2)
      for (k = L; k > 1; k--) d[k - 1] = 2 * d[k] * (1 - s[k - 1] ^ 2)
      $1 }"
}
gen_stack small_stack.gsl 8 1 2 'ones()'
if run small_stack --steps 1 --input x=x2.npy --output h8=h.npy --output w1=w1.npy --output w8=w8.npy; then
  stack 'print s[L]; print s[L]' | same h.npy 1,2
  stack 'g = lr * d[1]; print 1 - g * x0; print 1 - g * x0; print 1 - g * x1; print 1 - g * x1' | same w1.npy 2,2
  stack 'for (i = 0; i < 4; i++) print 1 - lr * s[L - 1] * d[L]' | same w8.npy 2,2
fi

[ $status -eq 0 ] && pass "deep_compile (--stats:$times; small chain, power and stack right by hand)"
exit $status
