#!/bin/sh
# tests/loop_unroll.sh — a for loop is unrolled into the program its
# iterations written out by hand give: the global IR (--emit-ir, with the
# shardings found and, when the program trains, its backward pass and
# optimizer) and the per-device program (--emit-spmd) of each looped
# program here equal its hand-unrolled twin's, but for the source lines
# the listings cite and the names of the values lets bind (h for h0, h1,
# ...).
#
# The pairs: a small copy of examples/lm.gsl (mesh [data, expert], a dense
# and a MoE layer per iteration, the aux losses summed from 0, adam); and
# a function whose nested loops (the inner range set by the outer
# variable: (i, j) = (1, 0), (2, 0), (2, 1)) rebind its argument and a
# sum, returned as a pair. And a loop of 30 000 iterations unrolls to the
# number of values worked out by hand, in well under 30 s (on an idle
# machine; scaled by tests/lib.sh's slow).
set -u
. "$top_srcdir/tests/lib.sh"

head='import "transformer"
mesh [data = 1, expert = 2]
input tokens: i32[4, 9] shard([(data, expert), _])
param emb: f32[16, 8] = normal(0.02)
param pos: f32[8, 8] = normal(0.02)
param ln_g: f32[9, 8] = ones()
param ln_b: f32[9, 8] = zeros()
param wq: f32[4, 8, 2, 4] = normal(0.02)
param wk: f32[4, 8, 2, 4] = normal(0.02)
param wv: f32[4, 8, 2, 4] = normal(0.02)
param wo: f32[4, 2, 4, 8] = normal(0.02)
param w1: f32[2, 8, 16] = normal(0.02)
param w2: f32[2, 16, 8] = normal(0.02)
param wg: f32[2, 8, 4] = normal(0.02)
param wi: f32[2, 4, 8, 16] shard([_, expert, _, _]) = normal(0.02)
param we: f32[2, 4, 16, 8] shard([_, expert, _, _]) = normal(0.02)
param wout: f32[8, 16] = normal(0.02)
let x = slice(tokens, 1, 0, 8)
let y = slice(tokens, 1, 1, 9)'

cat >"$work/lm_loop.gsl" <<EOF
$head
let h = embed(x, emb, pos)
let aux = 0
for p in 0..2 {
  let l = 2 * p
  let h = attention_block(h, ln_g[2 * l], ln_b[2 * l], wq[l], wk[l], wv[l], wo[l])
  let h = ffn_block(h, ln_g[2 * l + 1], ln_b[2 * l + 1], w1[p], w2[p])
  let h = attention_block(h, ln_g[2 * l + 2], ln_b[2 * l + 2], wq[l + 1], wk[l + 1], wv[l + 1], wo[l + 1])
  let h, a = moe_block(h, ln_g[2 * l + 3], ln_b[2 * l + 3], wg[p], wi[p], we[p], 2, 1.0, 0)
  let aux = aux + a
}
let ce = lm_loss(h, ln_g[8], ln_b[8], wout, y)
output ce
train ce + 0.01 * aux with adam(lr = 0.001)
EOF

cat >"$work/lm_hand.gsl" <<EOF
$head
let h0 = embed(x, emb, pos)
let a0 = attention_block(h0, ln_g[0], ln_b[0], wq[0], wk[0], wv[0], wo[0])
let h1 = ffn_block(a0, ln_g[1], ln_b[1], w1[0], w2[0])
let a1 = attention_block(h1, ln_g[2], ln_b[2], wq[1], wk[1], wv[1], wo[1])
let h2, aux1 = moe_block(a1, ln_g[3], ln_b[3], wg[0], wi[0], we[0], 2, 1.0, 0)
let a2 = attention_block(h2, ln_g[4], ln_b[4], wq[2], wk[2], wv[2], wo[2])
let h3 = ffn_block(a2, ln_g[5], ln_b[5], w1[1], w2[1])
let a3 = attention_block(h3, ln_g[6], ln_b[6], wq[3], wk[3], wv[3], wo[3])
let h4, aux2 = moe_block(a3, ln_g[7], ln_b[7], wg[1], wi[1], we[1], 2, 1.0, 0)
let aux = aux1 + aux2
let ce = lm_loss(h4, ln_g[8], ln_b[8], wout, y)
output ce
train ce + 0.01 * aux with adam(lr = 0.001)
EOF

