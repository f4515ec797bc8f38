#!/bin/sh
# tests/examples.sh — every example compiles and runs, for a couple of steps,
# under mpirun and started directly as one process.
set -u
status=0
work=$(mktemp -d "${TMPDIR:-/tmp}/gslex.XXXXXX")
trap 'rm -rf "$work"' EXIT
for ex in "$top_srcdir"/examples/*.gsl; do
  name=$(basename "$ex" .gsl)
  if ! "$GSLC" "$ex" -o "$work/$name"; then
    echo "FAIL: $name does not compile"; status=1; continue
  fi
  if ! $MPIEXEC -n 1 "$work/$name" --steps 2 --output y="$work/$name.y.npy"; then
    echo "FAIL: $name under mpirun"; status=1; continue
  fi
  [ -s "$work/$name.y.npy" ] || { echo "FAIL: $name wrote no output y"; status=1; }
  if ! "$work/$name" --steps 1 --quiet; then
    echo "FAIL: $name started directly"; status=1; continue
  fi
  echo "PASS: $name"
done
exit $status
