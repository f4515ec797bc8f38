#!/bin/sh
# tests/bf16.sh — bf16 tensors in libgslrt (issue 19) end to end, through
# the hand-written program tests/bf16_prog.c on 1 and 2 ranks: a bf16
# param drawn as its f32 twin and rounded (checked by the program), a
# float32 --input rounded on load, --output as float32 widened exactly
# (numpy reads it; the values against a numpy model of the steps with
# bf16 rounding done by bit operations), the same files on 1 and 2 ranks,
# an int32 file refused, a float16 one refused saying how bf16 is
# stored, checkpoints (manifest dtype "bf16", precision,
# '<f4' files) resumed bit for bit on either mesh, and the notes of a
# resume across dtypes and precisions. Needs numpy (skipped without it).
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
PY=${PYTHON:-/usr/bin/python3}
$PY -c 'import numpy' 2>/dev/null || skip "no numpy for $PY"
hand_prog bf16_prog "${BF16_PROG:-tests/bf16_prog}"

# x: some values bf16 holds (1, -2.5), some it does not (1/3, 1 + 2^-8, a tie)
$PY - <<'PY'
import numpy as np
x = np.array([[1.0, -2.5, 1 / 3, 1 + 2**-8, 1 + 3 * 2**-8, 0.1],
              [2.0, 0.75, -1 / 7, 3.0, -0.3, 1e-3]] * 2, np.float32)
np.save("x.npy", x)
np.save("xi.npy", x.astype(np.int32))
np.save("xh.npy", x.astype(np.float16))
PY

for n in 1 2; do
  rm -f w$n.npy r$n.npy x$n.npy m$n.npy
  run $n --steps 3 --input x=x.npy --output w=w$n.npy --output r=r$n.npy --output x=x$n.npy --output m=m$n.npy
  if [ $rc -ne 0 ]; then
    fail "$n rank(s): exit status $rc"; cat err
    continue
  fi
  if $PY - w$n.npy r$n.npy x$n.npy m$n.npy <<'PY'
import sys, numpy as np
def bf16(a):  # round to nearest even, as gslrt_bf16_round (no NaN here)
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7fff + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)
w, r, x, m = (np.load(p) for p in sys.argv[1:5])
assert all(a.dtype == np.float32 and a.shape == (4, 6) for a in (w, r, x, m))
xs = np.load("x.npy")
assert (x.view(np.uint32) == bf16(xs).view(np.uint32)).all(), "x is not the file rounded"
assert (x.view(np.uint32) & 0xffff == 0).all() and (w.view(np.uint32) & 0xffff == 0).all()
assert x[0, 0] == 1.0 and x[0, 1] == -2.5 and x[0, 3] == 1.0 and x[0, 4].view(np.uint32) == 0x3f820000
want = bf16(r)
for s in range(3):
    want = bf16(want + x)
assert (w.view(np.uint32) == want.view(np.uint32)).all(), "w is not the model's"
assert (m == 4.0).all(), "the state"
PY
  then
    pass "$n rank(s): bf16 init, --input rounded, --output widened, three steps as the model"
  else
    fail "$n rank(s): the outputs"
  fi
done
if cmp -s w1.npy w2.npy && cmp -s x1.npy x2.npy && cmp -s m1.npy m2.npy; then
  pass "the same files on 1 and 2 ranks"
else
  fail "the outputs differ between 1 and 2 ranks"
fi

# an int32 file for the bf16 input: refused as for an f32 input
for n in 1 2; do
  run $n --steps 1 --input x=xi.npy
  want="error: input x: xi.npy has shape [4, 6] (i32), expected [4, 6] (f32, rounded to bf16) or [B, 4, 6]"
  if [ $rc -eq 1 ] && grep -qF "$want" err; then
    pass "$n rank(s): an int32 file for a bf16 input refused"
  else
    fail "$n rank(s): an int32 file: status $rc, expected '$want' in:"; cat err
  fi
done

# a float16 file ('<f2') for the bf16 input: refused, saying how a bf16
# array is stored (float16 is not bf16: another exponent and mantissa)
run 1 --steps 1 --input x=xh.npy
want="error: input x: xh.npy: unsupported dtype '<f2' (expected '<f4' for f32, '<i4' for i32, or '<f4' for bf16: numpy has no bf16, so a bf16 array is stored as float32, widened exactly, and rounded to bf16 on reading)"
if [ $rc -eq 1 ] && grep -qF "$want" err && [ "$(wc -l <err)" -eq 1 ]; then
  pass "a float16 file for a bf16 input refused, naming how bf16 is stored"
