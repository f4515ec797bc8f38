#!/bin/sh
# tests/remat.sh — recomputation (gsl.7, RECOMPUTATION): `remat fn`,
# `remat for` and --mem-budget's choice give the same bits as keeping
# every activation, random routing inside a recomputed region included;
# a budget is met, in the plan and in the peak RSS; --stats and --explain
# report what is recomputed, with numbers worked out by hand below.
set -u
. "$top_srcdir/tests/lib.sh"
MIB=1048576
# The peak RSS of a run is the plan's total plus what the runtime and its
# libraries take (MPICH, oneDNN and OpenBLAS, libc, the program's text,
# and the GEMM libraries' work space for the products' shapes), which
# depends on the machine: 21 MiB and a few more for the MLP below on one,
# 38 MiB on another with AVX2 kernels. So section 2 measures it, as the
# peak of the same MLP with one layer kept (the same products), less that
# one's plan; HEADROOM is what a run may take beyond.
HEADROOM=$((12 * MIB))

# ---- 1. examples/lm.gsl with every layer pair recomputed (remat for) ------
# The loop body holds a MoE layer with top-2 gating, whose second choice is
# routed at random (gsl.7, random routing): the recomputed region draws
# again, and must draw the same numbers. Losses, gradient norms, the moe
# signals and every tensor of the checkpoints must be equal to the bit.
awk -v n=2 -v x=7 'BEGIN { for (i = 0; i < n * 36; i++) { x = (1103515245 * x + 12345) % 2147483648;
  printf "%d ", int(x / 65536) % 256 } }' | "$NPYTOOL" write "$work/train.npy" i32 "2,4,9" - ||
  fatal "cannot write train.npy"
sizes="-D B=4 -D T=8 -D M=16 -D NH=2 -D H=32 -D E=4 -O1"
cp "$top_srcdir/examples/lm.gsl" "$work/kept.gsl"
sed 's/^for p in/remat for p in/' "$top_srcdir/examples/lm.gsl" >"$work/remat.gsl"
grep -q '^remat for p in' "$work/remat.gsl" || fail "examples/lm.gsl's layer loop not found"
"$GSLC" $sizes --emit-ir "$work/remat.gsl" >"$work/remat.ir" || fail "gslc --emit-ir of the remat lm"
grep -q 'rng uniform(0, 1) stream 12 .*(recompute)' "$work/remat.ir" ||
  fail "the random routing's draw (stream 12) is not recomputed in the remat lm"
# the moe layer's products restricted to the filled slots (slots.c) stay in
# the region of the products they replace: a recomputed layer's products
# are the same FLOPs with and without -fno-moe-skip-empty
for skip in "" -fno-moe-skip-empty; do
  "$GSLC" $sizes $skip --explain "$work/remat.gsl" | grep 'loop p = 0: recomputed' | sed 's/.*, //'
done >"$work/remat.flops"
if [ "$(sort -u "$work/remat.flops" | wc -l)" = 1 ] && grep -q '^[1-9][0-9]* FLOP of products' "$work/remat.flops"; then
  pass "remat for: the recomputed layer's products are the same FLOPs with its moe products restricted"
else
  fail "remat for: the recomputed layer's products differ with -fno-moe-skip-empty:"; cat "$work/remat.flops"
fi
for b in kept remat; do
  "$GSLC" $sizes "$work/$b.gsl" -o "$work/$b" || { fail "gslc $b.gsl"; continue; }
  (cd "$work" && timeout 300 $MPIEXEC -n 2 "./$b" --steps 4 --quiet --metrics "$b.jsonl" --input tokens=train.npy \
    --checkpoint "ck_$b" --checkpoint-every 2) || fail "the $b lm on 2 devices"
  # every record without its timings and pace, the first without the run's provenance (its binary, sources, argv, start)
  sed 's/, "provenance": {.*}}$/}/; s/"tokens_per_s":[^,}]*,* *//; s/"ms_per_step":[^,}]*//; s/"elapsed_s":[^,}]*,* *//; s/, "slowest_rank": [0-9]*, "slowest_score": [0-9.]*, "compute_ms": [^,}]*, "wait_ms": [^,}]*//; s/, "peak_rss_kib": \[[0-9, ]*\]//; s/kept\.gsl\|remat\.gsl/lm/g' \
    "$work/$b.jsonl" >"$work/$b.records"
