#!/bin/sh
# tests/samebits.sh — gslc --same-bits: the same bits on every mesh.
#
# Each case trains one example from one seed on one device and on other
# meshes, a checkpoint at the last step, and compares every file of the
# checkpoints (params, optimizer states) byte for byte with one device's:
#   - examples/mlp.gsl, 50 adam steps, on [data = 2], [model = 2], 2 x 2;
#     and on [data = 3] under --same-bits=32 (a batch of 64 on 3 devices:
#     tiles of 22, 22 and 20 rows, whole blocks of 2 rows);
#   - examples/moe.gsl at a small size (4 groups of 32 tokens, width 16,
#     experts of 32), 100 steps, on 2 and 4 devices (the mesh line edited);
#   - examples/lm.gsl at a tiny size (8 sequences of 16 bytes, width 32,
#     4 experts, gradients clipped to norm 1), 30 steps on [data = 2] and
#     [expert = 2], in f32 and under --precision bf16;
#   - a resume on another mesh: 15 lm steps on [data = 2], then 15 more on
#     one device from that checkpoint, equal to 30 steps on one device.
# The inputs are the examples' own random draws (mlp, moe: the same on any
# mesh) or fixed byte windows (lm: a linear congruential generator).
# The errors are tests/samebits_errors.sh's.
set -u
. "$top_srcdir/tests/lib.sh"

