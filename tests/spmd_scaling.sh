#!/bin/sh
# tests/spmd_scaling.sh — the per-device program does not grow with the
# mesh: examples/mlp.gsl (its training step) partitioned for 2 x 2 and for
# 32 x 64 = 2048 devices (data and model parallel) has the same number of
# values and the same collectives. (On a mesh with an axis of size 1, the
# steps over that axis are renamings, not collectives.)
set -u
. "$top_srcdir/tests/lib.sh"
ex="$top_srcdir/examples/mlp.gsl"
sizes="-D B=4096 -D D=4096 -D H=4096 -D O=4096"
"$GSLC" --emit-spmd $sizes -D DP=2 -D MP=1 "$ex" >"$work/2" || fatal "2 devices"
"$GSLC" --emit-spmd $sizes -D DP=32 -D MP=64 "$ex" >"$work/2048" || fatal "2048 devices"
"$GSLC" --emit-spmd $sizes -D DP=2 -D MP=2 "$ex" >"$work/2m" || fatal "2 x 2 devices"
n2=$(grep -c '^%' "$work/2m"); n2048=$(grep -c '^%' "$work/2048")
c2=$(grep -o '= [a-z_]*' "$work/2m" | sort | uniq -c | tr -s ' ')
c2048=$(grep -o '= [a-z_]*' "$work/2048" | sort | uniq -c | tr -s ' ')
echo "values: $n2 on 2 x 2 devices, $n2048 on 2048 devices"
if [ "$n2" -ne "$n2048" ] || [ "$c2" != "$c2048" ]; then
  fail "the SPMD program changes with the mesh size"
  echo "2 x 2 devices:"; echo "$c2"; echo "2048 devices:"; echo "$c2048"
  exit 1
fi
# and the local shapes do divide: [4096, 4096] over model = 64 is [4096, 64]
grep -q 'w1: f32\[4096, 64\]' "$work/2048" || { fail "w1's tile on 2048 devices"; grep w1 "$work/2048"; exit 1; }
pass "spmd_scaling"
