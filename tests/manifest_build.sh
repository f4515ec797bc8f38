#!/bin/sh
# tests/manifest_build.sh — the program's build record in checkpoint
# manifests (runtime/ckpt_manifest.c, format version 5 and on; man/gslrun.7
# CHECKPOINTS), through the hand-written tests/train_log_prog.c, whose
# gslrt_program_info.build is $TRAIN_LOG_BUILD (gslc fills it; a program
# without one has none):
#
#   - a manifest holds the record as the object "build", equal to the
#     program's text as JSON (every key, in its order, every value), and
#     version 6; a program without one writes {};
#   - resumed by the same build: no note; by one compiled with another
#     const (TOP=1 where the checkpoint's had TOP=2; E only in this one),
#     from other sources (nn.gsl's SHA-256 differs), or both: one note on
#     rank 0's stderr naming what differs, and the run goes on; on 2 ranks
#     the note is still one line;
#   - a program without a record resuming a checkpoint with one, and one
#     with a record resuming a checkpoint without: no note;
#   - a version 4 manifest (no "build") still resumes, to the same w as
#     a run never stopped (w = 1 + s / 2 after s steps, the program's rule);
#   - a build text that is not JSON, or JSON but not an object: a bug of
#     gslc, said so in one line, status 1, before any step.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
PY=${PYTHON:-/usr/bin/python3}
hand_prog train_log_prog "${TRAIN_LOG_PROG:-tests/train_log_prog}"

sha() { printf '%064d' "$1"; } # a SHA-256's 64 hex digits, made up
B2='{"defines": {"TOP": "2"}, "consts": {"TOP": 2, "M": 64, "LR": 0.001, "nn.EPS": 1e-05, "NAME": "lm"}, "sources": [{"file": "lm.gsl", "sha256": "'$(sha 1)'"}, {"file": "nn.gsl", "sha256": "'$(sha 2)'"}], "source_sha256": "'$(sha 3)'"}'
B1=$(echo "$B2" | sed 's/"TOP": "2"/"TOP": "1"/; s/"TOP": 2/"TOP": 1/; s/"NAME": "lm"}/"NAME": "lm", "E": 8}/')
BS=$(echo "$B2" | sed "s/$(sha 2)/$(sha 4)/; s/$(sha 3)/$(sha 5)/")
# note BUILD-AT-2 BUILD-AT-3 NP WHAT NOTE: 2 steps saved under the first
# record (unset if empty), resumed to 3 under the second on NP ranks:
# status 0, and NOTE the one note (none if empty)
note() {
  rm -rf ck
  if [ -n "$1" ]; then TRAIN_LOG_BUILD=$1 run 1 --steps 2 --checkpoint ck --quiet; else run 1 --steps 2 --checkpoint ck --quiet; fi
  [ $rc -eq 0 ] || { fail "$4: saving: status $rc"; cat err; return; }
  if [ -n "$2" ]; then TRAIN_LOG_BUILD=$2 run "$3" --steps 3 --checkpoint ck --resume --quiet; else run "$3" --steps 3 --checkpoint ck --resume --quiet; fi
  if [ -z "$5" ] && [ $rc -eq 0 ] && [ ! -s err ]; then
    pass "$4: no note"
  elif [ -n "$5" ] && [ $rc -eq 0 ] && [ "$(cat err)" = "train_log_prog: note: checkpoint ck/step-00000002 was written by a program $5: resuming" ]; then
    pass "$4: one note"
  else
    fail "$4: status $rc, expected ${5:-no note}, stderr:"; cat err
  fi
}

# ---- the record in the manifest ----
TRAIN_LOG_BUILD=$B2 run 1 --steps 2 --checkpoint ck --quiet
if [ $rc -eq 0 ] && $PY - ck/step-00000002/manifest.json "$B2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
b = json.loads(sys.argv[2])
assert m["version"] == 6, m["version"]
assert m["build"] == b and list(m["build"]) == list(b) and list(m["build"]["consts"]) == list(b["consts"]), m["build"]
assert type(m["build"]["consts"]["TOP"]) is int and m["build"]["consts"]["LR"] == 0.001, m["build"]
PY
then
  pass "the manifest holds the program's build record exactly, as \"build\", version 6"
