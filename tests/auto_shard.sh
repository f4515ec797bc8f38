#!/bin/sh
# tests/auto_shard.sh — gslc --auto-shard (compiler/autoshard.c): plans
# whose best is known by hand, the user's annotations kept, the same
# outputs as one device, determinism, and --machine's errors.
#
# The plans, with the rates of ref.machine below (100 GFLOP/s f32
# products, 5 GB/s of memory, 0.1 GB/s of random draws, 4 GB/s links,
# 20 us a collective):
#   - a batch-heavy MLP (x f32[8192, 256], w1 [256, 256], w2 [256, 256]):
#     each product is 2 * 8192 * 256 * 256 = 1.07 GFLOP, 10.7 ms whole;
#     data parallel halves it (quarters it on 2 x 2) for an all-reduce of
#     the 256 KiB gradients (about 0.1 ms); cutting the weights instead
#     (Megatron) leaves a partial sum of an activation, 8 MiB, to
#     all-reduce (about 2 ms). So x is split on its batch over every axis
#     and the weights are whole.
#   - an MoE layer with big experts (E = 8 of 256 x 2048, 16 MiB a
#     weight) and many tokens (8 groups of 512, capacity 2: the dispatched
#     tokens [8, 8, 256, 256] are 16 MiB). On 2 devices, data parallel
#     would all-reduce 32 MiB of expert gradients (8 ms at 4 GB/s); the
#     experts split over e cost four all-to-alls (in and out, forward and
#     backward), each receiving 4 MiB (1 ms); replicated experts would
#     repeat their 17 GFLOP products on every device. Dispatching every
#     group on every device and keeping the local experts' slots writes 16
#     MiB (3.4 ms at 5 GB/s) and then needs the experts' results gathered
#     (8 MiB, 2 ms), where dispatching the local groups writes 8 MiB (1.7
#     ms) and the two all-to-alls take 2 ms. So the experts are split on
#     their expert dim and the dispatch on its groups.
set -u
. "$top_srcdir/tests/lib.sh"
# the rates the plans below are worked out with (not the defaults, which
# ONLY=machine make bench may remeasure): gslc --machine FILE
cat >"$work/ref.machine" <<'EOF2'
gemm_f32_gflops = 100
gemm_bf16_gflops = 200
memory_gbs = 5
rng_gbs = 0.1
link_gbs = 4
latency_us = 20
EOF2
REF="--machine $work/ref.machine"

# An input with a random initializer is drawn anew each step (without
# --input), at the rate of draws; one without, read at the memory rate.
# Each of x and z holds 512 x 1024 floats a device (2 MiB): x drawn at
# 0.001 GB/s takes 2097.152 ms, z read and y written at 5 GB/s 0.419 ms
# each: 2097.991 ms computing.
cat >"$work/draw.gsl" <<'EOF2'
mesh [d = 2]
input x: f32[1024, 1024] shard([d, _]) = normal(1.0)
input z: f32[1024, 1024] shard([d, _])
let y = x + z
output y
EOF2
printf 'memory_gbs = 5\nrng_gbs = 0.001\n' >"$work/draw.machine"
if "$GSLC" --explain --machine "$work/draw.machine" "$work/draw.gsl" >"$work/draw.explain" 2>&1 &&
   grep -q '^estimated step per device: 2097.991 ms, 2097.991 computing and 0.000 communicating' "$work/draw.explain"; then
  pass "a drawn input is priced at rng_gbs, a read one at memory_gbs: 2097.991 ms"
else
  fail "the drawn input's price:"; tail -1 "$work/draw.explain"
fi

# sharding NAME FILE: the {...} of NAME's declaration line in --emit-ir
sharding() { sed -n "s/^%[0-9]* $1: [a-z0-9]*\[[0-9, ]*\] \(.*\) = \(param\|input\) .*/\1/p" "$2"; }