done
if [ -s "$work/kept.records" ] && cmp -s "$work/kept.records" "$work/remat.records"; then
  pass "remat for: the lm's 4 steps log the same losses, norms and moe loads to the bit"
else
  fail "remat for changes the lm's log:"; diff "$work/kept.records" "$work/remat.records" | head
fi
n=0
for f in $(cd "$work/ck_kept" && find . -name '*.npy' | sort); do
  n=$((n + 1))
  cmp -s "$work/ck_kept/$f" "$work/ck_remat/$f" || fail "checkpoint file $f differs with remat for"
done
[ "$n" -ge 28 ] && pass "remat for: the $n tensors of both checkpoints are the same bytes" ||
  fail "only $n checkpoint tensors compared"

# under --auto-shard (tests/auto/lm.gsl: the example without annotations)
# the search prices the recomputation too, and may lay the program out
# otherwise (a recomputed value takes its original's layout, but a param's
# may change): the numbers then agree as they do across meshes, to float
# rounding, not to the bit (gsl.7, RECOMPUTATION)
{ sed 's/^for p in/remat for p in/' "$top_srcdir/tests/auto/lm.gsl"; echo "output wq, we"; } >"$work/auto_remat.gsl"
{ cat "$top_srcdir/tests/auto/lm.gsl"; echo "output wq, we"; } >"$work/auto_kept.gsl"
for b in auto_kept auto_remat; do
  "$GSLC" $sizes --auto-shard "$work/$b.gsl" -o "$work/$b" || { fail "gslc --auto-shard $b.gsl"; continue; }
  (cd "$work" && timeout 300 $MPIEXEC -n 2 "./$b" --steps 3 --quiet --metrics "$b.jsonl" --input tokens=train.npy \
    --output wq="$b.wq.npy" --output we="$b.we.npy") || fail "the $b lm on 2 devices"
  sed -n 's/.*"loss": *\([^,}]*\).*/\1/p' "$work/$b.jsonl" >"$work/$b.loss"
done
close=true
for t in wq we; do
  head=$("$NPYTOOL" print "$work/auto_kept.$t.npy" | sed 1q)
  "$NPYTOOL" print "$work/auto_kept.$t.npy" | sed 1d |
    "$NPYTOOL" compare "$work/auto_remat.$t.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-4 \
      --atol 1e-6 - || close=false
done
[ -s "$work/auto_kept.loss" ] && $close &&
  awk 'NR == FNR { k[FNR] = $1; next } { d = $1 - k[FNR]; if (d < 0) d = -d; if (d > 1e-6 * k[FNR]) bad = 1 }
       END { exit bad }' "$work/auto_kept.loss" "$work/auto_remat.loss" &&
  pass "remat for under --auto-shard: the losses to 1e-6, wq and we to 1e-4" ||
  fail "remat for under --auto-shard: $(tr '\n' ' ' <"$work/auto_kept.loss") / $(tr '\n' ' ' <"$work/auto_remat.loss")"

