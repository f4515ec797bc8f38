#!/bin/sh
# tests/lm.sh — examples/lm.gsl, the MoE Transformer language model,
# examples/lm_dense.gsl and examples/lm_shared.gsl (shared and fine-grained
# experts, with a routing bias here) are the same program on every mesh,
# and evaluating a checkpoint gives the evaluation logged when it was
# written.
#
# At a tiny size (-D: 4 sequences of 8 bytes, width 16, 2 heads, 4 experts
# of width 32), the model is compiled for 1 device, for [data = 1, expert =
# 2] and for [data = 2, expert = 2] (lm_dense and lm_shared: 1 device and
# 1 x 2; lm_shared with 4 experts of width 8, top 2, 1 shared, and
# bias_rate 0.01), and
# trained for 2 adam steps on the same two batches of byte windows (made
# here by a fixed linear congruential generator). On every mesh, to 1e-4
# relative:
#   - the loss at both steps (--metrics) and ce of the last step;
#   - every param after the steps (every expert's too; the test adds an
#     `output` line naming them), with an absolute floor of 1e-4: adam's
#     first step moves a weight by lr = 1e-3 times
#     g / (|g| + eps), so where a gradient is within a few eps (1e-8) of
#     zero its rounding (about 1e-10 for summands near 1e-3) moves the
#     weight by 1e-5 or more either way (1.5e-5 seen for one expert weight
#     of 4096 on 2 x 2), while a wrong gradient's sign moves it by 2e-3;
#   - the held-out loss after step 2 (--eval-every 2 on two other batches).
# Then, on 2 devices, a run of 4 steps evaluated every 2 steps with a
# checkpoint every 2 steps: resuming from the step-4 checkpoint with
# nothing left to train (--steps 4) and --eval-input logs the same
# eval_loss and eval_ce as the training run logged at step 4, bit for bit
# (the same mesh, the same params, the same draws), and resuming it on one
# device gives them to 1e-4. tests/auto/lm.gsl (the model with its mesh
# alone) compiled with --auto-shard for [data = 1, expert = 2] is held to
# the same agreement with one device.
set -u
. "$top_srcdir/tests/lib.sh"
sizes="-D B=4 -D T=8 -D M=16 -D NH=2 -D H=32 -O1"

# byte windows [n, 4, 9] from x <- (1103515245 x + 12345) mod 2^31, bytes x >> 16 & 255
windows() { # n seed
  awk -v n="$1" -v x="$2" 'BEGIN { for (i = 0; i < n * 36; i++) { x = (1103515245 * x + 12345) % 2147483648;
    printf "%d ", int(x / 65536) % 256 } }' | "$NPYTOOL" write "$work/$3" i32 "$1,4,9" - ||
    fatal "cannot write $3"
}
windows 2 7 train.npy
windows 2 99 eval.npy

params="emb pos ln_g ln_b wq wk wv wo w1 w2 wg wi we wout"
run() { # name ranks data expert [model: lm, lm_dense, lm_shared, or auto: tests/auto/lm.gsl under --auto-shard]
  model=${5:-lm} src=$top_srcdir/examples/${5:-lm}.gsl auto=
  [ "$model" = auto ] && src=$top_srcdir/tests/auto/lm.gsl auto=--auto-shard
  { cat "$src"; echo "output $(echo $params | tr ' ' ',')"; } >"$work/$model.gsl"
  experts="-D E=4"; [ "$model" = lm_dense ] && experts=
  [ "$model" = lm_shared ] && experts="-D E=4 -D TOP=2 -D HE=8 -D SHARED=1 -D BIAS_RATE=0.01"
  "$GSLC" $sizes $experts $auto -D DATA="$3" -D EXPERT="$4" "$work/$model.gsl" -o "$work/$1" ||
    { fail "examples/$model.gsl does not compile for $3 x $4"; return 1; }
  outs=""
  for t in $params ce; do outs="$outs --output $t=$1.$t.npy"; done
  # shellcheck disable=SC2086
  (cd "$work" && timeout 300 $MPIEXEC -n "$2" "./$1" --steps 2 --quiet --metrics "$1.jsonl" \
    --input tokens=train.npy --eval-every 2 --eval-input tokens=eval.npy $outs) ||
    { fail "examples/lm.gsl on $3 x $4"; return 1; }
  sed -n 's/.*"loss": *\([^,}]*\).*/\1/p' "$work/$1.jsonl" >"$work/$1.loss"
  sed -n 's/.*"eval_loss": *\([^,}]*\).*/\1/p' "$work/$1.jsonl" >"$work/$1.eval"
  [ "$(wc -l <"$work/$1.loss")" -eq 2 ] || { fail "$1 logged $(wc -l <"$work/$1.loss") losses, not 2"; return 1; }
  [ "$(wc -l <"$work/$1.eval")" -eq 1 ] || { fail "$1 logged $(wc -l <"$work/$1.eval") evaluations, not 1"; return 1; }
}

same() { # what a b: the numbers in files a and b agree to 1e-4 relative
  paste "$2" "$3" | awk -v w="$1" '{ d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1
    if (d > 1e-4 * m) { print w " " NR ": " $1 " against " $2; bad = 1 } } END { exit bad }'
}

