#!/bin/sh
# tests/kernels.sh — a stack of identical layers costs one layer's
# compilation (issue 31, item 1): gslc emits a kernel once for all the
# values whose code is the same on other buffers (each layer of
# examples/lm.gsl: its ops, shapes and layouts, its slices of the stacked
# params, its gradients' pieces of their concat, its moe block's draw on a
# stream of its own) and calls it with each one's buffers. Counted in the
# unoptimized LLVM IR (--emit-llvm -O0): the module defines as many kernels
# at L = 12 as at L = 4, and gsl_step calls them many more times at 12.
set -u
. "$top_srcdir/tests/lib.sh"

for L in 4 12; do
  "$GSLC" -O0 --emit-llvm -D L=$L "$top_srcdir/examples/lm.gsl" -o "$work/lm$L.ll" || { fail "lm at L = $L"; exit 1; }
  eval "k$L=\$(grep -c '^define internal void @k' \"\$work/lm$L.ll\")"
  eval "c$L=\$(sed -n '/^define void @gsl_step/,/^}/p' \"\$work/lm$L.ll\" | grep -c 'call void @k')"
done
# shellcheck disable=SC2154
{
  [ "$k4" -eq "$k12" ] || fail "examples/lm.gsl has $k4 kernels at L = 4 and $k12 at L = 12"
  [ "$c12" -gt $((2 * c4)) ] || fail "gsl_step makes $c4 kernel calls at L = 4 and $c12 at L = 12"
  [ "$c4" -gt "$k4" ] || fail "at L = 4, $c4 calls of $k4 kernels: nothing shared"
}
[ $status -eq 0 ] && echo "examples/lm.gsl: $k4 kernels at L = 4 and at L = 12, called $c4 and $c12 times a step"
exit $status
