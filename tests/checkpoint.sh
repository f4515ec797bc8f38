#!/bin/sh
# tests/checkpoint.sh — --checkpoint, --checkpoint-every, --keep and
# --resume (runtime/checkpoint.c), on examples/moe.gsl at a small size with
# its mesh made a parameter (mesh [d = D], as tests/train_invariance.sh
# does): expert-split params (wi, wo), adam's states, and x bound to a
# cycling --input of 3 batches.
#
#   - 10 steps on 4 ranks, uninterrupted (the reference);
#   - 6 steps on 4 ranks with --checkpoint-every 3: checkpoints at 3 and 6;
#     every param file of step 6, read by a plain .npy reader compiled here
#     (not the runtime's), equals that run's --output exactly;
#   - resumed from step 6 on 4, 2 and 1 ranks, and on a 2 x 2 mesh [data =
#     2, expert = 2] (the variant tests/train_invariance.sh makes), to step 10: the losses of
#     steps 7-10 and the final params equal the reference's to 1e-5 (on 4
#     ranks exactly), and so do the params and adam states of the step-10
#     checkpoint; a leftover .tmp. directory is ignored, then removed, and
#     the default --keep 2 leaves step 9 and step 10 only;
#   - on 3 ranks (uneven tiles): saved as on 4, resumed on 2 and 1, and the
#     4-rank save resumed on 3, as uninterrupted;
#   - a corrupted byte, a truncated file, a missing file, another program's
#     checkpoint, another optimizer's learning rate, a different --seed: exit 1 on every rank, one message
#     naming the file or param, no step run; an empty DIR starts fresh; a
#     checkpoint at --steps runs nothing; --resume without --checkpoint is
#     a usage error.
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1

sizes="-D G=4 -D S=16 -D M=8 -D H=16 -D E=4"
sed 's/^mesh \[d = 4\]/const D = 4\nmesh [d = D]/' "$top_srcdir/examples/moe.gsl" >moe_d.gsl
grep -q '^mesh \[d = D\]' moe_d.gsl || fatal "examples/moe.gsl has no 'mesh [d = 4]' line"
echo 'output wg, wi, wo' >>moe_d.gsl
for d in 1 2 4; do
  # shellcheck disable=SC2086
  "$GSLC" $sizes -D D=$d moe_d.gsl -o m$d || fatal "gslc -D D=$d"
done
# shellcheck disable=SC2086
"$GSLC" $sizes -D D=1 -D H=32 moe_d.gsl -o other || fatal "gslc -D H=32"
# the same program trained with another learning rate
sed 's/with adam(lr = 0.001)/with adam(lr = 0.01)/' moe_d.gsl >moe_lr.gsl
grep -q 'adam(lr = 0.01)' moe_lr.gsl || fatal "examples/moe.gsl does not train with adam(lr = 0.001)"
# shellcheck disable=SC2086
"$GSLC" $sizes -D D=2 moe_lr.gsl -o lr2 || fatal "gslc moe_lr.gsl"
# the 2 x 2 mesh [data = 2, expert = 2], as tests/train_invariance.sh makes it
sed -e 's/^mesh \[d = D\]/mesh [data = 2, expert = 2]/' \
    -e 's/split(0) *= normal(0.02)/split(0, expert) = normal(0.02)/' \
    -e 's/split(0) = normal(1.0)/shard([(data, expert), _, _]) = normal(1.0)/' moe_d.gsl >moe_2x2.gsl
[ "$(grep -c 'expert)' moe_2x2.gsl)" -eq 3 ] || fatal "the 2 x 2 variant was not made"
# shellcheck disable=SC2086
"$GSLC" $sizes moe_2x2.gsl -o m2x2 || fatal "gslc moe_2x2.gsl"