# compile NAME RANKS SOURCE FLAGS...; train NAME RANKS STEPS [ARGS...]
build() {
  name=$1 src=$2
  shift 2
  "$GSLC" "$@" "$src" -o "$work/$name" || { fail "$src $* does not compile"; return 1; }
}
train() {
  name=$1 ranks=$2 steps=$3
  shift 3
  (cd "$work" && timeout 300 $MPIEXEC -n "$ranks" "./$name" --steps "$steps" --quiet \
    --checkpoint "ck.$name" --checkpoint-every "$steps" "$@" >/dev/null 2>"$name.err") ||
    { fail "$name on $ranks ranks: $(cat "$work/$name.err")"; return 1; }
}
# same REF OTHER STEP WHAT: every .npy of REF's checkpoint at STEP equal, byte for byte, in OTHER's
same() {
  dir=$(printf 'step-%08d' "$3")
  n=0 bad=""
  for f in "$work/ck.$1/$dir"/*.npy; do
    [ -f "$f" ] || { fail "$4: no checkpoint $1/$dir"; return 1; }
    b=$(basename "$f")
    n=$((n + 1))
    cmp -s "$f" "$work/ck.$2/$dir/$b" || bad="$bad ${b%.npy}"
  done
  if [ -n "$bad" ]; then
    fail "$4: differ from one device's:$bad"
  else
    echo "ok: $4: all $n tensors bit-identical to one device's"
  fi
}

# ---- examples/mlp.gsl ----
mlp=$top_srcdir/examples/mlp.gsl
build mlp1 "$mlp" --same-bits &&
  build mlp2d "$mlp" --same-bits -D DP=2 &&
  build mlp2m "$mlp" --same-bits -D MP=2 &&
  build mlp22 "$mlp" --same-bits -D DP=2 -D MP=2 &&
  build mlp1b "$mlp" --same-bits=32 &&
  build mlp3d "$mlp" --same-bits=32 -D DP=3 || exit 1
train mlp1 1 50 && train mlp2d 2 50 && train mlp2m 2 50 && train mlp22 4 50 && train mlp1b 1 50 && train mlp3d 3 50 ||
  exit 1
same mlp1 mlp2d 50 "mlp, 50 steps, [data = 2]"
same mlp1 mlp2m 50 "mlp, 50 steps, [model = 2]"
same mlp1 mlp22 50 "mlp, 50 steps, [data = 2, model = 2]"
same mlp1b mlp3d 50 "mlp, 50 steps, [data = 3] (--same-bits=32)"

# ---- examples/moe.gsl ----
for d in 1 2 4; do
  sed "s/^mesh \[d = 4\]/mesh [d = $d]/" "$top_srcdir/examples/moe.gsl" >"$work/moe$d.gsl"
  grep -q "^mesh \[d = $d\]" "$work/moe$d.gsl" || { fail "examples/moe.gsl's mesh line is not 'mesh [d = 4]'"; exit 1; }
  build "moe$d" "$work/moe$d.gsl" --same-bits -D S=32 -D M=16 -D H=32 || exit 1
done
train moe1 1 100 && train moe2 2 100 && train moe4 4 100 || exit 1
same moe1 moe2 100 "moe, 100 steps, 2 devices"
same moe1 moe4 100 "moe, 100 steps, 4 devices"

# ---- examples/lm.gsl ----
# byte windows [30, 8, 17] from x <- (1103515245 x + 12345) mod 2^31, bytes x >> 16 & 255
awk 'BEGIN { x = 11; for (i = 0; i < 30 * 8 * 17; i++) { x = (1103515245 * x + 12345) % 2147483648;
  printf "%d ", int(x / 65536) % 256 } }' | "$NPYTOOL" write "$work/tokens.npy" i32 "30,8,17" - ||
  { fail "cannot write the byte windows"; exit 1; }
lm=$top_srcdir/examples/lm.gsl
sizes="-D B=8 -D T=16 -D M=32 -D NH=2 -D H=64 -D E=4 -D CLIP=1.0 -O1"
for p in f32 bf16; do
  # shellcheck disable=SC2086
  build "lm1$p" "$lm" --same-bits --precision $p $sizes -D DATA=1 -D EXPERT=1 &&
    build "lmd$p" "$lm" --same-bits --precision $p $sizes -D DATA=2 -D EXPERT=1 &&
    build "lme$p" "$lm" --same-bits --precision $p $sizes -D DATA=1 -D EXPERT=2 || exit 1
  train "lm1$p" 1 30 --input tokens=tokens.npy && train "lmd$p" 2 30 --input tokens=tokens.npy &&
    train "lme$p" 2 30 --input tokens=tokens.npy || exit 1
  same "lm1$p" "lmd$p" 30 "lm ($p), 30 steps, [data = 2, expert = 1]"
  same "lm1$p" "lme$p" 30 "lm ($p), 30 steps, [data = 1, expert = 2]"
done

# ---- a resume on another mesh ----
(cd "$work" && timeout 300 $MPIEXEC -n 2 ./lmdf32 --steps 15 --quiet --input tokens=tokens.npy \
  --checkpoint ck.resume --checkpoint-every 15 >/dev/null 2>resume.err &&
  timeout 300 $MPIEXEC -n 1 ./lm1f32 --steps 30 --quiet --input tokens=tokens.npy --resume \
    --checkpoint ck.resume --checkpoint-every 15 >/dev/null 2>>resume.err) ||
  fail "the resume: $(cat "$work/resume.err")"
same lm1f32 resume 30 "lm, 15 steps on [data = 2] then 15 on one device from its checkpoint"

# ---- --explain ----
# mlp on 2 x 2: the batch (64) and the hidden width (1024), each in 8
# blocks; the partials' collectives say why; the estimate with and without
"$GSLC" --same-bits -D DP=2 -D MP=2 --explain "$mlp" >"$work/explain" 2>&1 || fail "--explain --same-bits: $(cat "$work/explain")"
grep -q "^## same bits (gslc --same-bits=12)" "$work/explain" &&
  grep -q "^product     over 1024 in 8 blocks of 128, split 2 ways here; whole blocks on 1, 2, 4, 8 devices along it   ; nn.gsl:27 (inlined at mlp.gsl:41)$" "$work/explain" &&
  grep -q "^sum         over 64 in 8 blocks of 8, split 2 ways here; whole blocks on 1, 2, 4, 8 devices along it   ; nn.gsl:7 (inlined at mlp.gsl:44)$" "$work/explain" &&
  grep -q "^all_gather      over (data) dim 0: f32\[4\] -> \[8\], 16 bytes   ; nn.gsl:7 (inlined at mlp.gsl:44): the blocks' partials, added in block order (--same-bits)$" "$work/explain" &&
  grep -q "^without --same-bits: [0-9.]* ms, .*; --same-bits costs +[0-9.]* % by this model" "$work/explain" ||
  { fail "--explain --same-bits:"; sed -n '/## same bits/,/^$/p; /## summary/,$p' "$work/explain"; }

# No sum is left to MPI's order: the SPMD programs of the cases above have
# no all-reduce of a sum, and a reduce-scatter only of a scatter-add's
# blocks (rows that one device alone fills: each element one term and zeros)
for c in "mlp|-D DP=2 -D MP=2|$mlp" "lm|$sizes -D DATA=2 -D EXPERT=2|$lm" "moe|-D S=32 -D M=16 -D H=32|$work/moe4.gsl"; do
  IFS='|' read -r name flags src <<EOF
$c
EOF
  # shellcheck disable=SC2086
  "$GSLC" --same-bits $flags --explain "$src" >"$work/$name.explain" 2>&1 || fail "--explain $name: $(cat "$work/$name.explain")"
  bad=$(sed -n '/^## collectives/,/^## summary/p' "$work/$name.explain" |
    grep -E '^all_reduce      over|^reduce_scatter' | grep -v "each row filled on one device: exact" || true)
  [ -z "$bad" ] || fail "$name under --same-bits sums in MPI's order: $bad"
done

exit $status
