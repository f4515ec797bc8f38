#!/bin/sh
# tests/uneven_examples.sh — every example on meshes of 3 and 6 devices,
# whose sizes its dimensions do not divide (gsl.7, Uneven dimensions), gives
# one device's numbers: its outputs, its logged losses and its params after
# two steps (one update in them), to 1e-5 relative (1e-6 absolute; params
# 1e-4 absolute, as tests/examples.sh has it: adam's first step is lr * g /
# (|g| + eps), and a weight whose gradient is within rounding of eps
# (1e-8) moves by a visible fraction of lr = 1e-3 either way; one in
# 262144 of mlp's w1 does, by 1.6e-5). Small sizes (-D), few steps: 6
# ranks on 2 cores are slow.
#   mlp: B = 64 rows and H = 1024 over 3 and 6 (3 x 2 and 2 x 3);
#   moe_forward and moe (SPEC section 1, its mesh cut to 1, 3 and 6): 8
#     groups and 8 experts over 3 and 6 (tiles of 3, 3, 2; of 2, 2, 2, 2,
#     0, 0: trailing devices hold none), moe trained with adam;
#   lm and lm_dense: 8 sequences of 8 bytes over [data, expert] = 3 x 1,
#     1 x 3 and 3 x 2; lm's 4 experts over 3 and 2; evaluated after step 2
#     (the held-out loss compared too).
set -u
. "$top_srcdir/tests/lib.sh"

# same REF RUN NAME ATOL: every .npy of run REF agrees with RUN's
same() {
  for f in "$work/$1".*.npy; do
    t=${f#"$work/$1".}
    head=$("$NPYTOOL" print "$f" | sed 1q)
    "$NPYTOOL" print "$f" | sed 1d |
      "$NPYTOOL" compare "$work/$2.$t" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-5 --atol "$4" - \
        >"$work/cmp" 2>&1 || { fail "$3: ${t%.npy} on $2 differs from one device's: $(cat "$work/cmp")"; return 1; }
  done
  # the losses each step logged, and the held-out ones (none for a forward program)
  if [ -f "$work/$1.jsonl" ]; then
    sed -n 's/.*"loss": *\([^,}]*\).*/\1/p; s/.*"eval_loss": *\([^,}]*\).*/\1/p' "$work/$1.jsonl" >"$work/$1.loss"
    sed -n 's/.*"loss": *\([^,}]*\).*/\1/p; s/.*"eval_loss": *\([^,}]*\).*/\1/p' "$work/$2.jsonl" >"$work/$2.loss"
    [ -s "$work/$1.loss" ] && paste "$work/$1.loss" "$work/$2.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d
        m = $1 < 0 ? -$1 : $1; if ($2 == "" || d > 1e-5 * m) bad = 1 } END { exit bad }' ||
      { fail "$3: the losses on $2 differ from one device's: $(paste "$work/$1.loss" "$work/$2.loss" | tr '\n' ' ')"; return 1; }
  fi
  return 0
}

# run NAME RANKS PROG ARGS...: the outputs as NAME.OUT.npy
run() {
  name=$1 np=$2 prog=$3; shift 3
  (cd "$work" && timeout 600 $MPIEXEC -n "$np" "./$prog" --quiet "$@") >"$work/$name.log" 2>&1 ||
    { fail "$name on $np ranks: $(tail -3 "$work/$name.log")"; return 1; }
}

outs() { # NAME OUT...: --output OUT=NAME.OUT.npy for each
  n=$1; shift
  for o in "$@"; do printf -- '--output %s=%s.%s.npy ' "$o" "$n" "$o"; done
}