cat >"$work/mlp.gsl" <<'EOF2'
const A = 2
const B = 1
mesh [data = A, model = B]
param w1: f32[256, 256] = normal(0.05)
param w2: f32[256, 256] = normal(0.05)
input x: f32[8192, 256] = normal(1.0)
let y = relu(x @ w1) @ w2
train mean(y * y) with sgd(lr = 0.01)
EOF2
check_mlp() { # mesh-args, expected x, what
  "$GSLC" --auto-shard $REF $1 --emit-ir "$work/mlp.gsl" -o "$work/mlp.ir" 2>"$work/err" || { fail "$3: compile"; cat "$work/err"; return; }
  x=$(sharding x "$work/mlp.ir"); w1=$(sharding w1 "$work/mlp.ir"); w2=$(sharding w2 "$work/mlp.ir")
  if [ "$x" = "$2" ] && [ "$w1" = "{[_, _]}" ] && [ "$w2" = "{[_, _]}" ]; then
    pass "$3: x $x, the weights whole (data parallel)"
  else
    fail "$3: x $x (expected $2), w1 $w1, w2 $w2"
  fi
}
check_mlp "-D A=2 -D B=1" "{[data, _]}" "batch-heavy MLP on [data = 2]"
check_mlp "-D A=2 -D B=2" "{[(data, model), _]}" "batch-heavy MLP on [data = 2, model = 2]"

cat >"$work/moe.gsl" <<'EOF2'
const D = 2
mesh [e = D]
param wg: f32[256, 8] = normal(0.02)
param wi: f32[8, 256, 2048] = normal(0.02)
param wo: f32[8, 2048, 256] = normal(0.02)
input x: f32[8, 512, 256] = normal(1.0)
let y, aux = moe(x, gate = wg, top = 2, capacity = 2.0) (t, e) {
  return relu(t @ wi[e]) @ wo[e]
}
train mean(y * y) + 0.01 * aux with sgd(lr = 0.01)
EOF2
for d in 2 4; do
  "$GSLC" --auto-shard $REF -D D=$d --emit-ir "$work/moe.gsl" -o "$work/moe.ir" 2>"$work/err" || { fail "moe D=$d: compile"; cat "$work/err"; continue; }
  wi=$(sharding wi "$work/moe.ir"); wo=$(sharding wo "$work/moe.ir")
  disp=$(sed -n 's/^%[0-9]*: f32\[8, 8, 256, 256\] \({.*}\) = dispatch .*/\1/p' "$work/moe.ir" | sed 1q)
  if [ "$disp" = "{[_, e, _, _]}" ] && [ "$wi" = "{[e, _, _]}" ] && [ "$wo" = "{[e, _, _]}" ]; then
    pass "MoE layer on [e = $d]: experts split on e, the dispatch's groups on e"
  else
    fail "MoE layer on [e = $d]: dispatch $disp, wi $wi, wo $wo"
  fi
done

# the user's annotations are constraints: w1 cut on its columns stays so
sed 's/^param w1: f32\[256, 256\]/param w1: f32[256, 256] split(1, model)/' "$work/mlp.gsl" >"$work/pinned.gsl"
if "$GSLC" --auto-shard $REF -D A=2 -D B=2 --emit-ir "$work/pinned.gsl" -o "$work/pinned.ir" 2>"$work/err" &&
   [ "$(sharding w1 "$work/pinned.ir")" = "{[_, model]}" ]; then
  pass "an annotation is kept"
else
  fail "annotation: w1 $(sharding w1 "$work/pinned.ir" 2>/dev/null)"; cat "$work/err"
fi

# deterministic: the same program gives the same plan
"$GSLC" --auto-shard $REF -D A=2 -D B=2 --emit-ir "$work/mlp.gsl" -o "$work/a.ir" &&
"$GSLC" --auto-shard $REF -D A=2 -D B=2 --emit-ir "$work/mlp.gsl" -o "$work/b.ir" && cmp -s "$work/a.ir" "$work/b.ir" &&
  pass "the same plan twice" || fail "two compiles gave two plans"

# --explain: the search's section and each tensor's reason
if "$GSLC" --auto-shard $REF -D A=2 -D B=2 --explain "$work/mlp.gsl" >"$work/explain" 2>"$work/err" &&
   grep -q '^## --auto-shard: the cost search' "$work/explain" &&
   grep -q '^[0-9]* values in [0-9]* classes, .* solved to optimality in [0-9.]* s; estimated step [0-9.]* ms a device (the summary has the program built.s)$' "$work/explain" &&
   grep -q '^x  *f32\[8192, 256\] *\[(data, model), _\]: [0-9.e+-]* ms; the best alternative ' "$work/explain" &&
   grep -q 'chosen by --auto-shard' "$work/explain" &&
   # the totals against the baselines: here the choice is data parallel, and replication communicates nothing
   chosen=$(sed -n 's/^the plan chosen  *[0-9.]*  *[0-9.]*  *\([0-9.]*\)  *[0-9]*$/\1/p' "$work/explain") &&
   dp=$(sed -n 's/^pure data parallel  *[0-9.]*  *[0-9.]*  *\([0-9.]*\)  *[0-9]*$/\1/p' "$work/explain") &&
   [ -n "$chosen" ] && [ "$chosen" = "$dp" ] && grep -q '^replicated  *[0-9.]*  *0\.000  *[0-9.]*  *[0-9]*$' "$work/explain"; then
  pass "--explain says what the search chose and why, against data parallel ($dp ms) and replication"