# a plain .npy reader: "ckread A B RTOL ATOL" compares two version-1 '<f4'
# or '<i4' C-order files of one shape, whose data starts at a multiple of 64
cat >ckread.c <<'C'
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static long load(const char *path, char *descr, char *shape, unsigned char **data) {
  FILE *f = fopen(path, "rb");
  unsigned char pre[10];
  if (!f || fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY\x01\x00", 8)) {
    fprintf(stderr, "ckread: %s: not a version 1.0 .npy file\n", path);
    exit(1);
  }
  int hlen = pre[8] | pre[9] << 8;
  char *h = calloc(1, (size_t)hlen + 1);
  if (!h || fread(h, 1, (size_t)hlen, f) != (size_t)hlen || (10 + hlen) % 64 || h[hlen - 1] != '\n' ||
      !strstr(h, "'fortran_order': False") || !strstr(h, "'descr': '<") || !strchr(h, '(')) {
    fprintf(stderr, "ckread: %s: bad header\n", path);
    exit(1);
  }
  memcpy(descr, strstr(h, "'descr': '") + 10, 3);
  descr[3] = 0;
  char *s = strchr(h, '('), *e = strchr(s, ')');
  memcpy(shape, s, (size_t)(e - s + 1));
  shape[e - s + 1] = 0;
  long n = 1;
  for (s++; s < e;) {
    n *= strtol(s, &s, 10);
    while (*s == ',' || *s == ' ')
      s++;
  }
  *data = malloc((size_t)n * 4 + 1);
  if (!*data || fread(*data, 4, (size_t)n, f) != (size_t)n || fgetc(f) != EOF) {
    fprintf(stderr, "ckread: %s: the data is not %ld elements\n", path, n);
    exit(1);
  }
  fclose(f);
  free(h);
  return n;
}
int main(int argc, char **argv) {
  char da[8], db[8], sa[256], sb[256];
  unsigned char *a, *b;
  if (argc != 5)
    return 2;
  long n = load(argv[1], da, sa, &a), m = load(argv[2], db, sb, &b), bad = 0;
  double rtol = atof(argv[3]), atol = atof(argv[4]);
  if (strcmp(da, db) || strcmp(sa, sb) || n != m) {
    fprintf(stderr, "ckread: %s is %s %s, %s is %s %s\n", argv[1], da, sa, argv[2], db, sb);
    return 1;
  }
  for (long i = 0; i < n; i++) {
    float x, y;
    int p, q;
    memcpy(&x, a + 4 * i, 4), memcpy(&y, b + 4 * i, 4), memcpy(&p, a + 4 * i, 4), memcpy(&q, b + 4 * i, 4);
    int ok = !strcmp(da, "<f4") ? fabs((double)x - y) <= atol + rtol * fabs((double)y) : p == q;
    if (!ok && bad++ < 5)
      fprintf(stderr, "ckread: %s and %s differ at %ld: %.9g, %.9g\n", argv[1], argv[2], i, x, y);
  }
  return bad != 0;
}
C
$CC -O1 -o ckread ckread.c -lm || fatal "cannot compile the .npy reader"

# 3 batches of x f32[4, 16, 8]
awk 'BEGIN { for (i = 0; i < 3 * 4 * 16 * 8; i++) printf "%.6f\n", sin(i * 0.37) * 1.5 }' |
  "$NPYTOOL" write xb.npy f32 3,4,16,8 - || fatal "npytool write"

# run NAME NP ARGS...: ./mNP (or ./NAME if NAME is not m1/m2/m4) under
# $MPIEXEC; stdout in NAME.out, stderr in NAME.err, status in rc
run() {
  name=$1 np=$2; shift 2
  timeout 120 $MPIEXEC -n "$np" "$@" >"$name.out" 2>"$name.err"
  rc=$?
}
outs() { echo --output wg="$1.wg.npy" --output wi="$1.wi.npy" --output wo="$1.wo.npy"; }
losses() { sed 's/^{"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/' "$1"; }

# shellcheck disable=SC2046
run full 4 ./m4 --steps 10 --input x=xb.npy --metrics full.jsonl --checkpoint full --quiet $(outs full)
[ $rc -eq 0 ] || { cat full.err; fatal "the uninterrupted run (status $rc)"; }
# shellcheck disable=SC2046
run save 4 ./m4 --steps 6 --input x=xb.npy --checkpoint ck --checkpoint-every 3 --keep 5 $(outs s6)
[ $rc -eq 0 ] || { cat save.err; fatal "the 6-step run (status $rc)"; }
if [ "$(ls ck)" = "$(printf 'step-00000003\nstep-00000006')" ] && [ -f ck/step-00000006/manifest.json ] &&
   grep -q '"step": 6,' ck/step-00000006/manifest.json &&
   grep -q '{"name": "x", "batches": 3, "position": 0}' ck/step-00000006/manifest.json &&
   grep -q '"mesh": \[{"axis": "d", "size": 4}\]' ck/step-00000006/manifest.json &&
   grep -q '"optimizer": "adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0)",' ck/step-00000006/manifest.json &&
   grep -q '^checkpoint ck/step-00000006 written' save.out; then
  pass "checkpoints at steps 3 and 6, with the step, the input's position, the mesh and the optimizer"