# ---- 2. --mem-budget: an MLP stack whose activations dominate -------------
# Eight layers h + gelu(h @ w1[l]) @ w2[l] on [1024, 256] rows, H = 1024:
# each layer keeps for the backward pass u = h @ w1[l] and gelu(u), 4 MiB
# each, beside its input h (1 MiB). Kept, the plan needs about 116 MiB;
# under --mem-budget 80M, gslc recomputes layers (each saves its 8 MiB of
# u and gelu(u)) until the plan fits. The peak RSS must be within the
# plan's total and the slack, clearly below the kept run's, and the
# trained params and the losses the same bits.
cat >"$work/mlp.gsl" <<'GSL'
const L = 8
const N = 1024
const K = 256
const H = 1024
input x: f32[N, K] = normal(1.0)
param w1: f32[L, K, H] = normal(0.05)
param w2: f32[L, H, K] = normal(0.05)
fn layer(h, a, b) {
  return h + gelu(h @ a) @ b
}
let h = x
for l in 0..L {
  let h = layer(h, w1[l], w2[l])
}
train sum(h * h) / (N * K) with sgd(lr = 0.01)
output w1, w2
GSL
stat() { sed -n "s/^$2  *\([0-9][0-9]*\).*/\1/p" "$1"; }
budget=$((80 * MIB))
"$GSLC" --stats "$work/mlp.gsl" >"$work/kept.stats" && "$GSLC" "$work/mlp.gsl" -o "$work/mk" &&
  "$GSLC" --stats --mem-budget 80M "$work/mlp.gsl" >"$work/budget.stats" &&
  "$GSLC" --explain --mem-budget 80M "$work/mlp.gsl" >"$work/budget.explain" &&
  "$GSLC" --mem-budget 80M "$work/mlp.gsl" -o "$work/mb" || fail "gslc of the MLP stack"
kept_total=$(stat "$work/kept.stats" total) total=$(stat "$work/budget.stats" total)
chosen=$(grep -c 'recomputed for the backward pass, --mem-budget 83886080: it saves about 8388608 bytes' \
  "$work/budget.explain")
echo "MLP stack: kept $kept_total bytes, under --mem-budget 80M $total bytes with $chosen layers recomputed"
[ "$kept_total" -gt "$budget" ] && [ "$total" -le "$budget" ] && [ "$chosen" -ge 1 ] && [ "$chosen" -le 8 ] &&
  grep -q "^regions recomputed  *$chosen   (0 marked remat in the source, $chosen chosen for --mem-budget)" \
    "$work/budget.stats" && pass "--mem-budget 80M: the plan fits ($total bytes) by recomputing $chosen layers" ||
  { fail "--mem-budget 80M's plan:"; grep -A4 '## recomputation' "$work/budget.stats"; }
"$GSLC" -D L=1 --stats "$work/mlp.gsl" >"$work/one.stats" && "$GSLC" -D L=1 "$work/mlp.gsl" -o "$work/m1" ||
  fail "gslc of the one-layer MLP"
one_total=$(stat "$work/one.stats" total)
for b in mk mb m1; do
  (cd "$work" && /usr/bin/time -v $MPIEXEC -n 1 "./$b" --steps 3 --quiet --metrics "$b.jsonl" \
    --output w1="$b.w1.npy" --output w2="$b.w2.npy" 2>"$b.time") || { cat "$work/$b.time"; fail "the $b run"; }
done
rss_k=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/mk.time") * 1024 ))
rss_b=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/mb.time") * 1024 ))
rss_1=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/m1.time") * 1024 ))
SLACK=$((rss_1 - one_total + HEADROOM))
echo "peak RSS: kept $rss_k, under the budget $rss_b (bound $((total + SLACK)): the runtime's part" \
  "$((rss_1 - one_total)), the one-layer MLP's peak $rss_1 less its plan $one_total)"
[ "$rss_b" -le $((total + SLACK)) ] && [ $((rss_k - rss_b)) -ge $(((kept_total - total) / 2)) ] &&
  pass "the budgeted run's peak RSS $rss_b is within its plan and the slack, $((rss_k - rss_b)) below the kept run's" ||
  fail "peak RSS: budgeted $rss_b (bound $((total + SLACK))), kept $rss_k"
sed -n 's/.*"loss": *\([^,}]*\).*/\1/p' "$work/mk.jsonl" >"$work/mk.loss"
sed -n 's/.*"loss": *\([^,}]*\).*/\1/p' "$work/mb.jsonl" >"$work/mb.loss"
[ -s "$work/mk.loss" ] && cmp -s "$work/mk.loss" "$work/mb.loss" && cmp -s "$work/mk.w1.npy" "$work/mb.w1.npy" &&
  cmp -s "$work/mk.w2.npy" "$work/mb.w2.npy" && pass "--mem-budget: the same losses and params to the bit" ||
  fail "--mem-budget changes the numbers: $(tr '\n' ' ' <"$work/mk.loss") / $(tr '\n' ' ' <"$work/mb.loss")"
