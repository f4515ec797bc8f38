#!/bin/sh
# tests/zero_update.sh — the sharded optimizer update (ZeRO-1, update.c).
#
# A replicated 128 x 128 param trained data-parallel on mesh [d = D] with
# adam: on 2 devices its update is sharded over d (--explain says so; the
# new param is all-gathered once; no all-reduce of its gradient), its
# optimizer states cost half as much per device as on one (--stats), and
# the numbers are those worked by hand: the loss sum(x @ w) with x all ones
# has the constant gradient 8 (x's column sums), so each adam step moves w
# by 0.1 sign(8): after two steps w is 0.8 everywhere, on 1 and 2 devices.
# A small replicated bias stays whole (one all-reduce), below the size at
# which a second collective pays for itself.
set -u
. "$top_srcdir/tests/lib.sh"
cat >"$work/z.gsl" <<'EOF'
const D = 2
mesh [d = D]
param w: f32[128, 128] replicate() = ones()
param b: f32[128] replicate() = zeros()
input x: f32[8, 128] split(0) = ones()
train sum(x @ w) + sum(x * b) with adam(lr = 0.1)
output w, b
EOF
"$GSLC" --explain "$work/z.gsl" >"$work/explain" || fatal "--explain"
grep -q '^w  *f32\[128, 128\] *sharded over (d) on dim 0 (ZeRO-1)' "$work/explain" ||
  { cat "$work/explain"; fail "w's update is not sharded over d"; }
grep -q '^b  *f32\[128\] *whole: 512 bytes per device, below 65536' "$work/explain" ||
  { cat "$work/explain"; fail "b's update is not kept whole"; }
[ "$(grep -c '^all_gather .*the update of w goes back' "$work/explain")" -eq 1 ] ||
  fail "w's new value is not all-gathered once"
grep -q '^all_reduce .*f32\[128, 128\]' "$work/explain" && fail "w's gradient is all-reduced"

states() { "$GSLC" -D D="$1" --stats "$work/z.gsl" | sed -n 's/^optimizer states *\([0-9]*\).*/\1/p'; }
s1=$(states 1); s2=$(states 2)
# m and v of w (2 x 65536 bytes, halved on 2 devices), of b (2 x 512) and the step count (4), whole
[ "$s1" -eq $((2 * 65536 + 2 * 512 + 4)) ] && [ "$s2" -eq $((65536 + 2 * 512 + 4)) ] ||
  fail "optimizer states $s1 bytes per device on 1 device, $s2 on 2"

# Param NAME of program FILE.gsl after two steps on 1 and 2 devices: all
# N of its values 0.8
all_08() {  # FILE NAME N
  for d in 1 2; do
    "$GSLC" -D D=$d "$work/$1.gsl" -o "$work/$1$d" || { fail "compile $1.gsl, D=$d"; continue; }
    (cd "$work" && timeout 300 $MPIEXEC -n $d ./$1$d --steps 2 --quiet --output $2=$2$d.npy) ||
      { fail "run $1.gsl on $d devices"; continue; }
    "$NPYTOOL" print "$work/$2$d.npy" | sed 1d |
      awk -v n="$3" '{ d = $1 - 0.8; if (d < 0) d = -d; if (d > 1e-6) bad++ }
        END { if (NR != n || bad) { print NR " values, " bad+0 " not 0.8"; exit 1 } }' ||
      fail "$2 after two steps on $d devices is not 0.8 everywhere"
  done
}
all_08 z w 16384
# A stacked param, each layer its slice (as examples/lm.gsl's): its
# gradient is a concat of the layers' partial sums, which pass through the
# concat (its rule is linear, rule.c), so its update is sharded too; cut
# along dim 1, each layer's sum is reduce-scattered, never all-reduced
# whole (as it would be cut along the concat's own axis, dim 0, and then
# sliced). The numbers as w's: 0.8 everywhere after two steps.
cat >"$work/s.gsl" <<'EOF'
const D = 2
mesh [d = D]
param s: f32[2, 128, 128] replicate() = ones()
input x: f32[8, 128] split(0) = ones()
train sum(x @ s[0]) + sum(x @ s[1]) with adam(lr = 0.1)
output s
EOF
"$GSLC" --explain "$work/s.gsl" >"$work/sexplain" || fatal "--explain of the stacked param"
grep -q '^s  *f32\[2, 128, 128\] *sharded over (d) on dim 1 (ZeRO-1)' "$work/sexplain" ||
  { cat "$work/sexplain"; fail "the stacked s's update is not sharded over d on dim 1"; }
[ "$(grep -c '^reduce_scatter  over (d) dim 1: f32\[1, 128, 128\]' "$work/sexplain")" -eq 2 ] ||
  fail "each layer's gradient of s is not reduce-scattered"
grep -q '^all_reduce .*f32\[[12], 128, 128\]' "$work/sexplain" &&
  fail "s's gradient is all-reduced"
all_08 s s 32768
[ $status -eq 0 ] &&
  pass "zero_update (w sharded over d, states $s1 -> $s2 bytes, w = 0.8 on 1 and 2 devices; s on dim 1)"
exit $status
