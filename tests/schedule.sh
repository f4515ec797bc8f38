#!/bin/sh
# tests/schedule.sh — learning-rate schedules and gradient clipping of the
# train statement (issue 20), through compiled programs and --metrics.
#
# Schedules. loss = sum(w * x) with x all ones has the gradient 1 whatever
# w is, so sgd moves each w by exactly the step's lr: w = 1 - (the sum of
# the lrs). lr = 0.5, warmup = 4, decay_steps = 8, min_lr = 0.125; step t
# counts from 1, e = t - 1 steps done, p = min((e - 4) / 8, 1):
#   warmup, t <= 4: 0.5 t / 4 = 0.125, 0.25, 0.375, 0.5
#   linear:  0.5 - 0.375 p: t = 5 (p 0) 0.5, t = 7 (p 1/4) 0.40625,
#            t = 9 (p 1/2) 0.3125, t = 13 (p 1) 0.125, t = 20 0.125;
#            sum over 20 steps 1.25 + (0.5 + 0.453125 + ... + 0.125 =
#            2.8125) + 7 x 0.125 = 4.9375, so w = -3.9375
#   cosine:  0.125 + 0.375 (1 + cos(pi p)) / 2: t = 5 0.5, t = 7
#            0.125 + 0.375 x 0.853553391 = 0.445082521, t = 9 0.3125,
#            t = 13 0.125, t = 20 0.125
#   constant: 0.5 from t = 4 on
#   cosine without warmup (PyTorch's CosineAnnealingLR alone): t = 1 p 0,
#   0.5; t = 5 p 1/2, 0.3125; t = 9 p 1, 0.125.
# The binary fractions must come out exactly (f32 holds them, and the
# program's f32 arithmetic on them is exact); cosine's 0.445082521 to
# 1e-6. A run with checkpoints at step 7, resumed on 2 ranks to step 20,
# gives the lr of every step and the final w bit for bit as the straight
# run; the manifest names the schedule and has the lr of step 7; a
# resume under another schedule is refused.
#
# Clipping. w: f32[4] split over d with gradient x = [3, 4, 0, 12] and v:
# f32[3] replicated with gradient y = [5, 1, 1]: the global norm is
# sqrt(9 + 16 + 144 + 25 + 1 + 1) = sqrt(196) = 14, every partial sum a
# whole number, so grad_norm is 14 exactly on 1, 2 and 4 ranks. With
# clip = 7 and sgd(lr = 0.1) one step moves w by 0.1 x 7 / 14 x = 0.05 x:
# w = [0.85, 0.8, 1, 0.4], v = [0.75, 0.95, 0.95] (to 1e-6: the 1e-6
# torch adds to the norm). clip = 0 and clip = 1000 (never reached: the
# factor is exactly 1) give the outputs of the program without clip bit
# for bit. A replicated 128 x 128 param trained data-parallel keeps its
# sharded update (ZeRO-1) with clipping, its norm one scalar all-reduce.
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1

# field KEY FILE: KEY's value in each metrics record, one a line
field() { sed -n "s/.*\"$1\": \\([^,}]*\\).*/\\1/p" "$2"; }

# ---- each schedule's lr, from --metrics --------------------------------------
prog() { # NAME KEYWORDS
  cat >"$1.gsl" <<EOF
param w: f32[4] = ones()
input x: f32[4] = ones()
train sum(w * x) with sgd(lr = 0.5$2)
output w
EOF
  "$GSLC" "$1.gsl" -o "$1" || { fail "gslc $1.gsl"; return 1; }
  ./"$1" --steps 20 --log-every 1 --quiet --metrics "$1.jsonl" --output w="$1.w.npy" || { fail "$1 runs"; return 1; }
}
# check NAME "T LR" ...: the lr of step T is LR, written as %.9g prints it
check() {
  name=$1; shift
  field lr "$name.jsonl" >"$name.lr"
  for tl in "$@"; do
    set -- $tl
    got=$(sed -n "$1p" "$name.lr")
    [ "$got" = "$2" ] || { fail "$name: lr at step $1 is $got, not $2"; return 1; }
  done
}
sched=", warmup = 4, decay_steps = 8, min_lr = 0.125"
if prog linear ", decay = linear$sched" &&
   check linear "1 0.125" "2 0.25" "4 0.5" "5 0.5" "7 0.40625" "9 0.3125" "13 0.125" "20 0.125" &&
   "$NPYTOOL" compare linear.w.npy f32 4 --rtol 0 --atol 0 -3.9375 -3.9375 -3.9375 -3.9375; then
  pass "linear: warmup, decay and floor as worked by hand; w = 1 - the sum of the lrs, exactly"
