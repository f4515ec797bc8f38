#!/bin/sh
# tests/moe_bias_rate.sh — a moe block's routing bias (bias_rate = R, gsl.7,
# MIXTURE OF EXPERTS): a per-expert bias added to the gates only to choose
# the experts, moved by R toward the even load after each training step,
# kept in checkpoints.
#
#   1. by hand: top-1, E = 4, every token the same, gates [0.7, 0.1, 0.1,
#      0.1] (wg = [ln 7, 0, 0, 0] on x = 1), R = 0.25. An awk reference
#      walks the steps: every token goes to the argmax of gates + bias
#      (ties to the lower index), each bias moves by +R where the expert
#      got less than 1/4 of the choices, -R where more. Each step's loads
#      (--metrics), its loss (8 tokens of weight g[e]: 8 g[e]^2, the gate
#      and never the biased score), the bias range logged and the bias in
#      the checkpoint after 8 steps, exactly, on 1 and on 2 devices;
#   2. balancing: top-2, E = 8, a router that sends the tokens to experts
#      0 and 1: with R = 0.005, over steps 201 to 300, the busiest
#      expert's mean load is within 1.5 times the mean and so is the mean
#      of each step's busiest load; without bias_rate both stay above 2;
#   3. meshes: under --same-bits, 60 steps on [d = 2], and 30 on [d = 2]
#      resumed for 30 on one device, leave the checkpoint one device's 60
#      steps leave, byte for byte (the bias among its tensors, moved). The
#      block has no name here: its bias is moe.bal3.gsl:11.bias, a file
#      name with a colon, which ROMIO would take for a file system's.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
hand_prog gslc "$GSLC"

# ---- 1. by hand ----
cat >hand.gsl <<'EOF'
const D = 1
mesh [d = D]
input x: f32[2, 4, 1] split(0)
input wg: f32[1, 4]
param w: f32[4, 1, 1] split(0) = ones()
let y, aux = moe(x, gate = wg, top = 1, capacity = 0, bias_rate = 0.25, name = "ffn") (t, e) {
  return t @ w[e]
}
output y
train sum(y * y) with sgd(lr = 0)
EOF
"$NPYTOOL" write x.npy f32 2,4,1 1 1 1 1 1 1 1 1 && "$NPYTOOL" write wg.npy f32 1,4 1.9459101 0 0 0 ||
  fatal "npytool write"
# the reference: per step "load e0 e1 e2 e3 loss L range R", then "bias b0 b1 b2 b3"
awk 'BEGIN {
  E = 4; R = 0.25; g[0] = 0.7; g[1] = g[2] = g[3] = 0.1
  for (e = 0; e < E; e++) b[e] = 0
  for (step = 1; step <= 8; step++) {
    best = 0
    for (e = 1; e < E; e++) if (g[e] + b[e] > g[best] + b[best]) best = e
    lo = hi = b[0]
    for (e = 1; e < E; e++) { if (b[e] < lo) lo = b[e]; if (b[e] > hi) hi = b[e] }
    printf "load"; for (e = 0; e < E; e++) printf " %d", e == best; printf " loss %.4f range %g\n", 8 * g[best] * g[best], hi - lo
    for (e = 0; e < E; e++) b[e] += e == best ? -R : R   # one expert got every choice: more than 1/4; the rest none
  }
  printf "bias"; for (e = 0; e < E; e++) printf " %g", b[e]; printf "\n"
}' >ref
for np in 1 2; do
  "$GSLC" -D D=$np hand.gsl -o hand$np || { fail "gslc hand.gsl -D D=$np"; continue; }
  bin=$work/hand$np run $np --steps 8 --input x=x.npy --input wg=wg.npy --log-every 1 --metrics m$np.jsonl --checkpoint ck$np --quiet
  [ $rc -eq 0 ] || { fail "hand on $np ranks: status $rc: $(cat err)"; continue; }
  # the program's steps in the reference's form
  sed -n 's/.*"loss": \([^,]*\), "moe.ffn.load": \[\([^]]*\)\].*"moe.ffn.bias_range": \([^,]*\),.*/\2 \1 \3/p' m$np.jsonl |
    tr -d , | awk '{ printf "load %d %d %d %d loss %.4f range %g\n", $1, $2, $3, $4, $5, $6 }' >got$np
  "$NPYTOOL" print ck$np/step-00000008/moe.ffn.bias.npy | sed 1d | tr '\n' ' ' | awk '{ printf "bias %g %g %g %g\n", $1, $2, $3, $4 }' >>got$np
  # the losses agree to 4 decimals (the gates are f32); everything else exactly
  if diff ref got$np >diff$np; then
    pass "by hand on $np device(s): 8 steps' loads, losses (the gates' weights, not the biased scores), bias ranges and the bias after them ($(tail -1 ref))"
  else
    fail "by hand on $np device(s): the reference (<) and the program (>) differ:"; cat diff$np
  fi
done

