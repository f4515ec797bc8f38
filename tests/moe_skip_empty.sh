#!/bin/sh
# tests/moe_skip_empty.sh — moe bodies that treat their capacity slots row
# by row run their matrix products over the filled slots only (slots.c,
# gslrt_sgemm_fill), with the same results as the padded computation.
#
# One program, a moe layer on trained inputs (x @ wx, so the tokens get a
# gradient through the block too) whose body has a per-expert bias, a
# reduction over the feature dim and two products, is trained 4 steps with
# adam, compiled as is and with -fno-moe-skip-empty (the padded path: the
# reference); loss, y and every param must agree:
#   sparse: top 2 of 4 experts, capacity 4.0, 8 tokens a group: C = 16
#     slots, at most 8 of them filled (16 choices over 4 experts);
#   full:   top 2 of 2 experts, capacity 0.5: every token sends a choice to
#     each expert, S choices for C = S / 2 slots: every slot is filled.
# full must give the same bits (a block whose slots are all filled is the
# padded product, the same gslrt_sgemm call). sparse agrees to 1e-4
# relative (1e-6 absolute, the scale of the weights is 0.3): the same
# nonzero terms are summed, but a GEMM of fewer rows may take another
# micro-kernel path (OpenBLAS 0.3.21 on this CPU: its SkylakeX kernels give
# other bits for a few small row counts, its Haswell kernels for any count
# not a multiple of 48), and a weight gradient sums its terms per (expert,
# group) block and then across blocks; four adam steps carry those ulps
# into the params. On 2 devices (experts and groups split) the block
# skips too: its fill counts, computed beside the routes, reach the
# experts' devices in a small all_to_all that rides in the tokens' one
# (combine.c), so the per-device program has the same all-to-alls as with
# -fno-moe-skip-empty plus that one rider, and its results on 2 ranks
# agree with the padded build's on 2 ranks as on 1. A body that mixes its
# slots (a mean over them) keeps the padded path, and --explain says why;
# the others' --explain says their empty slots are skipped.
set -u
. "$top_srcdir/tests/lib.sh"

prog() { # file, body's feature transform
  cat >"$1" <<GSL
const D = 1
mesh [d = D]
const G = 2
const S = 8
const M = 8
const H = 16
const E = 4
const K = 2
const CAP = 4.0
param wx: f32[M, M] replicate() = normal(0.3)
param wg: f32[M, E] replicate() = normal(0.5)
param wi: f32[E, M, H] split(0) = normal(0.3)
param bi: f32[E, H] split(0) = normal(0.3)
param wo: f32[E, H, M] split(0) = normal(0.3)
param teacher: f32[M, M] replicate() = normal(0.3) frozen
input x: f32[G, S, M] split(0) = normal(1.0)
let y, aux = moe(x @ wx, gate = wg, top = K, capacity = CAP, random_routing = false) (t, e) {
  let h = relu($2 @ wi[e] + bi[e])
  return (h / sqrt(mean(h * h, -1, keep = true) + 1.0)) @ wo[e]
}
output y, wx, wg, wi, bi, wo
train mean((y - tanh(x @ teacher)) * (y - tanh(x @ teacher))) + 0.01 * aux with adam(lr = 0.01)
GSL
}
prog "$work/rows.gsl" t
prog "$work/mixed.gsl" "(t - mean(t, 1, keep = true))"

