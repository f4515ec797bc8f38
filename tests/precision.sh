#!/bin/sh
# tests/precision.sh — gslc --precision bf16 end to end.
#
# 1. Mesh invariance: a dense two-layer program (no routing), trained with
#    adam for 20 steps under --precision bf16 on 1, 2 and 4 ranks (batch
#    split over d), must give the same losses and params to 1e-3 relative.
#    Only the order of the f32 sums inside the products differs between
#    meshes; where that moves a sum across a bf16 rounding boundary the next
#    product sees one operand element off by 2^-8 of itself, far inside 1e-3
#    of the params after 20 small steps (lr 1e-3).
# 2. Gradients: one sgd step with lr = 1 from the same params gives w - g;
#    the bf16 gradient must be within 2e-2 of the largest f32 gradient of
#    the same param. Why: each product reads its operands rounded to bf16
#    (at most 2^-9 relative each), and the gradient flows through three
#    products (x @ w1, h @ w2, and their transposes), so each gradient element
#    is off by a few 2^-9 of the terms it sums; a wrong rule (a missing cast
#    back, a gradient rounded twice into nonsense, a dropped term) is off by
#    O(1). And the bf16 gradient must differ from the f32 one (or the
#    products did not run in bf16).
# 3. --stats under bf16: the moe example's all-to-alls move half the bytes.
# 4. GSL_GEMM_PROFILE counts a product's calls, with its dtypes.
# 5. A checkpoint of the f32 build resumes under --precision bf16, with a note.
set -u
. "$top_srcdir/tests/lib.sh"
cat >"$work/dense.gsl" <<'GSL'
import "nn"
const D = 1
const LR = 0.001
mesh [d = D]
param w1: f32[16, 32] = normal(0.3)
param w2: f32[32, 8] = normal(0.3)
input x: f32[8, 16] split(0) = normal(1.0)
input y: f32[8, 8] split(0) = normal(1.0)
let h = tanh(x @ w1)
train mse(h @ w2, y) with adam(lr = LR)
output w1, w2
GSL
sed -e 's/with adam(lr = LR)/with sgd(lr = LR)/' "$work/dense.gsl" >"$work/sgd.gsl"

run() { # name, ranks, program, steps, gslc options
  # shellcheck disable=SC2086
  "$GSLC" $5 "$3" -o "$work/$1" || { echo "FAIL: $1 does not compile"; return 1; }
  (cd "$work" && timeout 300 $MPIEXEC -n "$2" "./$1" --steps "$4" --quiet --log-every 1 --metrics "$1.jsonl" \
    --output w1="$1.w1.npy" --output w2="$1.w2.npy") || { echo "FAIL: $1 on $2 ranks"; return 1; }
}
compare() { # a.npy b.npy rtol atol: b against a
  head=$("$NPYTOOL" print "$1" | sed 1q)
  "$NPYTOOL" print "$1" | sed 1d |
    "$NPYTOOL" compare "$2" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol "$3" --atol "$4" -
}

# 1. mesh invariance
run b1 1 "$work/dense.gsl" 20 "--precision bf16 -D D=1" || exit 1
sed 's/.*"loss": *\([^,}]*\).*/\1/' "$work/b1.jsonl" >"$work/b1.loss"
for r in 2 4; do
  run "b$r" "$r" "$work/dense.gsl" 20 "--precision bf16 -D D=$r" || { status=1; continue; }
  sed 's/.*"loss": *\([^,}]*\).*/\1/' "$work/b$r.jsonl" >"$work/b$r.loss"
  paste "$work/b1.loss" "$work/b$r.loss" |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-3 * $1) { print "step " NR ": " $1 " on 1 rank, " $2; bad = 1 } } END { exit bad }' ||
    fail "the bf16 loss on $r ranks differs from one rank's"
  for t in w1 w2; do
    compare "$work/b1.$t.npy" "$work/b$r.$t.npy" 1e-3 1e-4 || fail "bf16 $t on $r ranks differs"
  done
done
[ $status -eq 0 ] && echo "bf16: the same losses (20 steps) and params on 1, 2 and 4 ranks to 1e-3"