# ---- 2. balancing ----
cat >bal.gsl <<'EOF'
const D = 2
const RATE = 0.005
mesh [d = D]
const G = 8
const S = 64
const M = 4
const E = 8
input x: f32[G, S, M] split(0) = normal(1.0)
input wg: f32[M, E]
param wi: f32[E, M, M] split(0) = normal(0.3)
let y, aux = moe(x, gate = wg, top = 2, capacity = 0, bias_rate = RATE, name = "ffn") (t, e) {
  return t @ wi[e]
}
train mean(y * y) with sgd(lr = 0.01)
EOF
# the router: the first feature sends a token to expert 0 (x0 > 0) or 1
# (x0 < 0) with a logit of 3 |x0|; the other experts' columns are small
"$NPYTOOL" write wgb.npy f32 4,8 3 -3 0.2 -0.2 0.1 0 -0.1 0.3 0.1 0.2 -0.2 -0.1 0 0.1 0.2 -0.2 \
  -0.1 0 0.1 0.2 -0.2 -0.1 0 0.1 0.2 -0.2 -0.1 0 0.1 0.2 -0.2 -0.1 || fatal "npytool write"
# busiest FILE: over steps 201 to 300, the largest of the experts' mean
# loads (times E: 1 is even), then the mean of each step's busiest load
busiest() {
  awk '/"step": (2[0-9][0-9]|300),/ && !/"step": 200,/ {
    n++
    s = $0; sub(/.*"moe.ffn.load": \[/, "", s); sub(/\].*/, "", s)
    k = split(s, l, ", "); for (e = 1; e <= k; e++) sum[e] += l[e]
    m = $0; sub(/.*"moe.ffn.load_max": /, "", m); sub(/,.*/, "", m); mx += m
  } END {
    best = 0; for (e = 1; e <= k; e++) if (sum[e] / n * k > best) best = sum[e] / n * k
    printf "%.3f %.3f %d\n", best, mx / n, n
  }' "$1"
}
for r in 0.005 0; do
  "$GSLC" -D RATE=$r bal.gsl -o bal || { fail "gslc bal.gsl -D RATE=$r"; continue; }
  bin=$work/bal run 2 --steps 300 --seed 1 --input wg=wgb.npy --log-every 1 --metrics b$r.jsonl --quiet
  [ $rc -eq 0 ] || { fail "balancing, rate $r: status $rc: $(cat err)"; continue; }
  set -- $(busiest b$r.jsonl)
  if [ "${3:-0}" -ne 100 ]; then
    fail "balancing, rate $r: $3 of steps 201 to 300 in the metrics"
  elif [ $r = 0 ]; then
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 2 && b > 2) }' &&
      pass "without bias_rate the router stays unbalanced: the busiest expert's mean load $1, each step's busiest $2 on average (steps 201 to 300)" ||
      fail "without bias_rate: the busiest mean load $1, each step's $2: not above 2 (the test's router does not favour two experts)"
  else
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= 1.5 && b <= 1.5) }' &&
      pass "bias_rate = $r balances it: the busiest expert's mean load $1, each step's busiest $2 on average (steps 201 to 300)" ||
      fail "bias_rate = $r: the busiest mean load $1, each step's busiest $2 on average: above 1.5"
  fi
done

# ---- 3. meshes and a resume, --same-bits ----
sed 's/, name = "ffn"//' bal.gsl >bal3.gsl
for d in 1 2; do
  "$GSLC" --same-bits -D D=$d -D RATE=0.005 bal3.gsl -o sb$d || fail "gslc --same-bits -D D=$d bal3.gsl"
done
bin=$work/sb1 run 1 --steps 60 --seed 2 --input wg=wgb.npy --checkpoint c1 --checkpoint-every 60 --quiet
r1=$rc
bin=$work/sb2 run 2 --steps 60 --seed 2 --input wg=wgb.npy --checkpoint c2 --checkpoint-every 60 --quiet
r2=$rc
bin=$work/sb2 run 2 --steps 30 --seed 2 --input wg=wgb.npy --checkpoint cr --checkpoint-every 30 --quiet
r3=$rc
bin=$work/sb1 run 1 --steps 60 --seed 2 --input wg=wgb.npy --checkpoint cr --checkpoint-every 30 --resume --quiet
r4=$rc
if [ "$r1$r2$r3$r4" != 0000 ]; then
  fail "the --same-bits runs: statuses $r1 $r2 $r3 $r4: $(cat err)"
else
  bad=
  for f in c1/step-00000060/*.npy; do
    t=$(basename "$f")
    cmp -s "$f" "c2/step-00000060/$t" || bad="$bad $t on [d = 2];"
    cmp -s "$f" "cr/step-00000060/$t" || bad="$bad $t resumed;"
  done
  moved=$("$NPYTOOL" print "c1/step-00000060/moe.bal3.gsl:11.bias.npy" | sed 1d | awk '$1 != 0 { n++ } END { print n + 0 }')
  if [ -n "$bad" ]; then
    fail "--same-bits: checkpoints differ from one device's:$bad"
  elif [ "$moved" -lt 8 ]; then
    fail "--same-bits: the bias moved on $moved of 8 experts in 60 steps"
  else
    pass "--same-bits: 60 steps on [d = 2], and 30 resumed on one device for 30 more, leave one device's checkpoint byte for byte (the bias moved on all 8 experts)"
  fi
fi
exit $status
