#!/bin/sh
# tests/uneven.sh — libgslrt's tensors on uneven tiles (the padded layout
# of gslrt.h: n rows over k shards in tiles of ceil(n / k), the real rows
# first), through the hand-written program tests/uneven_prog.c on 1, 2, 3
# and 4 ranks: params of [5, 4] and [4, 5] and inputs of [7, 3], [3, 7]
# and [7], split on their dimension of 5 or 7, the first or the last (on
# 4 ranks the last tile of 5 holds nothing).
#
# The program checks its own tiles each step against plain formulas (zero
# padding, the file's batch, draws keyed by global index); it scribbles
# 1000 into every padding element after each step. Here: its exit status;
# --output x and ids against the values the files were written with (by
# formula, below) and their true shapes; every --output the same file on
# any number of ranks, so nothing padded is in it; checkpoints saved on 3
# ranks resumed on 1, 2 and 4, and on 2 resumed on 3, giving the
# uninterrupted run's params bit for bit; a checkpoint's files the same
# on 3 ranks as on 1 (nothing padded, no 1000 in them); an index out of
# range in the last tile found and named by its global position; a split
# into more shards than elements refused.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
NPYTOOL=${NPYTOOL:-$(pwd)/tests/npytool}
hand_prog uneven_prog "${UNEVEN_PROG:-tests/uneven_prog}"
[ -x "$NPYTOOL" ] || fatal "no $NPYTOOL (make check builds tests/npytool)"

# x[b, i, j] and z[b, i, j] = 100 b + 10 i + j, ids[b, i] = (3 b + 2 i) % 10, batches b of 2
xs() { # B [ROWS COLS]: batch B of x (of z: 3 7), C order
  awk -v b="$1" -v r="${2:-7}" -v c="${3:-3}" 'BEGIN { for (i = 0; i < r; i++) for (j = 0; j < c; j++) print 100 * b + 10 * i + j }'
}
idss() { awk -v b="$1" 'BEGIN { for (i = 0; i < 7; i++) print (3 * b + 2 * i) % 10 }'; }
{ xs 0; xs 1; } | "$NPYTOOL" write x.npy f32 2,7,3 - || fail "writing x.npy"
{ xs 0 3 7; xs 1 3 7; } | "$NPYTOOL" write z.npy f32 2,3,7 - || fail "writing z.npy"
{ idss 0; idss 1; } | "$NPYTOOL" write ids.npy i32 2,7 - || fail "writing ids.npy"
# ids[6] = 10, in the last tile on 3 ranks (rows 6..8, one real) and on 4 (6..7)
idss 0 | sed '7s/.*/10/' | "$NPYTOOL" write bad.npy i32 7 - || fail "writing bad.npy"

outs() { # SUFFIX: --output of every param and the state to NAME$SUFFIX.npy
  echo "--output w=w$1.npy --output h=h$1.npy --output v=v$1.npy --output u=u$1.npy --output m=m$1.npy"
}
ins="--input x=x.npy --input z=z.npy --input ids=ids.npy"