# a budget recomputation cannot reach: the message says every region was tried
"$GSLC" --mem-budget 40M "$work/mlp.gsl" -o "$work/no" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] && grep -q '^gslc: error: --mem-budget 41943040: the plan found needs [0-9]* bytes a device, more than the budget with every region recomputed' "$work/err" &&
  [ ! -e "$work/no" ] && pass "--mem-budget 40M: refused, every region recomputed" ||
  { fail "--mem-budget 40M (exit $rc):"; cat "$work/err"; }

# ---- 3. --stats and --explain of a small recomputed program ---------------
# Two calls of a remat fn on x: f32[4, 8] split over data = 2 (rows [2, 8]
# a device), w1: [8, 16], w2: [16, 8]; sgd. By hand, per device:
#   forward, per call: h @ w1 2*2*8*16 = 512 FLOP, b @ w2 2*2*16*8 = 512.
#   recompute, per call: h @ w1, tanh, a * a (3 values, 512 FLOP); b @ w2
#     is not recomputed: the add's derivative needs no value.
#   backward: the outer call: dA = g w2^T, dW2, dW1, dh (4 x 512); the
#     inner: dA, dW2, dW1 (x is an input: no dh), 3 x 512.
#   total 2048 + 1024 + 3584 = 6656 FLOP, 1024 recomputed (15.4 %).
#   kept: the inner call's result and y, [2, 8] f32 each: 2 x 64 bytes.
#   recomputed buffers: h @ w1 (a GEMM's result), a (read twice) and
#     b (a product's operand), [2, 16] f32 = 128 bytes each, per call:
#     6 buffers, 768 bytes.
cat >"$work/small.gsl" <<'GSL'
mesh [data = 2]
param w1: f32[8, 16] = normal(0.5)
param w2: f32[16, 8] = normal(0.5)
input x: f32[4, 8] shard([data, _]) = normal(1)
remat fn block(h) {
  let a = tanh(h @ w1)
  let b = a * a
  return h + b @ w2
}
let y = block(block(x))
train sum(y * y) with sgd(lr = 0.01)
GSL
cat >"$work/small.stats.want" <<'EOF'
## recomputation (gsl.7, RECOMPUTATION)
regions recomputed                  2   (2 marked remat in the source, 0 chosen for --mem-budget)
activations kept                  128   bytes in 2 buffers the backward pass reads from the forward
activations recomputed            768   bytes in 6 buffers, each live within its region's backward
products recomputed              1024   FLOP a step a device, of the step's 6656 (15.4%)
EOF
cat >"$work/small.explain.want" <<'EOF'
## recomputation (gsl.7, RECOMPUTATION)
small.gsl:5 block called at small.gsl:10: recomputed for the backward pass, marked remat fn in the source; 3 values computed again (0 collectives), 512 FLOP of products a device
small.gsl:5 block called at small.gsl:10: recomputed for the backward pass, marked remat fn in the source; 3 values computed again (0 collectives), 512 FLOP of products a device
EOF
"$GSLC" --stats "$work/small.gsl" | sed -n '/^## recomputation/,/^$/p' | sed '/^$/d' >"$work/small.stats" &&
  "$GSLC" --explain "$work/small.gsl" | sed -n '/^## recomputation/,/^$/p' | sed '/^$/d' >"$work/small.explain" ||
  fail "gslc --stats/--explain of the small program"
diff "$work/small.stats.want" "$work/small.stats" >/dev/null && pass "--stats' recomputation section, by hand" ||
  { fail "--stats' recomputation section:"; diff "$work/small.stats.want" "$work/small.stats"; }
diff "$work/small.explain.want" "$work/small.explain" >/dev/null && pass "--explain's recomputation section, by hand" ||
  { fail "--explain's recomputation section:"; diff "$work/small.explain.want" "$work/small.explain"; }
exit $status
