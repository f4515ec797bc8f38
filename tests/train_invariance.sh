#!/bin/sh
# tests/train_invariance.sh — training gives the same numbers on every mesh.
#
# examples/moe.gsl (SPEC section 1) at a small size (-D), with its mesh
# made a parameter (mesh [d = D]) and its weights and aux made outputs, is
# trained for 20 steps with adam on 1, 2 and 4 devices, and once more on a
# 2 x 2 mesh [data = 2, expert = 2] (tokens over both axes, experts over
# expert). Every run must give, to 1e-4 relative, the same loss at every
# step (from --metrics) and the same final wg, wi, wo (every expert's) and
# aux; aux's scale must not depend on the device count. Random inputs are
# drawn by global element index, so every mesh sees the same batches; only
# the order of float sums differs. Parameters are compared with an absolute
# floor of 1e-6 (5e-5 of their scale, normal(0.02)): an element that training
# brought to within 1e-6 of zero has no meaningful relative error.
set -u
. "$top_srcdir/tests/lib.sh"
sizes="-D G=4 -D S=16 -D M=8 -D H=16 -D E=4"

sed 's/^mesh \[d = 4\]/const D = 4\nmesh [d = D]/' "$top_srcdir/examples/moe.gsl" >"$work/moe_d.gsl"
grep -q '^mesh \[d = D\]' "$work/moe_d.gsl" || fatal "examples/moe.gsl has no 'mesh [d = 4]' line"
echo 'output aux, wg, wi, wo' >>"$work/moe_d.gsl"
# the 2 x 2 mesh: the same program with its mesh and annotations changed
sed -e 's/^mesh \[d = D\]/mesh [data = 2, expert = 2]/' \
    -e 's/split(0) *= normal(0.02)/split(0, expert) = normal(0.02)/' \
    -e 's/split(0) = normal(1.0)/shard([(data, expert), _, _]) = normal(1.0)/' \
    "$work/moe_d.gsl" >"$work/moe_2x2.gsl"
[ "$(grep -c 'expert)' "$work/moe_2x2.gsl")" -eq 3 ] || fatal "the 2 x 2 variant was not made"

run() { # name, ranks, program, gslc options
  # shellcheck disable=SC2086
  "$GSLC" $sizes $4 "$3" -o "$work/$1" || { echo "FAIL: $1 does not compile"; return 1; }
  (cd "$work" && timeout 300 $MPIEXEC -n "$2" "./$1" --steps 20 --quiet --log-every 1 --metrics "$1.jsonl" \
    --output wg="$1.wg.npy" --output wi="$1.wi.npy" --output wo="$1.wo.npy" --output aux="$1.aux.npy") ||
    { echo "FAIL: $1 on $2 ranks"; return 1; }
  [ "$(wc -l <"$work/$1.jsonl")" -eq 20 ] || { echo "FAIL: $1 logged $(wc -l <"$work/$1.jsonl") steps, not 20"; return 1; }
}

run d1 1 "$work/moe_d.gsl" "-D D=1" || exit 1
sed 's/.*"loss": *\([^,}]*\).*/\1/' "$work/d1.jsonl" >"$work/d1.loss"
first=$(sed -n 1p "$work/d1.loss"); last=$(sed -n 20p "$work/d1.loss") # fresh random batches: not a falling curve at this size
for r in "d2 2 $work/moe_d.gsl -D_D=2" "d4 4 $work/moe_d.gsl -D_D=4" "m2x2 4 $work/moe_2x2.gsl"; do
  set -- $r
  run "$1" "$2" "$3" "$(echo "${4:-}" | tr _ ' ')" || { status=1; continue; }
  sed 's/.*"loss": *\([^,}]*\).*/\1/' "$work/$1.jsonl" >"$work/$1.loss"
  if ! paste "$work/d1.loss" "$work/$1.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) { print "step " NR ": " $1 " on 1 device, " $2; bad = 1 } } END { exit bad }'; then
    fail "the loss on $1 differs from one device's"
  fi
  for t in wg wi wo aux; do
    head=$("$NPYTOOL" print "$work/d1.$t.npy" | sed 1q)
    atol=1e-6; [ $t = aux ] && atol=0
    "$NPYTOOL" print "$work/d1.$t.npy" | sed 1d |
      "$NPYTOOL" compare "$work/$1.$t.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-4 --atol $atol - ||
      fail "$t after 20 steps on $1 differs from one device's"
  done
  [ $status -eq 0 ] && echo "$1 ($2 ranks): the same loss at all 20 steps, the same wg, wi, wo and aux"
done
[ $status -eq 0 ] && pass "train_invariance (loss $first at step 1, $last at step 20, on 1, 2, 4 and 2 x 2 devices)"
exit $status
