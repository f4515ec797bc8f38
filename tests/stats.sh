#!/bin/sh
# tests/stats.sh — gslc --stats on a small program, against numbers worked
# out by hand.
#
# Mesh [d = 2]. x f32[8, 64] split on its columns: a local [8, 32] tile,
# 1024 bytes of input. w f32[64, 16] split on its rows: [32, 16], 2048 bytes;
# v f32[16, 16] replicated: 1024; params 3072. The SPMD program is
#   %3 h1 = einsum x, w        [8, 16] partial over d   512 bytes
#   %4    = all_reduce %3      in place on %3's buffer (nothing else reads it)
#   %5    = tanh %4            an einsum operand: a buffer, 512
#   %6 h2 = einsum %5, v       512
#   %7    = exp %6             an einsum operand: 512
#   %8 h3 = einsum %7, v       the output: 512, live to the end
# Five buffers of 512 bytes: 2560 without reuse. Lifetimes (steps are value
# numbers): %3 from 3 to 5 (tanh reads the all_reduce's buffer, which is
# %3's), %5 5-6, %6 6-7, %7 7-8, %8 8-end; at most two overlap, so the
# arena is 1024 (two 512-byte slots) and the most live at once is 1024.
# Outputs: h3, 512 per device. Staging: no collective packs blocks
# (all_reduce works in place), and writing h3 gathers on rank 0 both
# devices' tiles (2 x 512) into the global array (512): 1536. Total:
# 3072 + 1024 + 1024 + 1536 = 6656. The all_reduce of f32[8, 16] (512
# bytes) over two devices receives 2 * 512 * (2 - 1) / 2 = 512 bytes.
# FLOPs (2 a multiply-add): the model's products are x @ w, 2 x 8 x 64 x
# 16 = 16384, and two [8, 16] x [16, 16], 4096 each: 24576; its other
# ops tanh and exp of 8 x 16 elements: 256. A device runs x @ w on its
# [8, 32] x [32, 16] tiles, 8192, and both replicated products whole:
# 16384; tanh and exp whole: 256.
set -u
. "$top_srcdir/tests/lib.sh"
cat >"$work/small.gsl" <<'GSL'
mesh [d = 2]
input x: f32[8, 64] split(1, d) = normal(1.0)
param w: f32[64, 16] split(0, d) = normal(0.125)
param v: f32[16, 16] = normal(0.25)
let h1 = x @ w
let h2 = tanh(h1) @ v
let h3 = exp(h2) @ v
output h3
GSL
cat >"$work/want" <<'OUT'
# small.gsl on mesh [d = 2]: 2 devices

## memory per device (bytes)
params                           3072
inputs                           1024
outputs                           512   (within the params, inputs and intermediates)
intermediates, planned           1024   (one arena, reused; most live at once: 1024)
intermediates, no reuse          2560   (every buffer of its own)
runtime staging                  1536   (collective scratch 0; gathering an output on rank 0 1536)
total                            6656   (params + inputs + planned + staging)

## FLOPs a step (products: 2 a multiply-add; other ops: 1 an element computed or summed)
                          model, products        other a device, products        other
forward                             24576          256            16384          256
step                                24576          256            16384          256

## collectives per step (bytes: received per device)
all_reduce         over (d)  f32[8, 16]                 512   ; small.gsl:5
total: 512 bytes in 1 collective
OUT
(cd "$work" && "$GSLC" --stats small.gsl) >"$work/got" 2>&1 || { cat "$work/got"; fatal "gslc --stats"; }
diff -u "$work/want" "$work/got" || fatal "--stats differs"
(cd "$work" && "$GSLC" --stats small.gsl -o stats.txt) && cmp -s "$work/want" "$work/stats.txt" ||
  fatal "--stats -o"

# The step's FLOPs of a training program and of a moe block, by hand.
# tests/spmd/uneven_train.gsl (x f32[10, 5], w1 [5, 7], w2 [7, 3], on
# [a = 3, b = 3]): the model's forward products x @ w1, 2 x 10 x 5 x 7 =
# 700, and h @ w2, 2 x 10 x 7 x 3 = 420: 1120; backward, w2's gradient and
# h's cotangent, 420 each, and w1's gradient, 700 (x is an input: no
# cotangent): 1540; the optimizer none; 2660 in all. Its other forward
# ops: + b1 and tanh on 10 x 7 (140), the loss's two y - 1, their product
# and its sum on 10 x 3 (120), the mean's division (1): 261. A device
# runs x @ w1 on [4, 5] x [5, 3] tiles (120) and h @ w2 on [4, 3] x [3, 3]
# (72): 192 forward; backward 72 + 72 + 120 = 264.
(cd "$top_srcdir/tests/spmd" && "$GSLC" --stats uneven_train.gsl) >"$work/train" 2>&1 ||
  { cat "$work/train"; fatal "gslc --stats uneven_train.gsl"; }
for want in "forward 1120 192 261" "backward 1540 264" "optimizer 0 0" "step 2660 456"; do
  got=$(awk -v k="${want%% *}" '/^## FLOPs/ { on = 1; next } on && $1 == k { print $1, $2, $4, $3; exit }' "$work/train")
  case "$got" in "$want"*) ;; *) fatal "uneven_train's FLOPs: '$want' expected, '$got' found" ;; esac
done
# examples/moe.gsl (G 4, S 256, M 64, H 256, E 8, top 2, capacity 2.0: C
# = 2 x 2 x 256 / 8 = 128 slots, of which the routed share S K / (E C) =
# 0.5): forward, the router x @ wg 2 x 4 x 256 x 64 x 8 = 1048576, once
# for the gates and once for the router's entropy signal; the experts'
# two products over the routed slots, 2 x 2 x 4 x 256 x 2 x 64 x 256 =
# 134217728; the teacher x @ teacher 2 x 1024 x 64 x 64 = 8388608: in all
# 144703488. Backward: wo's gradient, the hidden's cotangent and wi's
# gradient, 67108864 each (the dispatched tokens are the input x: no
# cotangent), and wg's gradient 1048576: 202375168. A device holds one
# group and two experts: a quarter of each.
(cd "$top_srcdir/examples" && "$GSLC" --stats moe.gsl) >"$work/moe" 2>&1 ||
  { cat "$work/moe"; fatal "gslc --stats moe.gsl"; }
for want in "forward 144703488 36175872" "backward 202375168 50593792" "step 347078656 86769664"; do
  got=$(awk -v k="${want%% *}" '/^## FLOPs/ { on = 1; next } on && $1 == k { print $1, $2, $4; exit }' "$work/moe")
  [ "$got" = "$want" ] || fatal "moe.gsl's FLOPs: '$want' expected, '$got' found"
done
grep -q "^(a moe block's products count the routed share of its slots" "$work/moe" ||
  fatal "moe.gsl's --stats does not say how its products are counted"
pass "stats"
