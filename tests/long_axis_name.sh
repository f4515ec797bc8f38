#!/bin/sh
# tests/long_axis_name.sh — mesh axis names of 600 characters: --emit-spmd
# and --explain succeed and print every name whole (text built in fixed
# buffers once overflowed or cut them), and sema's divisibility error
# names the axis whole.
set -u
. "$top_srcdir/tests/lib.sh"

A=$(awk 'BEGIN { while (n++ < 600) printf "a" }')
B=$(awk 'BEGIN { while (n++ < 600) printf "b" }')
[ ${#A} -eq 600 ] || fatal "cannot make a long name"

# a collective-permute and an all-gather over both axes, an all-to-all
# over the first, and a contraction whose cut dimension leaves a partial sum
cat >"$work/long.gsl" <<GSL
mesh [$A = 2, $B = 2]
input x: f32[8, 4] shard([($A, $B), _])
let y = shard(x * 2, [($B, $A), _])
let r = replicate(y)
output r
let z = shard(y, [_, $A])
input u: f32[8, 4] shard([$A, _])
let v = shard(u, [_, $A])
input w: f32[4, 6] shard([$B, _])
let h = shard(z @ w, [_, _])
output y
output v
output h
GSL
(cd "$work" && "$GSLC" --emit-spmd long.gsl) >"$work/spmd" 2>&1 || { cat "$work/spmd"; fatal "--emit-spmd failed"; }
grep -qF "{[($B, $A), _]}" "$work/spmd" || fatal "--emit-spmd lacks the sharding [($B, $A), _] whole"
(cd "$work" && "$GSLC" --explain long.gsl) >"$work/explain" 2>&1 || { cat "$work/explain"; fatal "--explain failed"; }
grep -qF "collective_permute over ($A, $B) dim 0:" "$work/explain" ||
  fatal "--explain lacks the collective-permute over both axes, named whole"
grep -qF "all_gather      over ($B, $A) dim 0:" "$work/explain" ||
  fatal "--explain lacks the all-gather over both axes, named whole"
grep -qF "all_to_all      over ($A) dim 0 -> 1:" "$work/explain" ||
  fatal "--explain lacks the all-to-all over the first axis, named whole"
grep -qF "all_reduce      over ($A):" "$work/explain" ||
  fatal "--explain lacks the all-reduce over the first axis, named whole"
grep -qF "is [_, _] partial($A), needs [_, _]" "$work/explain" ||
  fatal "--explain lacks the partial sum's reason, named whole"
grep -qF "# long.gsl on mesh [$A = 2, $B = 2]: 4 devices" "$work/explain" || fatal "--explain lacks the mesh, named whole"

# a dimension with fewer elements than its shards: the located error names the axes whole
cat >"$work/bad.gsl" <<GSL
mesh [$A = 4]
input x: f32[3, 4] shard([$A, _])
output x
GSL
(cd "$work" && "$GSLC" bad.gsl -o prog) >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 1 ] || { cat "$work/err"; fatal "gslc exited $rc on a dimension with fewer elements than shards, expected 1"; }
grep -qF "bad.gsl:2:" "$work/err" || { cat "$work/err"; fatal "the error is not located"; }
grep -qF "(mesh axes $A = 4)" "$work/err" || { cat "$work/err"; fatal "the error does not name the axis whole"; }
pass "long_axis_name"
