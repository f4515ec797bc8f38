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

## collectives per step (bytes: received per device)
all_reduce         over (d)  f32[8, 16]                 512   ; small.gsl:5
total: 512 bytes in 1 collective
OUT
(cd "$work" && "$GSLC" --stats small.gsl) >"$work/got" 2>&1 || { cat "$work/got"; fatal "gslc --stats"; }
diff -u "$work/want" "$work/got" || fatal "--stats differs"
(cd "$work" && "$GSLC" --stats small.gsl -o stats.txt) && cmp -s "$work/want" "$work/stats.txt" ||
  fatal "--stats -o"
pass "stats"