# build NAME FILE OPTIONS...; run NAME RANKS
build() {
  n=$1 f=$2; shift 2
  "$GSLC" "$@" "$f" -o "$work/$n" || { fail "$n does not compile"; return 1; }
}
run() {
  (cd "$work" && timeout 300 $MPIEXEC -n "$2" "./$1" --steps 4 --quiet --log-every 1 --metrics "$1.jsonl" \
    --output y="$1.y.npy" --output wx="$1.wx.npy" --output wg="$1.wg.npy" --output wi="$1.wi.npy" \
    --output bi="$1.bi.npy" --output wo="$1.wo.npy") || { fail "$1 on $2 ranks"; return 1; }
}
same_bits() { # a b
  for t in y wx wg wi bi wo; do
    cmp -s "$work/$1.$t.npy" "$work/$2.$t.npy" || fail "$t of $1 differs in bits from $2's"
  done
  grep -o '"loss": *[^,}]*' "$work/$1.jsonl" >"$work/$1.loss"
  grep -o '"loss": *[^,}]*' "$work/$2.jsonl" >"$work/$2.loss"
  cmp -s "$work/$1.loss" "$work/$2.loss" || fail "the losses of $1 and $2 differ"
}
close() { # a b: within 1e-4 relative, 1e-6 absolute
  for t in y wx wg wi bi wo; do
    head=$("$NPYTOOL" print "$work/$2.$t.npy" | sed 1q)
    "$NPYTOOL" print "$work/$2.$t.npy" | sed 1d |
      "$NPYTOOL" compare "$work/$1.$t.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-4 --atol 1e-6 - ||
      fail "$t of $1 differs from $2's"
  done
  grep -o '"loss": *[^,}]*' "$work/$1.jsonl" | sed 's/.*: *//' >"$work/$1.loss"
  grep -o '"loss": *[^,}]*' "$work/$2.jsonl" | sed 's/.*: *//' >"$work/$2.loss"
  paste "$work/$1.loss" "$work/$2.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1 } END { exit bad }' ||
    fail "the losses of $1 and $2 differ"
  [ "$(wc -l <"$work/$1.loss")" -eq 4 ] || fail "$1 logged $(wc -l <"$work/$1.loss") losses, not 4"
}
explain() { # name file options...: its moe line
  n=$1 f=$2; shift 2
  "$GSLC" --explain "$@" "$f" | grep '^moe at' >"$work/$n.explain" || fail "no moe line in $n's --explain"
}

full="-D E=2 -D CAP=0.5"
build sparse "$work/rows.gsl" && build sparse_pad "$work/rows.gsl" -fno-moe-skip-empty &&
  run sparse 1 && run sparse_pad 1 && close sparse sparse_pad
# shellcheck disable=SC2086
build full "$work/rows.gsl" $full && build full_pad "$work/rows.gsl" $full -fno-moe-skip-empty &&
  run full 1 && run full_pad 1 && same_bits full full_pad
# under --precision bf16 (gslrt_gemm_bf16_fill): one step's y against the
# padded bf16 build; a product over fewer rows may sum in another order,
# and its f32 result then rounds to the bf16 neighbour (2^-8 relative) in
# the expert's output, so y (a gate-weighted sum of two such rows) agrees
# to 8e-3 relative, 1e-4 absolute
build b16 "$work/rows.gsl" --precision bf16 && build b16_pad "$work/rows.gsl" --precision bf16 -fno-moe-skip-empty &&
  (cd "$work" && $MPIEXEC -n 1 ./b16 --steps 1 --quiet --output y=b16.y.npy &&
    $MPIEXEC -n 1 ./b16_pad --steps 1 --quiet --output y=b16_pad.y.npy) || fail "the bf16 builds do not run"
head=$("$NPYTOOL" print "$work/b16_pad.y.npy" | sed 1q)
"$NPYTOOL" print "$work/b16_pad.y.npy" | sed 1d |
  "$NPYTOOL" compare "$work/b16.y.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 8e-3 --atol 1e-4 - ||
  fail "y under --precision bf16 differs from the padded bf16 build's"
cmp -s "$work/b16.y.npy" "$work/b16_pad.y.npy" && echo "(bf16: the same bits)"
"$GSLC" --explain --precision bf16 "$work/rows.gsl" | grep -q 'empty slots skipped' || fail "bf16 blocks do not skip"

explain mesh2 "$work/rows.gsl" -D D=2 -D G=4
grep -q 'C = 16): empty slots skipped: 4 products by rows, 2 by summed slots' "$work/mesh2.explain" ||
  fail "rows.gsl on 2 devices: $(cat "$work/mesh2.explain")"
"$GSLC" --emit-spmd -D D=2 -D G=4 "$work/rows.gsl" >"$work/mesh2.spmd" &&
  "$GSLC" --emit-spmd -D D=2 -D G=4 -fno-moe-skip-empty "$work/rows.gsl" >"$work/mesh2_pad.spmd" ||
  fail "--emit-spmd on 2 devices"
[ "$(grep all_to_all "$work/mesh2.spmd" | grep -vc '(rides %')" -eq "$(grep -c all_to_all "$work/mesh2_pad.spmd")" ] ||
  fail "on 2 devices the program has another all-to-all of its own"
[ "$(grep -c 'i32\[.*all_to_all .*(rides %' "$work/mesh2.spmd")" -eq 1 ] ||
  fail "on 2 devices the fill counts do not ride in the tokens' all-to-all"
build mesh2 "$work/rows.gsl" -D D=2 -D G=4 && build mesh2_pad "$work/rows.gsl" -D D=2 -D G=4 -fno-moe-skip-empty &&
  run mesh2 2 && run mesh2_pad 2 && close mesh2 mesh2_pad