else
  fail "checkpoints of the 6-step run:"; ls -R ck; cat ck/step-00000006/manifest.json save.out
fi
for t in wg wi wo; do
  ./ckread ck/step-00000006/$t.npy s6.$t.npy 0 0 || fail "$t.npy of step 6 is not the run's --output $t"
done
[ $status -eq 0 ] && pass "step 6's wg, wi, wo, read by a plain reader, equal the --output of the 6-step run"

# resumed on 4, 2 and 1 ranks, and on the 2 x 2 mesh (./m2x2, 4 ranks)
losses full.jsonl | sed -n '7,10p' >want.loss
for d in 4 2 1 2x2; do
  cp -R ck c$d
  rtol=1e-5 atol=1e-6 np=$d
  [ $d = 4 ] && rtol=0 atol=0
  what="$d rank(s)"
  [ $d = 2x2 ] && np=4 what="the 2 x 2 mesh"
  [ $d = 2 ] && { mkdir c2/step-00000008.tmp.999 && cp ck/step-00000006/* c2/step-00000008.tmp.999/; }
  # shellcheck disable=SC2046
  run r$d $np ./m$d --steps 10 --input x=xb.npy --checkpoint c$d --checkpoint-every 3 --resume \
    --metrics r$d.jsonl $(outs r$d)
  if [ $rc -ne 0 ]; then
    fail "resume on $what: status $rc"; cat r$d.err; continue
  fi
  grep -qx "resumed from c$d/step-00000006 at step 6" r$d.out || { fail "resume on $what: no 'resumed from' line"; cat r$d.out; }
  losses r$d.jsonl >got.loss
  paste want.loss got.loss | awk -v r=$rtol '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > r * $2) bad = 1 } END { exit bad || NR != 4 }' ||
    { fail "resume on $what: the losses of steps 7-10 differ:"; paste want.loss got.loss; }
  for t in wg wi wo; do
    ./ckread r$d.$t.npy full.$t.npy $rtol $atol || fail "resume on $what: the final $t differs"
  done
  for f in full/step-00000010/*.npy; do
    ./ckread "c$d/step-00000010/${f##*/}" "$f" $rtol $atol || fail "resume on $what: ${f##*/} of step 10 differs"
  done
  [ "$(ls c$d)" = "$(printf 'step-00000009\nstep-00000010')" ] ||
    { fail "resume on $what, --keep 2: DIR holds"; ls c$d; }
  [ $status -eq 0 ] && pass "resumed on $what: steps 7-10 and every tensor of step 10 as uninterrupted (rtol $rtol)"
done
[ $status -eq 0 ] && pass "a leftover .tmp. directory was ignored on resume and removed by the next checkpoint"

# Uneven tiles (gsl.7, Uneven dimensions): on 3 ranks the 4 groups and 4
# experts are cut in tiles of 2 (2, 2 and none). Saved there, every file
# of step 6 has the true shape and equals the 4-rank save's to 1e-5;
# resumed on 2 and 1 ranks, and the 4-rank save resumed on 3, steps 7-10
# and the final params are the uninterrupted run's to 1e-5.
# shellcheck disable=SC2086
"$GSLC" $sizes -D D=3 moe_d.gsl -o m3 || fatal "gslc -D D=3"
run save3 3 ./m3 --steps 6 --input x=xb.npy --checkpoint ck3 --checkpoint-every 3 --keep 5 --quiet
if [ $rc -ne 0 ]; then
  fail "the 6-step run on 3 ranks (status $rc)"; cat save3.err
else
  for f in ck/step-00000006/*.npy; do
    ./ckread "ck3/step-00000006/${f##*/}" "$f" 1e-5 1e-6 || fail "${f##*/} of step 6 saved on 3 ranks differs from 4's"
  done
  for r in 3to2:ck3:2 3to1:ck3:1 4to3:ck:3; do
    u=${r%%:*} from=$(echo "$r" | cut -d: -f2) unp=${r##*:}
    cp -R "$from" "c$u"
    # shellcheck disable=SC2046
    run "r$u" "$unp" "./m$unp" --steps 10 --input x=xb.npy --checkpoint "c$u" --checkpoint-every 3 --resume \
      --metrics "r$u.jsonl" $(outs "r$u")
    if [ $rc -ne 0 ]; then
      fail "resume $u: status $rc"; cat "r$u.err"; continue
    fi
    losses "r$u.jsonl" >got.loss
    paste want.loss got.loss | awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 } END { exit bad || NR != 4 }' ||
      { fail "resume $u: the losses of steps 7-10 differ:"; paste want.loss got.loss; }
    for t in wg wi wo; do
      ./ckread "r$u.$t.npy" "full.$t.npy" 1e-5 1e-6 || fail "resume $u: the final $t differs"
    done
  done
  [ $status -eq 0 ] && pass "uneven tiles: saved on 3 ranks as on 4; resumed from 3 on 2 and 1, from 4 on 3, as uninterrupted"
fi

# expect NAME NP STATUS TEXT PROGRAM ARGS...: the status, TEXT in stderr
# (or, for status 0, stdout), no step run, one line of error
expect() {
  what=$1 np=$2 want=$3 text=$4; shift 4
  run e $np "$@"
  where=e.err; [ "$want" -eq 0 ] && where=e.out
  if [ $rc -ne "$want" ]; then
    fail "$what: status $rc, expected $want"; cat e.out e.err
  elif ! grep -qF -- "$text" $where; then
    fail "$what: no '$text' in:"; cat e.out e.err
  elif grep -q '^step ' e.out; then
    fail "$what: a step ran"; cat e.out
  elif [ "$want" -ne 0 ] && [ "$(wc -l <e.err)" -ne 1 ]; then
    fail "$what: more than one line of error:"; cat e.err
  else
    pass "$what"
  fi
}
fresh() { rm -rf bad; cp -R ck bad; }
fresh; printf '\377' | dd of=bad/step-00000006/wi.npy bs=1 seek=1000 conv=notrunc 2>/dev/null
expect "a corrupted byte" 2 1 "checkpoint bad/step-00000006: wi.npy has crc32" \
  ./m2 --steps 10 --input x=xb.npy --checkpoint bad --resume
fresh; truncate -s 1000 bad/step-00000006/wo.npy
expect "a truncated file" 2 1 "checkpoint bad/step-00000006: wo.npy is 1000 bytes, the manifest says 2176" \
  ./m2 --steps 10 --input x=xb.npy --checkpoint bad --resume
fresh; rm bad/step-00000006/adam.v.wi.npy
expect "a missing file" 4 1 "checkpoint bad/step-00000006: cannot open adam.v.wi.npy: No such file or directory" \
  ./m4 --steps 10 --input x=xb.npy --checkpoint bad --resume
fresh
expect "another program's checkpoint" 1 1 \
  "checkpoint bad/step-00000006: param wi is f32[4, 8, 16] there, f32[4, 8, 32] in this program" \
  ./other --steps 10 --input x=xb.npy --checkpoint bad --resume
expect "another optimizer's hyperparameters" 2 1 \
  "checkpoint bad/step-00000006: the optimizer is adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0) there, adam(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0) in this program" \
  ./lr2 --steps 10 --input x=xb.npy --checkpoint bad --resume
expect "another --seed" 2 1 "checkpoint bad/step-00000006: it was saved with --seed 0, not 5" \
  ./m2 --steps 10 --input x=xb.npy --checkpoint bad --resume --seed 5
expect "a checkpoint at --steps" 2 0 "the checkpoint is at step 6, --steps 6: nothing to run" \
  ./m2 --steps 6 --input x=xb.npy --checkpoint bad --resume
rm -rf bad; mkdir bad
run e 1 ./m1 --steps 1 --input x=xb.npy --checkpoint bad --resume
if [ $rc -eq 0 ] && grep -qx "no checkpoint in bad: starting at step 0" e.out && grep -q '^step 1/1 ' e.out &&
   [ -f bad/step-00000001/manifest.json ]; then
  pass "an empty DIR: a note, then step 1 and its checkpoint"
else
  fail "an empty DIR (status $rc):"; cat e.out e.err
fi
run e 1 ./m1 --resume
if [ $rc -eq 2 ] && grep -qx -- "m1: error: --resume needs --checkpoint DIR" e.err; then
  pass "--resume without --checkpoint: a usage error"
else
  fail "--resume without --checkpoint (status $rc):"; cat e.err
fi
run e 1 ./m1 --keep 3
if [ $rc -eq 2 ] && grep -qx -- "m1: error: --keep needs --checkpoint DIR" e.err; then
  pass "--keep without --checkpoint: a usage error"
else
  fail "--keep without --checkpoint (status $rc):"; cat e.err
fi
exit $status