# ---- mlp ----------------------------------------------------------------------------
mo="y w1 b1 w2 b2"
for m in 1,1 3,1 1,3 3,2 2,3; do
  dp=${m%,*} mp=${m#*,} n=mlp$dp$mp
  "$GSLC" -D DP=$dp -D MP=$mp "$top_srcdir/examples/mlp.gsl" -o "$work/$n" || { fail "mlp does not compile for $dp x $mp"; continue; }
  # shellcheck disable=SC2046
  run $n $((dp * mp)) $n --steps 2 --metrics $n.jsonl $(outs $n $mo) || continue
  [ $n = mlp11 ] && continue
  same mlp11 $n "mlp on $dp x $mp" 1e-4 && pass "mlp on $dp x $mp ($((dp * mp)) ranks): one device's y, params and losses"
done

# ---- moe_forward ----------------------------------------------------------------------
for d in 1 3 6; do
  n=fwd$d
  "$GSLC" -D D=$d -D G=8 "$top_srcdir/examples/moe_forward.gsl" -o "$work/$n" || { fail "moe_forward does not compile for $d"; continue; }
  # shellcheck disable=SC2046
  run $n $d $n --steps 1 $(outs $n y) || continue
  [ $d = 1 ] && continue
  same fwd1 $n "moe_forward on $d" 1e-6 && pass "moe_forward on $d ranks: one device's y"
done

# ---- moe (SPEC section 1), its mesh of 4 cut to 1, 3 and 6 ------------------------------
for d in 1 3 6; do
  n=moe$d
  { sed "s/^mesh \[d = 4\]/mesh [d = $d]/" "$top_srcdir/examples/moe.gsl"; echo "output wg, wi, wo"; } >"$work/$n.gsl"
  grep -q "^mesh \[d = $d\]" "$work/$n.gsl" || { fail "examples/moe.gsl has no 'mesh [d = 4]' line"; break; }
  "$GSLC" -D G=8 "$work/$n.gsl" -o "$work/$n" || { fail "moe does not compile for $d"; continue; }
  # shellcheck disable=SC2046
  run $n $d $n --steps 2 --metrics $n.jsonl $(outs $n y wg wi wo) || continue
  [ $d = 1 ] && continue
  same moe1 $n "moe on $d" 1e-4 && pass "moe on $d ranks: one device's y, params and losses"
done

# ---- lm and lm_dense ------------------------------------------------------------------
# byte windows [2, 8, 9] from x <- (1103515245 x + 12345) mod 2^31, bytes x >> 16 & 255 (as tests/lm.sh)
awk 'BEGIN { x = 7; for (i = 0; i < 144; i++) { x = (1103515245 * x + 12345) % 2147483648; printf "%d ", int(x / 65536) % 256 } }' |
  "$NPYTOOL" write "$work/train.npy" i32 2,8,9 - || { fail "cannot write train.npy"; exit 1; }
sizes="-D B=8 -D T=8 -D M=16 -D NH=2 -D H=32 -O1"
for model in lm lm_dense; do
  params="emb pos ln_g ln_b wq wk wv wo w1 w2 wout"
  experts=
  [ $model = lm ] && params="$params wg wi we" experts="-D E=4"
  { cat "$top_srcdir/examples/$model.gsl"; echo "output $(echo $params | tr ' ' ',')"; } >"$work/$model.gsl"
  for m in 1,1 3,1 1,3 3,2; do
    dd=${m%,*} ee=${m#*,} n=$model$dd$ee
    # shellcheck disable=SC2086
    "$GSLC" $sizes $experts -D DATA=$dd -D EXPERT=$ee "$work/$model.gsl" -o "$work/$n" ||
      { fail "$model does not compile for $dd x $ee"; continue; }
    # shellcheck disable=SC2046,SC2086
    run $n $((dd * ee)) $n --steps 2 --metrics $n.jsonl --input tokens=train.npy --eval-every 2 \
      --eval-input tokens=train.npy $(outs $n $params) || continue
    [ $dd$ee = 11 ] && continue
    same ${model}11 $n "$model on $dd x $ee" 1e-4 &&
      pass "$model on $dd x $ee ($((dd * ee)) ranks): one device's params, losses and held-out loss"
  done
done
exit $status
