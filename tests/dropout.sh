#!/bin/sh
# tests/dropout.sh — dropout(x, p) (gsl.7, TRAINING, Dropout) in a program's runs,
# through a residual perceptron of two layers (a loop over one function),
# each with three dropouts (on its input, on gelu's result, and on the
# result of a product split over `model`: a partial sum resolved first),
# and one more on its result y:
#   1. meshes: 4 adam steps under --same-bits on 1 device, [data = 2],
#      [data = 4] and 2 x 2: every tensor of the checkpoints and the
#      output y byte for byte equal to one device's; without --same-bits
#      y agrees to float rounding and its zeros (where its dropout
#      dropped: the mask) are the same elements on every mesh; and 2
#      steps on [data = 2] resumed for 2 more on one device are one
#      device's 4 steps, to the bit (the draws keyed by the step);
#   2. evaluation: with lr 0 (the params stay as drawn) the --eval-input
#      loss is the same, to the bit, with p = 0.2 and p = 0 (dropout is x
#      there), while the training losses differ (it drops in training);
#   3. generation: logits scoring byte b + 1 after b (by 8) through a
#      dropout of p = 0.5 still give b + 1, b + 2, ... for 20 bytes with
#      --top-k 1 (a dropped logit would give byte 0);
#   4. recomputation: the layer as a `remat fn` (--emit-ir: its dropouts
#      recomputed with their forward streams), and chosen by --mem-budget
#      at 512 rows: the checkpoints and y of the run that keeps
#      everything, to the bit, on 1 device and on [data = 2].
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1

cat >mlp.gsl <<'GSL'
import "nn"
const DP = 1
const MP = 1
mesh [data = DP, model = MP]
const B = 16
const L = 2
const P = 0.2
const LR = 0.01
param w1: f32[32, 64] split(1, model) = normal(0.2)
param w2: f32[64, 32] split(0, model) = normal(0.1)
input x: f32[B, 32] split(0, data) = normal(1.0)
fn block(x) {
  let h = dropout(gelu(dropout(x, P) @ w1), P)
  return dropout(h @ w2, P) + x
}
let h = x
for l in 0..L {
  let h = block(h)
}
let y = dropout(h, P)
output y
train mse(y, tanh(x)) with adam(lr = LR)
GSL

