#!/bin/sh
# tests/moe_dropless.sh — what a dropless moe block (capacity = 0) costs,
# as gslc --stats and --explain tell it, against numbers worked by hand:
# E = 4 experts, G = 4 groups of S = 8 tokens of width M = 4, top 2. C = S
# = 8 slots per expert and group: the dispatched tokens are f32[4, 4, 8,
# 4], 512 elements, 2048 bytes over the mesh; capacity 1.0 would give C =
# ceil(2 * 8 / 4) = 4, 1024 bytes, so dropless takes 1024 more. The body
# treats its slots row by row, so its products skip the empty slots: no
# more FLOPs. A block at capacity 1.0 is listed without "dropless".
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1

cat >p.gsl <<'GSL'
mesh [d = 2]
param wg: f32[4, 4] replicate() = normal(1.0)
param wi: f32[4, 4, 6] split(0) = normal(0.5)
param wo: f32[4, 6, 4] split(0) = normal(0.5)
input x: f32[4, 8, 4] split(0) = normal(1.0)
let y, aux = moe(x, gate = wg, top = 2, capacity = 0, random_routing = false) (t, e) {
  return relu(t @ wi[e]) @ wo[e]
}
let z, aux2 = moe(y, gate = wg, top = 2, capacity = 1.0, random_routing = false) (t, e) {
  return relu(t @ wi[e]) @ wo[e]
}
train sum(z * z) + aux + aux2 with sgd(lr = 0.01)
GSL
"$GSLC" --stats p.gsl >stats 2>&1 || { cat stats; fail "gslc --stats"; }
"$GSLC" --explain p.gsl >explain 2>&1 || { cat explain; fail "gslc --explain"; }
grep -qx 'moe at p.gsl:6  E 4  G 4  top 2  C 8 of S 8  dispatched tokens 2048 bytes over the mesh  (dropless; 1024 at capacity 1.0, C 4)' stats ||
  fail "--stats: the dropless block's line: $(grep '^moe at' stats)"
grep -qx 'moe at p.gsl:9  E 4  G 4  top 2  C 4 of S 8  dispatched tokens 1024 bytes over the mesh' stats ||
  fail "--stats: the capacity 1.0 block's line: $(grep '^moe at' stats)"
grep -qF '  dropless: C = 8 = S, room for every choice; the dispatched tokens take 2048 bytes over the mesh, 1024 more than at capacity 1.0 (C = 4), and no more FLOPs: the products run over the filled slots alone' explain ||
  fail "--explain: $(sed -n '/## moe blocks/,/^$/p' explain)"
[ "$(grep -c 'dropless' explain)" -eq 1 ] || fail "--explain names more than the one dropless block"
[ $status -eq 0 ] && pass "moe_dropless (--stats and --explain against hand-worked bytes)"
exit $status
