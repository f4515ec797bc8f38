#!/bin/sh
# tests/examples.sh — every example compiles and runs, for a couple of steps,
# under mpirun and started directly as one process; and on every mesh it is
# written for, its outputs agree with the one-device run to 1e-5 relative
# (its inputs default to random draws keyed by global element index, so
# every mesh sees the same batch). examples/moe.gsl, SPEC section 1 as
# written, must be refused for its train line alone until training lands.
set -u
status=0
work=$(mktemp -d "${TMPDIR:-/tmp}/gslex.XXXXXX")
trap 'rm -rf "$work"' EXIT

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
  if [ "$name" = moe ]; then
    # SPEC section 1 as written: everything but its train line compiles;
    # that line is refused, located, until training lands (moe_forward.gsl
    # is the same layer without it)
    "$GSLC" "$ex" -o "$work/$name" 2>"$work/moe.err"
    rc=$?
    if [ $rc -ne 1 ] || [ "$(grep -c 'error:' "$work/moe.err")" -ne 1 ] ||
       ! grep -q "moe.gsl:30:1: error: train is not supported yet" "$work/moe.err"; then
      cat "$work/moe.err"; echo "FAIL: moe: expected only its train line refused (exit $rc)"; status=1
    else
      echo "PASS: moe (only its train line refused, until training lands)"
    fi
    continue
  fi
  if ! "$GSLC" "$ex" -o "$work/$name"; then
    echo "FAIL: $name does not compile"; status=1; continue
  fi
  if ! timeout 300 $MPIEXEC -n 1 "$work/$name" --steps 2 --output y="$work/$name.y.npy"; then
    echo "FAIL: $name under mpirun"; status=1; continue
  fi
  [ -s "$work/$name.y.npy" ] || { echo "FAIL: $name wrote no output y"; status=1; continue; }
  if ! timeout 300 "$work/$name" --steps 1 --quiet; then
    echo "FAIL: $name started directly"; status=1; continue
  fi
  head=$("$NPYTOOL" print "$work/$name.y.npy" | sed 1q)
  for m in $(meshes_of "$name"); do
    defs=; ranks=1
    for kv in $(echo "$m" | tr ',' ' '); do defs="$defs -D $kv"; ranks=$((ranks * ${kv#*=})); done
    # shellcheck disable=SC2086
    "$GSLC" $defs "$ex" -o "$work/$name.m" || { echo "FAIL: $name does not compile for $m"; status=1; continue; }
    timeout 300 $MPIEXEC -n $ranks "$work/$name.m" --steps 2 --quiet --output y="$work/$name.m.npy" ||
      { echo "FAIL: $name on mesh $m"; status=1; continue; }
    "$NPYTOOL" print "$work/$name.y.npy" | sed 1d |
      "$NPYTOOL" compare "$work/$name.m.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-5 --atol 1e-5 - ||
      { echo "FAIL: $name on mesh $m ($ranks ranks) differs from one device"; status=1; continue; }
    echo "$name on mesh $m ($ranks ranks): the same y"
  done
  echo "PASS: $name"
done
exit $status