fi
if prog cosine ", decay = cosine$sched" &&
   check cosine "1 0.125" "4 0.5" "5 0.5" "9 0.3125" "13 0.125" "20 0.125" &&
   awk -v g="$(sed -n 7p cosine.lr)" 'BEGIN { d = g - 0.445082521; if (d < 0) d = -d; exit d > 1e-6 * 0.445 }'; then
  pass "cosine: warmup, decay (step 7: $(sed -n 7p cosine.lr)) and floor as worked by hand"
else
  fail "cosine: lr by step: $(tr '\n' ' ' <cosine.lr)"
fi
if prog constant ", warmup = 4" && check constant "1 0.125" "3 0.375" "4 0.5" "5 0.5" "20 0.5"; then
  pass "constant after warmup"
fi
if prog nowarm ", decay = cosine, decay_steps = 8, min_lr = 0.125" && check nowarm "1 0.5" "5 0.3125" "9 0.125" "20 0.125"; then
  pass "cosine without warmup starts at lr, as CosineAnnealingLR"
fi
if prog plain "" && [ "$(field lr plain.jsonl | sort -u)" = 0.5 ] && [ "$(field grad_norm plain.jsonl | sort -u)" = 2 ]; then
  pass "no schedule: lr 0.5 at every step; grad_norm 2 (= |[1, 1, 1, 1]|) reported"
else
  fail "no schedule: lr $(field lr plain.jsonl | sort -u | tr '\n' ' '), grad_norm $(field grad_norm plain.jsonl | sort -u)"
fi

# ---- the schedule's values stay finite, not only lr (issue 30, item 5) ------
# cosine computes (lr - min_lr) * (1 + cos(pi p)), up to 2 lr: lr = 1.5e38
# keeps that at 3.0e38, under the largest f32 (3.40282347e38), and step 1
# logs lr 1.5e+38 (1.5e38 rounded to f32, as %.9g prints it), not inf or
# null; lr = 1.8e38 would reach 3.6e38 and is refused where it is written
# (tests/errors/train_values.gsl has the message).
cat >edge.gsl <<'EOF'
param w: f32[4] = ones()
input x: f32[4] = ones()
train sum(w * x) with sgd(lr = 1.5e38, decay = cosine, decay_steps = 8)
EOF
if "$GSLC" edge.gsl -o edge && ./edge --steps 1 --quiet --metrics edge.jsonl && [ "$(field lr edge.jsonl)" = 1.5e+38 ]; then
  pass "lr = 1.5e38 under cosine: step 1's lr 1.5e+38, finite"
else
  fail "lr = 1.5e38 under cosine: $(cat edge.jsonl)"
fi
sed 's/1.5e38/1.8e38/' edge.gsl >edge2.gsl
"$GSLC" edge2.gsl -o edge2 2>edge2.err && fail "lr = 1.8e38 under cosine compiled"
grep -q "^edge2.gsl:3:32: error: lr = 1.8e+38 with decay = cosine" edge2.err || fail "lr = 1.8e38: $(cat edge2.err)"

# ---- a resumed run continues the schedule exactly ----------------------------
cat >res.gsl <<'EOF'
const D = 1
mesh [d = D]
param w: f32[4] split(0) = ones()
input x: f32[4] split(0) = normal(1.0)
train sum(w * w * x) with adam(lr = 0.5, warmup = 4, decay = cosine, decay_steps = 8, min_lr = 0.125)
output w
EOF
sed 's/decay = cosine/decay = linear/' res.gsl >other.gsl
for d in 1 2; do "$GSLC" -D D=$d res.gsl -o res$d || fail "gslc res.gsl -D D=$d"; done
"$GSLC" -D D=2 other.gsl -o other2 || fail "gslc other.gsl"
./res1 --steps 20 --log-every 1 --quiet --metrics straight.jsonl --output w=straight.npy || fail "the straight run"
./res1 --steps 7 --log-every 1 --quiet --checkpoint ck --metrics first.jsonl || fail "the run to step 7"
$MPIEXEC -n 2 ./res2 --steps 20 --log-every 1 --quiet --checkpoint ck --resume --metrics second.jsonl \
  --output w=resumed.npy || fail "the resumed run"