else
  fail "--explain with --auto-shard:"; cat "$work/explain" "$work/err"
fi

# --emit-annotations: the declarations with the choices written in; pinned
# in the source, they compile to the same layouts of x and the weights
if "$GSLC" --auto-shard $REF -D A=2 -D B=2 --emit-annotations "$work/mlp.gsl" >"$work/ann" 2>"$work/err" &&
   grep -qx "param w1: f32\[256, 256\] replicate() = normal(0.05)   # $work/mlp.gsl:4" "$work/ann" &&
   grep -qx "input x: f32\[8192, 256\] shard(\[(data, model), _\]) = normal(1.0)   # $work/mlp.gsl:6" "$work/ann" &&
   { sed -n '1,3p' "$work/mlp.gsl"; grep -v '^#' "$work/ann" | sed 's/   #.*//'; sed -n '7,$p' "$work/mlp.gsl"; } >"$work/pin2.gsl" &&
   "$GSLC" -D A=2 -D B=2 --emit-ir "$work/pin2.gsl" -o "$work/pin2.ir" &&
   [ "$(sharding x "$work/pin2.ir")" = "{[(data, model), _]}" ] && [ "$(sharding w1 "$work/pin2.ir")" = "{[_, _]}" ]; then
  pass "--emit-annotations writes the choices into the declarations, and pinned they hold"
else
  fail "--emit-annotations:"; cat "$work/ann" "$work/err"
fi