# 2. one sgd step, lr 1: w_after = w0 - g; w0 from a step with lr 0
run g0 1 "$work/sgd.gsl" 1 "-D LR=0" || exit 1
run g32 1 "$work/sgd.gsl" 1 "-D LR=1" || exit 1
run g16 1 "$work/sgd.gsl" 1 "-D LR=1 --precision bf16" || exit 1
for t in w1 w2; do
  "$NPYTOOL" print "$work/g0.$t.npy" | sed 1d >"$work/w0"
  "$NPYTOOL" print "$work/g32.$t.npy" | sed 1d >"$work/a32"
  "$NPYTOOL" print "$work/g16.$t.npy" | sed 1d >"$work/a16"
  paste "$work/w0" "$work/a32" "$work/a16" | awk -v t=$t '
    { g32[NR] = $1 - $2; g16[NR] = $1 - $3; m = g32[NR] < 0 ? -g32[NR] : g32[NR]; if (m > big) big = m }
    END {
      if (big == 0) { print "FAIL: " t " has no gradient"; exit 1 }
      for (i = 1; i <= NR; i++) { d = g16[i] - g32[i]; if (d < 0) d = -d; if (d > worst) worst = d; if (d > 0) moved = 1 }
      printf "%s: bf16 gradient within %.2g of the largest f32 one (%.3g)\n", t, worst / big, big
      if (worst > 2e-2 * big) { print "FAIL: " t "'"'"'s bf16 gradient is too far from the f32 one"; exit 1 }
      if (!moved) { print "FAIL: " t "'"'"'s bf16 gradient equals the f32 one: no product ran in bf16"; exit 1 }
    }' || status=1
done

# 3. the moe example's all-to-alls in bf16 move half the bytes
"$GSLC" --stats "$top_srcdir/examples/moe.gsl" >"$work/f32.stats" &&
  "$GSLC" --precision bf16 --stats "$top_srcdir/examples/moe.gsl" >"$work/bf16.stats" ||
  fatal "--stats"
# (the fill counts' small i32 all_to_all, riding in the tokens', is not a token's)
a32=$(awk '/^all_to_all/ && !/rides/ { s += $(NF-2) } END { print s + 0 }' "$work/f32.stats")
a16=$(awk '/^all_to_all/ && !/rides/ { s += $(NF-2) } END { print s + 0 }' "$work/bf16.stats")
if [ "$a32" -eq 0 ] || [ $((a16 * 2)) -ne "$a32" ]; then
  fail "the moe all-to-alls move $a16 bytes in bf16 against $a32 in f32"
else
  echo "moe all-to-alls: $a32 bytes a step in f32, $a16 in bf16"
fi
grep -q 'bf16\[' "$work/bf16.stats" || fail "--stats does not show bf16 collectives"
# 4. GSL_GEMM_PROFILE: x @ w1 ([8, 16] x [16, 32]) runs once a step; over 3
#    steps the profile counts the 2 after the first (which is not timed),
#    f32 when compiled as written, bf16 operands into f32 under bf16
for v in b1 g32; do
  rm -f "$work/$v.prof"
  (cd "$work" && GSL_GEMM_PROFILE="$v.prof" timeout 300 $MPIEXEC -n 1 "./$v" --steps 3 --quiet) ||
    { fail "$v with GSL_GEMM_PROFILE"; continue; }
  want='"type": "f32", "out": "f32", "batch": 1, "m": 8, "n": 32, "k": 16, "trans_a": 0, "trans_b": 0, "calls": 2,'
  [ $v = b1 ] && want='"type": "bf16", "out": "f32", "batch": 1, "m": 8, "n": 32, "k": 16, "trans_a": 0, "trans_b": 0, "calls": 2,'
  grep -qF "$want" "$work/$v.prof" || { fail "$v's GEMM profile lacks $want:"; cat "$work/$v.prof"; }
done
[ $status -eq 0 ] && echo "GSL_GEMM_PROFILE: x @ w1 counted, f32 and bf16"
# 5. a checkpoint of the f32 build resumes in the bf16 one, with a note,
#    and the bf16 build's checkpoints record their precision
(cd "$work" && timeout 300 $MPIEXEC -n 1 ./g32 --steps 2 --checkpoint ck --checkpoint-every 2 --quiet &&
  timeout 300 $MPIEXEC -n 1 ./g16 --resume --checkpoint ck --steps 4 --checkpoint-every 2 --quiet 2>resume.err) ||
  fail "resuming the f32 build's checkpoint under --precision bf16"
grep -q "note: checkpoint .*--precision f32, this one has --precision bf16" "$work/resume.err" ||
  fail "no note of the precision change: $(cat "$work/resume.err")"
grep -q '"precision": "bf16"' "$work/ck/step-00000004/manifest.json" ||
  fail "the bf16 build's checkpoint does not record its precision"
[ $status -eq 0 ] && pass "precision"
exit $status