# three steps on each mesh: the last (step 2) reads batch 0
for n in 1 2 3 4; do
  rm -f ./*"$n".npy
  run $n --steps 3 $ins $(outs $n) --output x=x$n.npy --output z=z$n.npy --output ids=ids$n.npy --output y=y$n.npy
  if [ $rc -ne 0 ]; then
    fail "$n rank(s): exit status $rc"; cat err; continue
  fi
  if xs 0 | "$NPYTOOL" compare x$n.npy f32 7,3 --rtol 0 --atol 0 - &&
     xs 0 3 7 | "$NPYTOOL" compare z$n.npy f32 3,7 --rtol 0 --atol 0 - &&
     idss 0 | "$NPYTOOL" compare ids$n.npy i32 7 --rtol 0 --atol 0 -; then
    pass "$n rank(s): padding zero and draws by global index (the program's checks); --output x, z and ids are the files' batch, [7, 3], [3, 7] and [7]"
  else
    fail "$n rank(s): --output x, z or ids"
  fi
  for t in w:"f32 [5, 4]" u:"f32 [4, 5]" m:"f32 [4, 5]" y:"f32 [3, 7]"; do
    name=${t%%:*} want=${t#*:}
    if [ "$("$NPYTOOL" print $name$n.npy | head -1)" != "$want" ] || "$NPYTOOL" print $name$n.npy | grep -qx 1000; then
      fail "$n rank(s): --output $name is not a $want without padding:"; "$NPYTOOL" print $name$n.npy
    fi
  done
  if [ $n -gt 1 ]; then
    same=1
    for t in w h v u m x z ids y; do
      cmp -s $t$n.npy ${t}1.npy || { same=0; fail "$n rank(s): --output $t differs from one rank's"; }
    done
    [ $same -eq 1 ] && pass "$n rank(s): every --output the same file as on one rank"
  fi
done

# checkpoints: four steps straight on 3 ranks and on 1, against two then two resumed
run 3 --steps 4 $ins $(outs ref)
[ $rc -eq 0 ] || { fail "the uninterrupted run on 3 ranks: status $rc"; cat err; }
run 1 --steps 4 $ins $(outs one)
for t in w h v u m; do
  cmp -s ${t}ref.npy ${t}one.npy || fail "four steps: $t differs between 3 ranks and 1"
done
for pair in 3:1 3:2 3:4 2:3; do
  save=${pair%%:*} resume=${pair#*:}
  rm -rf ck
  run $save --steps 2 $ins --checkpoint ck
  [ $rc -eq 0 ] || { fail "saving on $save rank(s): status $rc"; cat err; continue; }
  rm -f ./*res.npy
  run $resume --steps 4 $ins --checkpoint ck --resume $(outs res)
  same=$rc
  for t in w h v u m; do
    cmp -s ${t}res.npy ${t}ref.npy || same=1
  done
  if [ $same -eq 0 ] && grep -q "resumed from ck/step-00000002 at step 2" out; then
    pass "saved on $save rank(s), resumed on $resume: the params and the state bit for bit"
  else
    fail "saved on $save rank(s), resumed on $resume: status $rc, or params that differ"; cat out err
  fi
done

# a checkpoint's files: the same on 3 ranks (padded tiles) as on 1 (none)
rm -rf ck1 ck3
run 1 --steps 2 $ins --checkpoint ck1
run 3 --steps 2 $ins --checkpoint ck3
same=1
for t in w:"f32 [5, 4]" h:"f32 [5, 4]" v:"i32 [5, 4]" u:"f32 [4, 5]" sgd.m.u:"f32 [4, 5]"; do
  want=${t#*:} t=${t%%:*}
  f=step-00000002/$t.npy
  if ! cmp -s ck1/$f ck3/$f || [ "$("$NPYTOOL" print ck3/$f | head -1)" != "$want" ] ||
     "$NPYTOOL" print ck3/$f | grep -qx 1000; then
    same=0; fail "checkpoint file $t.npy on 3 ranks is not one rank's"
  fi
done
[ $same -eq 1 ] && pass "a checkpoint's files on 3 ranks are one rank's: the true shapes, nothing padded"

# an index out of range in the last tile: found, named by global position
for n in 3 4; do
  run $n --steps 1 --input x=x.npy --input z=z.npy --input ids=bad.npy
  want="--input ids=bad.npy: batch 0 of 1 (training step 1): ids[6] = 10 is out of range for the gather at uneven_prog.c, whose table has 10 rows"
  if [ $rc -eq 1 ] && grep -qF -- "$want" err; then
    pass "$n ranks: an index out of range in the last tile"
  else
    fail "$n ranks: status $rc, expected '$want' in:"; cat err
  fi
done

# more shards than elements: [2, 3] over 3
UNEVEN_PROG_BIG=1 run 3 --steps 1 $ins
want="error: big: dimension 0 of size 2 cannot be split into 3 shards (more shards than elements)"
if [ $rc -eq 1 ] && grep -qF -- "$want" err && [ "$(grep -c error err)" -eq 1 ]; then
  pass "a split into more shards than elements refused"
else
  fail "[2, 3] over 3: status $rc, expected '$want' once in:"; cat err
fi
exit $status