field lr straight.jsonl >straight.lr
{ field lr first.jsonl; field lr second.jsonl; } >resumed.lr
lr7=$(sed -n 7p straight.lr)
if [ "$(wc -l <straight.lr)" -eq 20 ] && cmp -s straight.lr resumed.lr && cmp -s straight.npy resumed.npy; then
  pass "resumed at step 7 on 2 ranks: the lr of steps 8-20 and the final w bit for bit as the straight run"
else
  fail "resumed run: lrs straight / resumed:"; paste straight.lr resumed.lr
fi
m=ck/step-00000007/manifest.json
if tr -d ' \n' <$m | grep -q '"optimizer":"adam(lr=0.5,beta1=0.9,beta2=0.999,eps=1e-08,weight_decay=0,warmup=4,decay=cosine,decay_steps=8,min_lr=0.125)"' &&
   tr -d ' \n' <$m | grep -q "\"signals\":{\"lr\":$lr7[0-9]*,\"grad_norm\":" &&
   grep -q '"name": "adam.t"' $m; then
  pass "the manifest names the schedule, the lr of step 7 ($lr7) and the step count adam.t"
else
  fail "the manifest:"; cat $m
fi
$MPIEXEC -n 2 ./other2 --steps 20 --quiet --checkpoint ck --resume >out 2>err
if [ $? -eq 1 ] && grep -q 'error: checkpoint ck/step-00000020: the optimizer is adam(.*decay=cosine.*) there, adam(.*decay=linear.*) in this program' err; then
  pass "a resume under another schedule is refused"
else
  fail "a resume under another schedule:"; cat out err
fi
# sgd has no step count of its own: a schedule gives it one, saved and restored
prog sgdres ", warmup = 4, decay = linear, decay_steps = 8, min_lr = 0.125" >/dev/null
./sgdres --steps 5 --quiet --checkpoint cs && ./sgdres --steps 20 --quiet --checkpoint cs --resume --output w=sgdres.npy &&
  grep -q '"name": "sgd.t"' cs/step-00000005/manifest.json &&
  "$NPYTOOL" compare sgdres.npy f32 4 --rtol 0 --atol 0 -3.9375 -3.9375 -3.9375 -3.9375 &&
  pass "sgd with a schedule: its step count sgd.t checkpointed; resumed at step 5, w = -3.9375 exactly" ||
  fail "sgd with a schedule, resumed"

# ---- clipping by the global norm, on 1, 2 and 4 ranks ------------------------
printf 'x f32 4 3 4 0 12\ny f32 3 5 1 1\n' | while read -r n t s v; do "$NPYTOOL" write "$n.npy" $t $s $v; done
clip_prog() { # NAME KEYWORDS
  cat >"$1.gsl" <<EOF
const D = 1
mesh [d = D]
param w: f32[4] split(0) = ones()
param v: f32[3] replicate() = ones()
input x: f32[4] split(0)
input y: f32[3] replicate()
train sum(w * x) + sum(v * y) with sgd(lr = 0.1$2)
output w, v
EOF
}
clip_prog clip ", clip = 7"
clip_prog noclip ""
clip_prog clip0 ", clip = 0"
clip_prog clipbig ", clip = 1000"
for d in 1 2 4; do
  for p in clip noclip clip0 clipbig; do
    "$GSLC" -D D=$d $p.gsl -o $p$d || { fail "gslc -D D=$d $p.gsl"; continue; }
    $MPIEXEC -n $d ./$p$d --steps 1 --quiet --input x=x.npy --input y=y.npy --metrics $p$d.jsonl \
      --output w=$p$d.w.npy --output v=$p$d.v.npy || fail "$p on $d ranks"
  done
  if [ "$(field grad_norm clip$d.jsonl)" = 14 ] && [ "$(field grad_norm noclip$d.jsonl)" = 14 ] &&
     "$NPYTOOL" compare clip$d.w.npy f32 4 --rtol 1e-6 0.85 0.8 1 0.4 &&
     "$NPYTOOL" compare clip$d.v.npy f32 3 --rtol 1e-6 0.75 0.95 0.95; then
    pass "clip = 7 on $d rank(s): grad_norm 14 (before clipping), the update 0.1 x 7 / 14 x"
  else
    fail "clip = 7 on $d rank(s): grad_norm $(field grad_norm clip$d.jsonl)"
  fi
  if cmp -s noclip$d.w.npy clip0$d.w.npy && cmp -s noclip$d.v.npy clip0$d.v.npy &&
     cmp -s noclip$d.w.npy clipbig$d.w.npy && cmp -s noclip$d.v.npy clipbig$d.v.npy &&
     "$NPYTOOL" compare noclip$d.w.npy f32 4 0.7 0.6 1 -0.2; then
    pass "clip = 0 and clip = 1000 on $d rank(s): the outputs of the program without clip, bit for bit"
  else
    fail "clipping off on $d rank(s) changes the outputs"
  fi