explain rows "$work/rows.gsl"
grep -q 'C = 16): empty slots skipped: 4 products by rows, 2 by summed slots' "$work/rows.explain" ||
  fail "rows.gsl's --explain: $(cat "$work/rows.explain")"
explain off "$work/rows.gsl" -fno-moe-skip-empty
grep -q 'padded (-fno-moe-skip-empty)' "$work/off.explain" || fail "--explain with -fno-moe-skip-empty: $(cat "$work/off.explain")"
explain mixed "$work/mixed.gsl"
grep -q 'padded (the body mixes slots: the reduce at mixed.gsl:18)' "$work/mixed.explain" ||
  fail "mixed.gsl's --explain: $(cat "$work/mixed.explain")"
"$GSLC" --emit-spmd "$work/mixed.gsl" | grep -q 'fill "' && fail "mixed.gsl's products got fill counts"
"$GSLC" --emit-spmd "$work/rows.gsl" | grep -q 'fill "' || fail "rows.gsl's products got no fill counts"

# The elementwise ops between the products (the bias add, relu, the
# division, their backward and, under bf16, the casts) run over the filled
# slots too and write zeros past them (Value.rows, cg_fuse.c's emit_rows).
# Against -fno-moe-skip-loops (the same products over the filled slots,
# those loops over every slot) the results are the same bits, f32 and
# bf16, on 1 and 2 devices: a filled row computed otherwise, or a later op
# reading a skipped row that held anything but what it would hold there,
# would show. --explain counts the bounded ops, --emit-spmd shows each
# bounded by its counts (on 2 devices: the counts the products read, no
# collective more), and the optimized code loops to a count it loads.
# (a skipped row left unwritten would hold what the arena held before:
# another value's bytes, which the comparison catches.)
loops() { # name ranks options...: bounded against -fno-moe-skip-loops, bit for bit
  ln=$1 lr=$2; shift 2 # (build sets n)
  build "$ln" "$work/rows.gsl" "$@" && build "${ln}_all" "$work/rows.gsl" "$@" -fno-moe-skip-loops &&
    run "$ln" "$lr" && run "${ln}_all" "$lr" && same_bits "$ln" "${ln}_all"
}
loops loops 1
loops loops16 1 --precision bf16
loops loops2 2 -D D=2 -D G=4
loops loops16x2 2 -D D=2 -D G=4 --precision bf16
grep -q 'by summed slots, [1-9][0-9]* elementwise ops by rows' "$work/rows.explain" ||
  fail "rows.gsl's --explain counts no elementwise op by rows: $(cat "$work/rows.explain")"
explain loops_off "$work/rows.gsl" -fno-moe-skip-loops
grep -q 'by summed slots, 0 elementwise ops by rows' "$work/loops_off.explain" ||
  fail "-fno-moe-skip-loops still bounds elementwise ops: $(cat "$work/loops_off.explain")"
for o in "" "--precision bf16" "-D D=2 -D G=4" "-D D=2 -D G=4 --precision bf16"; do
  # shellcheck disable=SC2086
  "$GSLC" --emit-spmd $o "$work/rows.gsl" >"$work/loops.spmd" || fail "--emit-spmd $o"
  grep -q '= unary relu .* rows %[0-9]* \[0, 1, 2\]' "$work/loops.spmd" || fail "the relu is not bounded by the counts ($o)"
  grep -q '= binary div .* rows %[0-9]* \[0, 1, 2\]' "$work/loops.spmd" || fail "the division is not bounded by the counts ($o)"
  # shellcheck disable=SC2086
  [ "$(grep -c all_to_all "$work/loops.spmd")" -eq "$("$GSLC" --emit-spmd $o -fno-moe-skip-loops "$work/rows.gsl" | grep -c all_to_all)" ] ||
    fail "bounded loops move the counts once more ($o)"
done
"$GSLC" --emit-llvm -O2 "$work/rows.gsl" -o "$work/rows.ll" && grep -q '%filled = zext' "$work/rows.ll" ||
  fail "no loop nest of rows.gsl runs to a count it loads"

[ $status -eq 0 ] && pass "moe_skip_empty (sparse within 1e-4 of the padded path on 1 and 2 ranks; full the same bits; with a body mixing slots, padded; elementwise loops over the filled slots the same bits as over every slot, f32 and bf16, 1 and 2 ranks)"
exit $status