# the same outputs as one device: the examples without annotations, y
# after 2 steps (the second after one adam update, whose first step is
# lr * sign(g): a gradient within rounding of zero may move its weight
# either way on another mesh, so 1e-4, as tests/examples.sh has it)
cmp_runs() { # name, compile flags for N devices, N, steps, output
  src=$top_srcdir/tests/auto/$1.gsl
  "$GSLC" $2 --auto-shard "$src" -o "$work/$1.n" 2>"$work/err" || { fail "$1: compile on $3 devices"; cat "$work/err"; return; }
  "$GSLC" $6 "$src" -o "$work/$1.1" 2>"$work/err" || { fail "$1: compile on 1 device"; cat "$work/err"; return; }
  (cd "$work" && timeout 300 $MPIEXEC -n "$3" "./$1.n" --steps "$4" --quiet --output "$5=n.npy" &&
    timeout 300 $MPIEXEC -n 1 "./$1.1" --steps "$4" --quiet --output "$5=1.npy") || { fail "$1: run"; return; }
  head=$("$NPYTOOL" print "$work/1.npy" | sed 1q)
  if "$NPYTOOL" print "$work/1.npy" | sed 1d |
     "$NPYTOOL" compare "$work/n.npy" ${head%% *} "$(echo "${head#* }" | tr -d '[] ')" --rtol 1e-4 --atol 1e-4 - \
       >"$work/cmp" 2>&1; then
    pass "$1 auto-sharded on $3 devices: $5 after $4 steps as on one device"
  else
    fail "$1 on $3 devices against one: $(cat "$work/cmp")"
  fi
}
cmp_runs mlp "-D DP=2 -D MP=1" 2 2 y "-D DP=1 -D MP=1"
cmp_runs mlp "-D DP=2 -D MP=2" 4 2 y "-D DP=1 -D MP=1"
# on 3 devices no dim of the MLP divides (gsl.7, Uneven dimensions): the
# search cuts unevenly, w1's 1024 columns in tiles of 342, and the
# program still gives one device's numbers
"$GSLC" -D DP=3 -D MP=1 --auto-shard --emit-ir "$top_srcdir/tests/auto/mlp.gsl" -o "$work/mlp3.ir" 2>"$work/err" &&
  [ "$(sharding w1 "$work/mlp3.ir")" != "{[_, _]}" ] && [ -n "$(sharding w1 "$work/mlp3.ir")" ] &&
  pass "on 3 devices the search cuts w1 unevenly: $(sharding w1 "$work/mlp3.ir")" ||
  { fail "on 3 devices w1 is $(sharding w1 "$work/mlp3.ir")"; cat "$work/err"; }
cmp_runs mlp "-D DP=3 -D MP=1" 3 2 y "-D DP=1 -D MP=1"
cmp_runs moe "-D D=2" 2 2 y "-D D=1"
cmp_runs moe "-D D=4" 4 2 y "-D D=1"

# --machine: its errors, and a file that prices links dear makes the MLP stay whole
printf 'link_gbs = 4\nlink_gbs = 5\n' >"$work/twice.machine"
printf 'gemm_f32_gflops = fast\n' >"$work/bad.machine"
printf 'warp_factor = 9\n' >"$work/unknown.machine"
for m in twice:"twice.machine:2: link_gbs is set twice" bad:"bad.machine:1: gemm_f32_gflops takes a positive number (GFLOP/s), got 'fast'" \
         unknown:"unknown.machine:1: unknown key 'warp_factor'" missing:"missing.machine: No such file or directory"; do
  f=${m%%:*}; want=${m#*:}
  if "$GSLC" --auto-shard --machine "$work/$f.machine" --emit-ir "$work/mlp.gsl" -o /dev/null 2>"$work/err"; then
    fail "--machine $f.machine accepted"
  elif grep -qF "$want" "$work/err"; then
    pass "--machine $f.machine refused: $want"
  else
    fail "--machine $f.machine: expected '$want', got:"; cat "$work/err"
  fi
done
if "$GSLC" --machine "$work/bad.machine" "$work/mlp.gsl" -o /dev/null 2>"$work/err"; then
  fail "--machine without --auto-shard, --mem-budget or --explain accepted"
else
  grep -q 'it needs one of them' "$work/err" && pass "--machine needs --auto-shard, --mem-budget or --explain" || { fail "--machine alone:"; cat "$work/err"; }
fi
cp "$top_srcdir/tests/auto/slow.machine" "$work/slow.machine"   # links a thousand times slower
# --explain's estimate of the step: the pinned (Megatron) MLP's one
# all-reduce of a partial [8192, 256] activation a step at least, 8 MiB
# received, costs 2 ms at 4 GB/s and 2 s at 4 MB/s
comm() { sed -n 's/^estimated step per device: [0-9.]* ms, [0-9.]* computing and \([0-9.]*\) communicating .*/\1/p' "$1"; }
if "$GSLC" $REF -D A=2 -D B=2 --explain "$work/pinned.gsl" >"$work/e1" && "$GSLC" -D A=2 -D B=2 --explain --machine "$work/slow.machine" \
     "$work/pinned.gsl" >"$work/e2" && [ -n "$(comm "$work/e1")" ] &&
   awk -v a="$(comm "$work/e1")" -v b="$(comm "$work/e2")" 'BEGIN { exit !(a >= 2 && b >= 2000 && b > 900 * a) }'; then
  pass "--explain estimates the step: communication $(comm "$work/e1") ms, $(comm "$work/e2") ms with links 1000 times slower"
else
  fail "--explain's estimate: $(comm "$work/e1") and $(comm "$work/e2") ms"; tail -3 "$work/e1"
fi
"$GSLC" --auto-shard --machine "$work/slow.machine" --emit-ir "$work/mlp.gsl" -o "$work/slow.ir" 2>"$work/err" &&
  [ "$(sharding x "$work/slow.ir")" = "{[_, _]}" ] && pass "with links 1000 times slower, x stays whole (no communication)" ||
  { fail "slow links: x $(sharding x "$work/slow.ir" 2>/dev/null)"; cat "$work/err"; }
# --mem-budget on tests/auto/budget.gsl (its header works the bytes out):
# with links 1000 times slower the search keeps w whole, over 48 MiB a
# device; under a 40 MiB budget it must cut w, and the plan fits.
cp "$top_srcdir/tests/auto/budget.gsl" "$work/wh.gsl"
total() { sed -n 's/^total  *\([0-9]*\) .*/\1/p' "$1"; }
if "$GSLC" --auto-shard --machine "$work/slow.machine" --stats "$work/wh.gsl" >"$work/s0" &&
   "$GSLC" --auto-shard --machine "$work/slow.machine" --emit-ir "$work/wh.gsl" -o "$work/w0.ir" &&
   [ "$(sharding w "$work/w0.ir")" = "{[_, _]}" ] && [ "$(total "$work/s0")" -gt $((3 * 16777216)) ] &&
   "$GSLC" --auto-shard --machine "$work/slow.machine" --mem-budget 40M --stats "$work/wh.gsl" >"$work/s1" &&
   "$GSLC" --auto-shard --machine "$work/slow.machine" --mem-budget 40M --emit-ir "$work/wh.gsl" -o "$work/w1.ir" &&
   [ "$(sharding w "$work/w1.ir")" != "{[_, _]}" ] && [ "$(total "$work/s1")" -le $((40 * 1048576)) ] &&
   [ "$(total "$work/s1")" -ge $((3 * 8388608)) ]; then
  pass "--mem-budget 40M: w cut over d ($(sharding w "$work/w1.ir")), $(total "$work/s1") bytes a device, whole it was $(total "$work/s0")"
else
  fail "--mem-budget 40M: w $(sharding w "$work/w0.ir") -> $(sharding w "$work/w1.ir"), totals $(total "$work/s0") -> $(total "$work/s1")"
fi
if "$GSLC" --auto-shard --mem-budget 20M --stats "$work/wh.gsl" >/dev/null 2>"$work/err"; then
  fail "--mem-budget 20M accepted"
elif grep -q "^gslc: error: --mem-budget 20971520: on this mesh a device holds at least 25231364 bytes of params" "$work/err"; then
  pass "--mem-budget 20M refused, naming the least footprint, 25231364 bytes"
else
  fail "--mem-budget 20M:"; cat "$work/err"
fi
# the refusal names the largest parts: adam's m and v of w, 2 x 4 x 2048^2 =
# 33554432 bytes and its step count's 4; w itself 16777216
"$GSLC" --mem-budget 10M --stats "$work/wh.gsl" >/dev/null 2>"$work/err" && fail "--mem-budget without --auto-shard: no error" ||
  { grep -q "the plan found needs [0-9]* bytes a device, more than the budget (without --auto-shard, the annotations decide); the largest parts: optimizer states 33554436 (the largest adam.m.w, 16777216), intermediates [0-9]*, params (w) 16777216 " "$work/err" &&
    pass "--mem-budget without --auto-shard checks the plan, naming its largest parts" || { fail "--mem-budget without --auto-shard:"; cat "$work/err"; }; }
# examples/mlp.gsl at a large size on 2 devices (issue 30, item 9): the
# largest part is output w1 gathered on rank 0, 2 tiles of 2048 x 8192
# floats (w1 is whole over data) and the global array, 3 x 67108864 bytes
"$GSLC" -D B=64 -D D=2048 -D H=8192 -D O=2048 -D DP=2 --mem-budget 600M --stats "$top_srcdir/examples/mlp.gsl" \
  >/dev/null 2>"$work/err" && fail "mlp at 600M: no error" ||
  { grep -q "; the largest parts: gathering output w1 on rank 0 201326592, " "$work/err" &&
    pass "--mem-budget names gathering output w1 on rank 0 (201326592 bytes) first" || { fail "mlp at 600M:"; cat "$work/err"; }; }
# ... and under --auto-shard, what keeps the least footprint up: w1 and w2
# (2048 x 8192 floats, 67108864 bytes each) whole over data, as annotated
"$GSLC" -D B=64 -D D=2048 -D H=8192 -D O=2048 -D DP=2 --auto-shard --mem-budget 200M --stats \
  "$top_srcdir/examples/mlp.gsl" >/dev/null 2>"$work/err" && fail "mlp at 200M: no error" ||
  { grep -q "the largest: w1 67108864 (as annotated), w2 67108864 (as annotated), adam.m.w1 67108864 (as annotated)), more than the budget" "$work/err" &&
    pass "--auto-shard --mem-budget names w1, w2 and adam.m.w1 as annotated" || { fail "mlp at 200M:"; cat "$work/err"; }; }
"$GSLC" --auto-shard --mem-budget 10Q "$work/wh.gsl" 2>"$work/err" && fail "--mem-budget 10Q accepted" ||
  { grep -q "takes a number of bytes with an optional K, M or G" "$work/err" && pass "--mem-budget 10Q refused" ||
    { fail "--mem-budget 10Q:"; cat "$work/err"; }; }

exit $status