else
  fail "a float16 file: status $rc, expected '$want' alone in:"; cat err
fi

# checkpoints: 4 steps straight, against 2 then 2 more resumed, on every pair of meshes
export BF16_PROG_PRECISION=bf16
rm -rf ref; run 2 --steps 4 --input x=x.npy --checkpoint ref --output w=ref.npy --output m=refm.npy
[ $rc -eq 0 ] || { fail "the uninterrupted run: status $rc"; cat err; }
if $PY - ref/step-00000004 <<'PY'
import json, sys, numpy as np
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
assert m["version"] == 6 and m["precision"] == "bf16" and m["signals"] == {} and m["build"] == {}, m
t = {e["name"]: e for e in m["tensors"]}
assert t["w"]["dtype"] == "bf16" and t["sgd.m.w"]["dtype"] == "bf16" and t["r"]["dtype"] == "f32", t
assert b"'descr': '<f4'" in open(d + "/w.npy", "rb").read(128)
w = np.load(d + "/w.npy")
assert w.dtype == np.float32 and (w.view(np.uint32) & 0xffff == 0).all()
PY
then
  pass "a checkpoint's manifest: version 6, precision and dtype bf16, no signals, no build record; its file float32, widened"
else
  fail "the checkpoint's manifest or files"
fi
for save in 1 2; do
  for resume in 1 2; do
    rm -rf ck res.npy resm.npy
    run $save --steps 2 --input x=x.npy --checkpoint ck
    run $resume --steps 4 --input x=x.npy --checkpoint ck --resume --output w=res.npy --output m=resm.npy
    if [ $rc -eq 0 ] && cmp -s res.npy ref.npy && cmp -s resm.npy refm.npy && ! grep -q note err; then
      pass "saved on $save rank(s), resumed on $resume: bit for bit, no note"
    else
      fail "saved on $save, resumed on $resume: status $rc"; cat err
    fi
  done
done

# across dtypes and precisions: one note each on rank 0, not an error
note_case() { # NAME SAVE-ENV RESUME-ENV NOTE
  rm -rf ck
  ( export $2; run 1 --steps 2 --input x=x.npy --checkpoint ck; exit $rc ) ||
    { fail "$1: saving failed"; cat err; return; }
  ( export $3; run 2 --steps 3 --input x=x.npy --checkpoint ck --resume; exit $rc )
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'note:' err)" -eq 1 ] && grep -qF "bf16_prog: note: $4" err; then
    pass "$1: one note"
  else
    fail "$1: status $rc, expected one note '$4' in:"; cat err
  fi
}
note_case "f32 checkpoint into bf16 w" "BF16_PROG_W=f32" "BF16_PROG_W=bf16" \
  "checkpoint tensor 'w' is f32, the program's is bf16: rounded to nearest even"
note_case "bf16 checkpoint into f32 w" "BF16_PROG_W=bf16" "BF16_PROG_W=f32" \
  "checkpoint tensor 'w' is bf16, the program's is f32: widened exactly"
note_case "precision f32 resumed under bf16" "BF16_PROG_PRECISION=f32" "BF16_PROG_PRECISION=bf16" \
  "checkpoint ck/step-00000002 was saved by a program compiled with --precision f32, this one has --precision bf16: resuming"

# a version 2 manifest (no precision) reads as f32
rm -rf ck
BF16_PROG_PRECISION=f32 run 1 --steps 2 --input x=x.npy --checkpoint ck
$PY - ck/step-00000002/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["version"] = 2
del m["precision"]
del m["signals"]
del m["build"]
del m["provenance"]
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
BF16_PROG_PRECISION=f32 run 1 --steps 3 --input x=x.npy --checkpoint ck --resume
if [ $rc -eq 0 ] && ! grep -q note err && grep -q "resumed from ck/step-00000002 at step 2" out; then
  pass "a version 2 manifest resumed as precision f32"
else
  fail "a version 2 manifest: status $rc"; cat out err
fi
exit $status
