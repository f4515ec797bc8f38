#!/bin/sh
# tests/examples.sh — every example compiles and runs, for a couple of steps,
# under mpirun and started directly as one process; and on every mesh it is
# written for, its outputs agree with the one-device run to 1e-5 relative
# (its inputs default to random draws keyed by global element index, so
# every mesh sees the same batch). examples/moe.gsl, SPEC section 1 as
# written, trains on its mesh of 4 devices and its loss falls. Examples
# that train are compared after two steps, so one update is in y.
set -u
. "$top_srcdir/tests/lib.sh"

# the meshes each example is run on: -D settings, one mesh per word
meshes_of() {
  case $1 in
  mlp) echo "DP=2,MP=1 DP=1,MP=2 DP=2,MP=2" ;;
  moe_forward) echo "D=2 D=4" ;;
  *) echo "" ;;
  esac
}

for ex in "$top_srcdir"/examples/*.gsl; do
  name=$(basename "$ex" .gsl)
  case $name in lm | lm_dense | lm_shared) continue ;; esac # they read text: tests/lm.sh
  if [ "$name" = moe ]; then
    # SPEC section 1 as written: mesh [d = 4], trained with adam; three
    # steps on 4 ranks, the loss falling (the same numbers on every mesh:
    # tests/train_invariance.sh)
    "$GSLC" "$ex" -o "$work/$name" || { fail "moe does not compile"; continue; }
    timeout 300 $MPIEXEC -n 4 "$work/$name" --steps 3 --log-every 1 --metrics "$work/moe.jsonl" \
      --output y="$work/moe.y.npy" || { fail "moe under mpirun -n 4"; continue; }
    [ -s "$work/moe.y.npy" ] || { fail "moe wrote no output y"; continue; }
    first=$(sed -n '1s/.*"loss": *\([^,}]*\).*/\1/p' "$work/moe.jsonl")
    last=$(sed -n '3s/.*"loss": *\([^,}]*\).*/\1/p' "$work/moe.jsonl")
    if ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b > 0 && b < a) }'; then
      cat "$work/moe.jsonl"; fail "moe's loss did not fall over 3 steps ($first, $last)"; continue
    fi
    pass "moe (loss $first at step 1, $last at step 3, on 4 ranks)"
    continue
  fi
  if ! "$GSLC" "$ex" -o "$work/$name"; then
    fail "$name does not compile"; continue
  fi
  if ! timeout 300 $MPIEXEC -n 1 "$work/$name" --steps 2 --output y="$work/$name.y.npy"; then
    fail "$name under mpirun"; continue
  fi
  [ -s "$work/$name.y.npy" ] || { fail "$name wrote no output y"; continue; }
  if ! timeout 300 "$work/$name" --steps 1 --quiet; then
    fail "$name started directly"; continue
  fi
  head=$("$NPYTOOL" print "$work/$name.y.npy" | sed 1q)
  # a program that trains: y of step 2 follows one adam step, whose first
  # update is lr * sign(g), so a gradient within float rounding of zero may
  # move its weight either way on another mesh: 1e-4, the training
  # invariance tolerance (tests/train_invariance.sh); 1e-5 otherwise
  tol=1e-5
  grep -q '^train ' "$ex" && tol=1e-4
  for m in $(meshes_of "$name"); do
    defs=; ranks=1
    for kv in $(echo "$m" | tr ',' ' '); do defs="$defs -D $kv"; ranks=$((ranks * ${kv#*=})); done
    # shellcheck disable=SC2086
    "$GSLC" $defs "$ex" -o "$work/$name.m" || { fail "$name does not compile for $m"; continue; }
    timeout 300 $MPIEXEC -n $ranks "$work/$name.m" --steps 2 --quiet --output y="$work/$name.m.npy" ||
      { fail "$name on mesh $m"; continue; }
    "$NPYTOOL" print "$work/$name.y.npy" | sed 1d |
      "$NPYTOOL" compare "$work/$name.m.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol $tol --atol $tol - ||
      { fail "$name on mesh $m ($ranks ranks) differs from one device"; continue; }
    echo "$name on mesh $m ($ranks ranks): the same y"
  done
  pass "$name"
done
exit $status