# the streams gsl.7 gives (random_routing): the 12 params' initializers
# 0 to 11, then one draw per MoE layer (L = 4: layers 1 and 3) 12 and 13
streams=$("$GSLC" --emit-ir "$top_srcdir/examples/lm.gsl" | sed -n 's/.*rng uniform(0, 1) stream \([0-9]*\) .*/\1/p' | tr '\n' ' ')
[ "$streams" = "12 13 " ] || fail "examples/lm.gsl's routing draws are on streams $streams, not 12 13 as gsl.7 says"
run m1 1 1 1 || exit 1
params="emb pos ln_g ln_b wq wk wv wo w1 w2 wout"
run d1 1 1 1 lm_dense || exit 1
params="emb pos ln_g ln_b wq wk wv wo w1 w2 wg wi we ws1 ws2 wout"
run s1 1 1 1 lm_shared || exit 1
params="emb pos ln_g ln_b wq wk wv wo w1 w2 wg wi we wout"
for r in "m2 2 1 2 m1" "m4 4 2 2 m1" "a2 2 1 2 m1 auto" "d2 2 1 2 d1 lm_dense" "s2 2 1 2 s1 lm_shared"; do
  set -- $r
  [ "$1" = d2 ] && params="emb pos ln_g ln_b wq wk wv wo w1 w2 wout"
  [ "$1" = s2 ] && params="emb pos ln_g ln_b wq wk wv wo w1 w2 wg wi we ws1 ws2 wout"
  run "$1" "$2" "$3" "$4" "${6:-lm}" || continue
  same loss "$work/$5.loss" "$work/$1.loss" || fail "the losses of $1 on $3 x $4 differ from one device's"
  same eval_loss "$work/$5.eval" "$work/$1.eval" || fail "the held-out loss of $1 on $3 x $4 differs from one device's"
  for t in $params ce; do
    head=$("$NPYTOOL" print "$work/$5.$t.npy" | sed 1q)
    "$NPYTOOL" print "$work/$5.$t.npy" | sed 1d |
      "$NPYTOOL" compare "$work/$1.$t.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-4 --atol 1e-4 - ||
      fail "$t after 2 steps of $1 on $3 x $4 differs from one device's"
  done
  [ $status -eq 0 ] && echo "${6:-lm} on $3 x $4 ($2 ranks): the same losses, held-out loss and params as one device"
done
l1=$(sed -n 1p "$work/m1.loss"); l2=$(sed -n 2p "$work/m1.loss")
# a byte model near its init: about ln 256 = 5.545 nats per byte (plus 0.01 per MoE layer's aux)
awk -v a="$l1" -v b="$l2" 'BEGIN { exit !(a > 5.45 && a < 5.65 && b > 5.45 && b < 5.65) }' ||
  fail "the losses $l1, $l2 are not those of a byte model at init"

# evaluation of a checkpoint, with nothing left to train
"$GSLC" $sizes -D E=4 -D DATA=1 -D EXPERT=1 "$top_srcdir/examples/lm.gsl" -o "$work/c1" || fail "no 1-device build"
(cd "$work" && timeout 300 $MPIEXEC -n 2 ./m2 --steps 4 --quiet --metrics train4.jsonl --input tokens=train.npy \
  --eval-every 2 --eval-input tokens=eval.npy --checkpoint ck --checkpoint-every 2) || fail "4 steps with checkpoints"
logged=$(sed -n 's/.*"step": *4,.*"eval_loss": *\([^,}]*\).*/\1/p' "$work/train4.jsonl")
logged_ce=$(sed -n 's/.*"step": *4,.*"eval_ce": *\([^,}]*\).*/\1/p' "$work/train4.jsonl")
[ -n "$logged" ] && [ -n "$logged_ce" ] || fail "no eval_loss and eval_ce at step 4 in $(cat "$work/train4.jsonl")"
(cd "$work" && timeout 300 $MPIEXEC -n 2 ./m2 --steps 4 --resume --checkpoint ck --metrics again.jsonl \
  --eval-input tokens=eval.npy >again.out) || fail "evaluating the checkpoint on 2 devices"
again=$(sed -n 's/.*"step": *4,.*"eval_loss": *\([^,}]*\).*/\1/p' "$work/again.jsonl")
again_ce=$(sed -n 's/.*"step": *4,.*"eval_ce": *\([^,}]*\).*/\1/p' "$work/again.jsonl")
[ "$again" = "$logged" ] && [ "$again_ce" = "$logged_ce" ] ||
  fail "the checkpoint of step 4 evaluates to $again ($again_ce), the run logged $logged ($logged_ce)"
grep -q "eval_loss" "$work/again.out" || fail "evaluating the checkpoint printed no eval_loss: $(cat "$work/again.out")"
(cd "$work" && timeout 300 $MPIEXEC -n 1 ./c1 --steps 4 --resume --checkpoint ck --quiet --metrics one.jsonl \
  --eval-input tokens=eval.npy) || fail "evaluating the checkpoint on 1 device"
one=$(sed -n 's/.*"step": *4,.*"eval_loss": *\([^,}]*\).*/\1/p' "$work/one.jsonl")
awk -v a="$one" -v b="$logged" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4 * b) }' ||
  fail "the checkpoint of step 4 evaluates to $one on 1 device, $logged on 2"

[ $status -eq 0 ] && pass "lm (loss $l1 then $l2; held-out $logged at step 4, again from its checkpoint on 2 and 1 devices)"
exit $status