# build NAME FLAGS...: mlp.gsl (or $src) into NAME
src=mlp.gsl
build() { n=$1; shift; "$GSLC" -O1 "$@" "$src" -o "$n" || { fail "gslc $* $src"; return 1; }; }
# train NAME RANKS ARGS...: 4 steps, a checkpoint after the last, y written
train() {
  n=$1 r=$2; shift 2
  timeout 300 $MPIEXEC -n "$r" "./$n" --steps 4 --seed 3 --quiet --checkpoint "ck.$n" --checkpoint-every 4 \
    --output y="y.$n.npy" "$@" >"$n.out" 2>"$n.err" || { fail "$n on $r ranks: $(cat "$n.err")"; return 1; }
}
# same A B WHAT: every tensor of A's checkpoint, and A's y, the same bytes in B's
same() {
  bad= n=0
  for f in "ck.$1"/step-00000004/*.npy; do
    n=$((n + 1))
    cmp -s "$f" "ck.$2/step-00000004/$(basename "$f")" || bad="$bad $(basename "$f" .npy)"
  done
  cmp -s "y.$1.npy" "y.$2.npy" || bad="$bad y"
  [ "$n" -ge 4 ] || bad="$bad (only $n checkpoint tensors)"
  [ -z "$bad" ] && pass "$3: the $n checkpoint tensors and y the same bytes as $1's" ||
    fail "$3: differ from $1's:$bad"
}
# zeros NAME: y's elements, 1 where zero
zeros() { "$NPYTOOL" print "y.$1.npy" | sed 1d | awk '{ print ($1 == 0) }'; }

# ---- 1. meshes ----
meshes="1:1:1 2:1:2 4:1:4 2:2:4"
for m in $meshes; do
  dp=${m%%:*} rest=${m#*:}; mp=${rest%%:*} r=${rest#*:}
  build "sb$dp$mp" --same-bits -D DP="$dp" -D MP="$mp" && train "sb$dp$mp" "$r" || exit 1
  build "f$dp$mp" -D DP="$dp" -D MP="$mp" && train "f$dp$mp" "$r" || exit 1
done
same sb11 sb21 "--same-bits, [data = 2]"
same sb11 sb41 "--same-bits, [data = 4]"
same sb11 sb22 "--same-bits, [data = 2, model = 2]"
# a resume draws at the step it resumes at: 2 steps on [data = 2], then 2
# on one device from that checkpoint, are the 4 steps of one device
timeout 300 $MPIEXEC -n 2 ./sb21 --steps 2 --seed 3 --quiet --checkpoint ck.res >/dev/null 2>res.err &&
  timeout 300 $MPIEXEC -n 1 ./sb11 --steps 4 --seed 3 --quiet --checkpoint ck.res --resume --checkpoint-every 4 \
    --output y=y.res.npy >/dev/null 2>>res.err || fail "the resume: $(cat res.err)"
same sb11 res "--same-bits, 2 steps on [data = 2] and 2 resumed on one device"
zeros f11 >z11
nz=$(grep -c 1 z11)
[ "$nz" -gt 50 ] && [ "$nz" -lt 160 ] || fail "y has $nz zeros of 512, not about 0.2 of them"
for m in f21 f41 f22; do
  zeros "$m" >"z$m"
  cmp -s z11 "z$m" || fail "$m: y's zeros are not one device's"
  "$NPYTOOL" print "y.f11.npy" | sed 1d | "$NPYTOOL" compare "y.$m.npy" f32 16,32 --rtol 1e-4 --atol 1e-5 - ||
    fail "$m: y differs from one device's beyond float rounding"
done
[ $status -eq 0 ] && pass "without --same-bits: y's $nz zeros (its mask) the same elements on every mesh, its values to rounding"

# ---- 2. evaluation ----
awk 'BEGIN { x = 5; for (i = 0; i < 2 * 16 * 32; i++) { x = (1103515245 * x + 12345) % 2147483648;
  printf "%.6f ", x / 1073741824 - 1 } }' | "$NPYTOOL" write xe.npy f32 2,16,32 - || fail "cannot write xe.npy"
for p in 0.2 0; do
  build "ev$p" -D P=$p -D LR=0 &&
    timeout 300 $MPIEXEC -n 1 "./ev$p" --steps 2 --quiet --log-every 1 --metrics "ev$p.jsonl" --input x=xe.npy \
      --eval-input x=xe.npy >/dev/null 2>"ev$p.err" || fail "the evaluation with p = $p: $(cat "ev$p.err")"
done
eval_of() { sed -n 's/.*"eval_loss": \([^,}]*\).*/\1/p' "$1"; }
loss_of() { sed -n 's/.*"loss": \([^,}]*\).*/\1/p' "$1" | head -1; }
e2=$(eval_of ev0.2.jsonl) e0=$(eval_of ev0.jsonl)
if [ -n "$e2" ] && [ "$e2" = "$e0" ] && [ "$(loss_of ev0.2.jsonl)" != "$(loss_of ev0.jsonl)" ]; then
  pass "evaluation: eval_loss $e2 with p = 0.2 and with p = 0; training losses $(loss_of ev0.2.jsonl) and $(loss_of ev0.jsonl)"
else
  fail "evaluation: eval_loss '$e2' with p = 0.2, '$e0' with p = 0; training losses $(loss_of ev0.2.jsonl) and $(loss_of ev0.jsonl)"
fi

# ---- 3. generation ----
cat >succ.gsl <<'GSL'
input tokens: i32[2, 9]
param w: f32[16] = zeros()
let x = slice(tokens, 1, 0, 8)
let logits = dropout(8.0 * one_hot(x + 1, 16) + w, 0.5)
output logits
train mean(logits * logits) with sgd(lr = 0.1)
GSL
src=succ.gsl build succ || exit 1
printf '\003' >p3
timeout 120 $MPIEXEC -n 1 ./succ --generate 20 --top-k 1 --prompt-file p3 >gen.out 2>gen.err || fail "--generate: $(cat gen.err)"
got=$(od -An -v -tu1 gen.out | tr -s ' \n' '  ' | sed 's/^ //; s/ $//')
want="4 5 6 7 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7"
[ "$got" = "$want" ] && pass "generation: 20 bytes b + 1 after b through a dropout of p = 0.5" ||
  fail "generation through a dropout: '$got', want '$want'"

# ---- 4. recomputation ----
sed 's/^fn block/remat fn block/' mlp.gsl >remat.gsl
grep -q '^remat fn block' remat.gsl || fail "remat.gsl lacks its remat fn"
# the streams of the dropouts --emit-ir shows of FILE, whose lines end in PATTERN
streams() { "$GSLC" --emit-ir "$1" | grep "= dropout p 0.2 stream .*$2" | sed 's/.* stream \([0-9]*\) .*/\1/' | sort -n | tr '\n' ' ' | sed 's/ $//'; }
fwd=$(streams mlp.gsl '[0-9]$') re=$(streams remat.gsl '(recompute)$') bad=
for t in $re; do case " $fwd " in *" $t "*) ;; *) bad="$bad $t" ;; esac; done
# per layer the two dropouts the backward reads (the products' operands, for w1's and w2's gradients)
# are recomputed; the third's result only enters a sum
[ "$(echo $fwd | wc -w)" -eq 7 ] && [ "$(echo $re | wc -w)" -eq 4 ] && [ -z "$bad" ] &&
  pass "remat fn: 4 of the 7 dropouts recomputed, each with its forward stream ($re of $fwd)" ||
  fail "remat fn: the forward dropouts' streams '$fwd', the recomputed '$re'"
src=remat.gsl build re11 && train re11 1 && src=remat.gsl build re21 -D DP=2 && train re21 2 || exit 1
same f11 re11 "remat fn, 1 device, against keeping"
same f21 re21 "remat fn, [data = 2], against keeping on that mesh"
# a batch of 512 rows, whose activations dominate: under a budget of 1 MB
# (keeping needs more) gslc recomputes some of the layers
build kb -D B=512 && build mb -D B=512 --mem-budget 1000000 || exit 1
"$GSLC" -O1 -D B=512 --stats --mem-budget 1000000 mlp.gsl >mb.stats 2>&1
grep -q '^regions recomputed  *[1-9].*[1-9] chosen for --mem-budget' mb.stats || fail "--mem-budget 1000000 recomputes nothing: $(cat mb.stats)"
train kb 1 && train mb 1 || exit 1
same kb mb "--mem-budget's recomputed layers, 512 rows, against keeping"

exit $status