done
"$GSLC" -D D=4 --explain clip.gsl >clip.explain
if [ "$(grep -c '^all_reduce .*f32\[\] -> \[\].*update' clip.explain)" -eq 1 ] && ! grep -q '^all_gather  *over' clip.explain &&
   grep -q '^clip: every gradient times min(1, 7 / (grad_norm + 1e-6))' clip.explain; then
  pass "the norm over a split and a replicated gradient: one scalar all-reduce, no gather (--explain)"
else
  fail "the norm's collectives:"; sed -n '/## train/,$p' clip.explain
fi

# ---- ZeRO-1 with clipping ----------------------------------------------------
# the gradient is 8 everywhere (x's column sums); the norm is
# sqrt(128 x 128 x 64 + 128 x 64) = sqrt(1056768), exact in f32 partial sums;
# one momentum step moves w by 0.1 x 8 / sqrt(1056768) = 7.78211e-4
cat >z.gsl <<'EOF'
const D = 2
mesh [d = D]
param w: f32[128, 128] replicate() = ones()
param b: f32[128] replicate() = zeros()
input x: f32[8, 128] split(0) = ones()
train sum(x @ w) + sum(x * b) with momentum(lr = 0.1, momentum = 0, clip = 1)
output w
EOF
"$GSLC" --explain z.gsl >z.explain || fail "gslc --explain z.gsl"
if grep -q '^w  *f32\[128, 128\] *sharded over (d) on dim 0 (ZeRO-1)' z.explain &&
   [ "$(grep -c '^all_gather  *over' z.explain)" -eq 1 ] && ! grep -q '^all_reduce .*f32\[128, 128\]' z.explain &&
   [ "$(grep -c '^all_reduce .*f32\[\] -> \[\].*update' z.explain)" -eq 1 ]; then
  pass "ZeRO-1 with clipping: w's update still sharded, its norm one scalar all-reduce"
else
  fail "ZeRO-1 with clipping:"; sed -n '/## train/,$p' z.explain
fi
for d in 1 2; do
  "$GSLC" -D D=$d z.gsl -o z$d && $MPIEXEC -n $d ./z$d --steps 1 --quiet --metrics z$d.jsonl --output w=z$d.npy ||
    fail "z on $d ranks"
done
want=$(awk 'BEGIN { printf "%.9g", 1 - 0.1 * 8 / sqrt(1056768) }')
if [ "$(field grad_norm z1.jsonl)" = "$(field grad_norm z2.jsonl)" ] && cmp -s z1.npy z2.npy &&
   "$NPYTOOL" print z1.npy | sed 1d | awk -v w="$want" '{ d = $1 - w; if (d < 0) d = -d; if (d > 1e-6) bad++ } END { exit bad || NR != 16384 }'; then
  pass "ZeRO-1 with clipping: grad_norm $(field grad_norm z1.jsonl) and w ($want) bit for bit on 1 and 2 ranks"
else
  fail "ZeRO-1 with clipping: grad_norm $(field grad_norm z1.jsonl) / $(field grad_norm z2.jsonl), w:"
  "$NPYTOOL" print z1.npy | sed -n 2p; "$NPYTOOL" print z2.npy | sed -n 2p
fi
exit $status
