#!/bin/sh
# tests/provenance.sh — what gslc records of a program for its checkpoints
# (issue 30, item 12; gslrt_program_info.build, man/gslrun.7 CHECKPOINTS):
# a program importing nn, compiled with -D N=4 (and -D N=3 before it: the
# last counts), trains a step with --checkpoint; its manifest's "build"
# holds the -D as given ({"N": "4"}), every const of the program as
# compiled (N = 4 from -D, LR = 0.5 and HALF = N / 2 = 2 from the source),
# none sizing a mesh (the program has none; tests/generate.sh resumes
# examples/lm.gsl's checkpoint of [data = 1, expert = 2] on one device
# without a note: DATA and EXPERT are its mesh_consts),
# each source file read, in the order read (the program, then
# stdlib/nn.gsl it imports, then stdlib/optim.gsl the optimizer comes
# from), each with its SHA-256 as sha256sum computes it, and the SHA-256 of
# the three files' bytes one after another. Resumed by the same program
# compiled with -D N=4 but HALF = N / 4 in its source (the target's scale;
# the optimizer, whose lr a resume checks, unchanged): one note naming
# HALF's two values and the program's file, whose SHA-256 changed.
set -u
. "$top_srcdir/tests/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
cd "$work" || exit 1
cat >p.gsl <<'GSL'
import "nn"
const N = 2
const LR = 0.5
const HALF = N / 2
param w: f32[N] = ones()
input x: f32[N] = ones()
train mse(w * x, x * HALF) with sgd(lr = LR)
GSL
"$GSLC" -D N=3 -D N=4 p.gsl -o p || { fail "gslc p.gsl"; exit 1; }
./p --steps 1 --quiet --checkpoint ck || { fail "p --steps 1"; exit 1; }
stdlib=$(dirname "$GSLC")/stdlib
[ -f "$stdlib/nn.gsl" ] || stdlib=$top_srcdir/stdlib
h() { sha256sum "$1" | cut -c1-64; }
all=$(cat p.gsl "$stdlib/nn.gsl" "$stdlib/optim.gsl" | sha256sum | cut -c1-64)
$PY - ck/step-00000001/manifest.json "$(h p.gsl)" "$(h "$stdlib/nn.gsl")" "$(h "$stdlib/optim.gsl")" "$all" <<'PY' ||
import json, os, sys
m = json.load(open(sys.argv[1]))
b = m["build"]
assert b["defines"] == {"N": "4"}, b["defines"]
assert b["consts"] == {"N": 4, "LR": 0.5, "HALF": 2}, b["consts"]
files = [(os.path.basename(s["file"]), s["sha256"]) for s in b["sources"]]
assert files == [("p.gsl", sys.argv[2]), ("nn.gsl", sys.argv[3]), ("optim.gsl", sys.argv[4])], files
assert b["source_sha256"] == sys.argv[5], b["source_sha256"]
assert b["mesh_consts"] == [], b["mesh_consts"]
assert list(b) == ["defines", "consts", "mesh_consts", "sources", "source_sha256"], list(b)
PY
  fail "the manifest's build record: $(sed -n '/"build"/,/source_sha256/p' ck/step-00000001/manifest.json)"
sed 's|const HALF = N / 2|const HALF = N / 4|' p.gsl >p2.gsl && mv p2.gsl p.gsl
"$GSLC" -D N=4 p.gsl -o p || { fail "gslc p.gsl, HALF = N / 4"; exit 1; }
./p --steps 2 --quiet --checkpoint ck --resume 2>err || fail "resuming under HALF = N / 4"
grep -q "note: checkpoint ck/step-00000001 was written by a program compiled with HALF=2; this one has HALF=1" err ||
  fail "no note of HALF: $(cat err)"
grep -q "p.gsl" err || fail "the note does not name p.gsl: $(cat err)"
[ $status -eq 0 ] && echo "the manifest records -D, the consts and the sources' SHA-256; a resume under other ones notes them"
exit $status