else
  fail "the manifest's build record: status $rc"; cat err ck/step-00000002/manifest.json
fi
rm -rf ck; run 1 --steps 2 --checkpoint ck --quiet
$PY -c 'import json, sys; m = json.load(open(sys.argv[1])); assert m["version"] == 6 and m["build"] == {}, m' \
  ck/step-00000002/manifest.json && pass "a program without a build record writes \"build\": {}" ||
  fail "a program without a build record: $(cat ck/step-00000002/manifest.json)"

# ---- resuming: a note where the program differs ----
note "$B2" "$B2" 1 "the same build" ""
note "$B2" "$B1" 1 "TOP=2 resumed by TOP=1 (E=8 only in this one)" \
  "compiled with TOP=2, E=(none); this one has TOP=1, E=8"
note "$B2" "$B1" 2 "the same on 2 ranks" "compiled with TOP=2, E=(none); this one has TOP=1, E=8"
note "$B2" "$BS" 1 "nn.gsl changed" \
  "from other sources (nn.gsl differs; source_sha256 000000000000..., this one's 000000000000...)"
BB=$(echo "$B1" | sed "s/$(sha 2)/$(sha 4)/; s/$(sha 3)/$(sha 5)/")
note "$B2" "$BB" 1 "another const and other sources" \
  "compiled with TOP=2, E=(none); this one has TOP=1, E=8; and from other sources (nn.gsl differs; source_sha256 000000000000..., this one's 000000000000...)"
note "$B2" "" 1 "a program without a record" ""
note "" "$B2" 1 "a checkpoint without a record" ""

# ---- a version 4 manifest (no "build") still resumes ----
rm -rf ck; TRAIN_LOG_BUILD=$B2 run 1 --steps 2 --checkpoint ck --quiet
$PY - ck/step-00000002/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["version"] = 4
del m["build"]
del m["provenance"]
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
TRAIN_LOG_BUILD=$B2 run 1 --steps 4 --checkpoint ck --resume --output w=w.npy
if [ $rc -eq 0 ] && grep -qx "resumed from ck/step-00000002 at step 2" out && [ ! -s err ] &&
   $PY -c 'import numpy, sys; w = numpy.load(sys.argv[1]); assert (w == 3.0).all(), w' w.npy 2>/dev/null; then
  pass "a version 4 manifest (no build record) resumes: w = 1 + 4 / 2 after 4 steps, no note"
elif [ $rc -eq 0 ] && grep -qx "resumed from ck/step-00000002 at step 2" out && [ ! -s err ] && ! $PY -c 'import numpy' 2>/dev/null; then
  pass "a version 4 manifest (no build record) resumes, no note (w not read: no numpy)"
else
  fail "a version 4 manifest: status $rc"; cat out err
fi

# ---- a record that is not a JSON object: gslc's bug ----
for b in '{"consts": {"TOP": 2}' '[1, 2]'; do
  rm -rf ck; TRAIN_LOG_BUILD=$b run 1 --steps 2 --checkpoint ck
  case $b in
  '['*) want="train_log_prog: rank 0: error: the program's build record (gslrt_program_info.build) is JSON but not an object: a bug of the gslc that compiled it (none), not of the program; report it" ;;
  *) # jansson names the end of the 21 bytes of text
     want="train_log_prog: rank 0: error: the program's build record (gslrt_program_info.build) is not JSON (1:21: '}' expected near end of file): a bug of the gslc that compiled it (none), not of the program; report it" ;;
  esac
  if [ $rc -eq 1 ] && [ "$(cat err)" = "$want" ] && ! grep -q '^step ' out; then
    pass "a build record '$b': refused as gslc's bug"
  else
    fail "a build record '$b': status $rc, stderr not '$want' but:"; cat err out
  fi
done
exit $status