cat >"$work/tri_loop.gsl" <<'EOF'
input x: f32[4, 4]
param w: f32[6, 4, 4] = normal(0.1)
fn tri(h) {
  let s = 0
  for i in 0..3 {
    for j in 0..i {
      let h = relu(h @ w[i + j])
      let s = s + sum(h)
    }
  }
  return h, s
}
let h, s = tri(x)
train s + sum(h * h) with sgd(lr = 0.1)
EOF

cat >"$work/tri_hand.gsl" <<'EOF'
input x: f32[4, 4]
param w: f32[6, 4, 4] = normal(0.1)
fn tri(h) {
  let h1 = relu(h @ w[1])
  let s1 = sum(h1)
  let h2 = relu(h1 @ w[2])
  let s2 = s1 + sum(h2)
  let h3 = relu(h2 @ w[3])
  let s3 = s2 + sum(h3)
  return h3, s3
}
let h, s = tri(x)
train s + sum(h * h) with sgd(lr = 0.1)
EOF

# a listing without the source line each value cites and the names lets give
# (and the names of moe blocks' signals, which are their source lines:
# the hand-unrolled file's own lines, the loop's one line with #2 for the
# second block)
strip() {
  sed -e 's/ *; [^;]*$//' -e 's/^\(%[0-9]*\) [A-Za-z_][A-Za-z0-9_]*:/\1:/' \
    -e 's/^signal moe\.[^ ]*\.\(load\|drop\|load_min\|load_max\|load_std\|idle\|entropy\) =/signal moe.BLOCK.\1 =/' "$1"
}

for pair in lm tri; do
  for how in loop hand; do
    for emit in ir spmd; do
      "$GSLC" -I "$top_srcdir/stdlib" --emit-$emit "$work/${pair}_$how.gsl" >"$work/$pair.$how.$emit" ||
        fatal "gslc --emit-$emit ${pair}_$how.gsl"
      strip "$work/$pair.$how.$emit" >"$work/$pair.$how.$emit.s"
    done
  done
  for emit in ir spmd; do
    n=$(grep -c '^%' "$work/$pair.loop.$emit.s")
    if diff -u "$work/$pair.hand.$emit.s" "$work/$pair.loop.$emit.s" >"$work/diff"; then
      echo "$pair: --emit-$emit of the loop is the hand-unrolled program's ($n values)"
    else
      head -40 "$work/diff"
      fail "$pair: --emit-$emit of the loop differs from the hand-unrolled program's"
    fi
  done
done
# a long loop unrolls in time linear in its iterations: 30 000 of a body
# of two lets make x's input and 6 values each (a const, its broadcast and
# the product or sum), but for the sum with l = 0, which is h itself
cat >"$work/long.gsl" <<'EOF'
input x: f32[4]
let h = x
for l in 0..30000 {
  let t = h * 1.5
  let h = t + l
}
output h
EOF
start=$(date +%s)
n=$("$GSLC" --emit-ir "$work/long.gsl" | grep -c '^%')
took=$(($(date +%s) - start))
[ "$n" = 179998 ] || fail "30 000 iterations gave $n values, not 179998"
[ $took -le "$(scaled 30)" ] || fail "30 000 iterations took $took s to unroll (at most 30 s on an idle machine, here $(scaled 30))"
echo "long: 30 000 iterations, $n values in $took s"

# the comparison sees something: the listings do differ in what strip drops
cmp -s "$work/lm.hand.ir" "$work/lm.loop.ir" && fail "the raw listings are equal: strip is not tested"
[ $status -eq 0 ] && pass "loop_unroll"
exit $status
