#!/bin/sh
# tests/checkpoint_dir.sh — the --checkpoint directory kept like a
# database's data directory, and manifests read by a JSON parser
# (runtime/checkpoint.c), on a small adam-trained program:
#
#   - nothing removed through a symbolic link: DIR/step-N -> ELSEWHERE is
#     refused at the start (with and without --resume), a leftover
#     DIR/step-N.tmp.X -> ELSEWHERE is removed itself; ELSEWHERE keeps
#     its files;
#   - a run only prunes its own checkpoints: a fresh run into a directory
#     holding another run's is refused (and leaves it as it was); a resumed
#     run continues its checkpoint's identity and prunes its own, not
#     another run's copied in beside; a step directory without a manifest
#     (holding someone's file) is refused, never replaced;
#   - two jobs on one directory: the second fails at once naming the
#     first's pid and host (read from the lock, checked to be that job's
#     process); the first is unharmed;
#   - a manifest re-indented with its keys in another order resumes, to
#     the same numbers as a run never stopped;
#   - each bad field is refused naming it (values from the manifest's
#     text, the crc32 from Python's zlib, decimal as the manifest keeps it);
#     a tensor's file that is a FIFO or a link to /dev/zero is refused, not
#     read forever;
#   - a --metrics or --output file inside DIR (a checkpoint's manifest or
#     tensor, DIR/.lock, a new file), named through a link, a link to a
#     step directory, "..", or with DIR given as a link, with --resume or
#     without (DIR not yet made), or a --metrics file that is a hard link
#     to a manifest there (truncated in place), is a usage error before
#     anything is written: the checkpoint stays as it was and still
#     resumes; a file beside DIR whose name begins with DIR's is written.
set -u
. "$top_srcdir/tests/lib.sh"
apid=
at_exit 'kill $apid 2>/dev/null'
cd "$work" || exit 1
PY=/usr/bin/python3

cat >t.gsl <<'EOF'
param w: f32[3] = uniform(-1.0, 1.0)
input x: f32[3] = uniform(0.0, 1.0)
train sum(w * w * x) with adam(lr = 0.1)
output w
EOF
"$GSLC" t.gsl -o t || fatal "gslc t.gsl"

run() {
  name=$1 np=$2; shift 2
  timeout 120 $MPIEXEC -n "$np" "$@" >"$name.out" 2>"$name.err"
  rc=$?
}
# expect WHAT NP TEXT ARGS...: exit 1, exactly one line of error equal to
# "t: rank 0: error: TEXT", no step run
expect() {
  what=$1 np=$2 text=$3; shift 3
  run e "$np" "$@"
  if [ $rc -ne "${ecode:-1}" ]; then
    fail "$what: status $rc, expected ${ecode:-1}"; cat e.out e.err
  elif [ "$(cat e.err)" != "t: rank 0: error: $text" ]; then
    fail "$what: stderr is not 't: rank 0: error: $text' but:"; cat e.err
  elif grep -q '^step ' e.out; then
    fail "$what: a step ran"; cat e.out
  else
    pass "$what"
  fi
}
elsewhere() { rm -rf elsewhere; mkdir elsewhere; echo keep >elsewhere/data.txt; echo keep >elsewhere/w.npy; }
intact() { [ "$(cat elsewhere/data.txt 2>/dev/null)" = keep ] && [ "$(cat elsewhere/w.npy 2>/dev/null)" = keep ]; }

# the reference: 4 steps never stopped, and 2 steps into ck
run ref 1 ./t --steps 4 --output w=ref.npy --quiet || true
[ $rc -eq 0 ] || { fail "the 4-step reference: status $rc"; cat ref.err; }
run a 1 ./t --steps 2 --checkpoint ck --quiet
[ $rc -eq 0 ] && [ -f ck/step-00000002/manifest.json ] || { fail "2 steps into ck: status $rc"; cat a.err; exit 1; }
run_id=$($PY -c 'import json; print(json.load(open("ck/step-00000002/manifest.json"))["run"])')

# ---- symbolic links -------------------------------------------------------
elsewhere; rm -rf d; cp -R ck d; ln -s "$work/elsewhere" d/step-00000001
expect "a link DIR/step-00000001 -> ELSEWHERE, --keep 1 --resume" 1 \
  "--checkpoint d: d/step-00000001 is a symbolic link, not a checkpoint (gsl neither follows nor removes one); move it away" \
  ./t --steps 6 --checkpoint d --keep 1 --resume
intact && [ -L d/step-00000001 ] || fail "ELSEWHERE or the link was touched"
rm -rf d; mkdir d; ln -s "$work/elsewhere" d/step-00000003
expect "a link DIR/step-00000003 -> ELSEWHERE, the step the run will write" 1 \
  "--checkpoint d: d/step-00000003 is a symbolic link, not a checkpoint (gsl neither follows nor removes one); move it away" \
  ./t --steps 3 --checkpoint d
intact || fail "ELSEWHERE was touched"
rm -rf d; mkdir d; ln -s "$work/elsewhere" d/step-00000009.tmp.1
run e 1 ./t --steps 3 --checkpoint d --keep 1 --quiet
if [ $rc -eq 0 ] && intact && [ ! -e d/step-00000009.tmp.1 ] && [ ! -L d/step-00000009.tmp.1 ] &&
   [ "$(ls d)" = step-00000003 ]; then
  pass "a leftover link DIR/step-00000009.tmp.1 -> ELSEWHERE: the link removed, ELSEWHERE intact"
else
  fail "a leftover link: status $rc, ELSEWHERE intact: $(intact && echo yes || echo no), d holds:"; ls -la d elsewhere; cat e.err
fi

# ---- run identity -----------------------------------------------------------
rm -rf d; cp -R ck d
expect "a fresh run into another run's directory" 1 \
  "--checkpoint d: it holds another run's checkpoints (the newest is step-00000002); add --resume to continue that run, or give another directory" \
  ./t --steps 3 --checkpoint d --keep 1
[ "$(ls d)" = step-00000002 ] && cmp -s d/step-00000002/manifest.json ck/step-00000002/manifest.json ||
  fail "the other run's checkpoint changed"
rm -rf d; mkdir -p d/step-00000002; echo mine >d/step-00000002/notes.txt
expect "a step directory without a manifest" 1 \
  "--checkpoint d: d/step-00000002 has no manifest.json, so it is not a checkpoint, and gsl will not replace it; move it away" \
  ./t --steps 2 --checkpoint d
[ "$(cat d/step-00000002/notes.txt)" = mine ] || fail "the user's file in d/step-00000002 changed"
# resumed: the identity continues, its own are pruned, another run's copied in is not
rm -rf d o; cp -R ck d
run o 1 ./t --steps 1 --checkpoint o --seed 0 --quiet
cp -R o/step-00000001 d/step-00000001
other_id=$($PY -c 'import json; print(json.load(open("o/step-00000001/manifest.json"))["run"])')
run e 1 ./t --steps 5 --checkpoint d --checkpoint-every 1 --keep 1 --resume --quiet
got_id=$($PY -c 'import json; print(json.load(open("d/step-00000005/manifest.json"))["run"])' 2>/dev/null)
if [ $rc -eq 0 ] && [ "$(ls d | tr '\n' ' ')" = "step-00000001 step-00000005 " ] && [ "$got_id" = "$run_id" ] &&
   [ "$other_id" != "$run_id" ] && cmp -s d/step-00000001/manifest.json o/step-00000001/manifest.json; then
  pass "a resumed run keeps its identity, prunes its own checkpoints (--keep 1), not another run's"
else
  fail "resume with another run's checkpoint beside: status $rc, run $got_id (want $run_id), d holds:"; ls d; cat e.err
fi

# ---- two jobs on one directory -----------------------------------------------
rm -rf d
timeout "$(scaled 120)" $MPIEXEC -n 1 ./t --steps 100000000 --checkpoint d --checkpoint-every 100000000 --quiet >a.out 2>a.err &
apid=$!
poll_until 20 grep -q '^pid ' d/.lock 2>/dev/null
holder=$(sed -n 's/^pid \([0-9]*\) host .*/\1/p' d/.lock 2>/dev/null)
if [ -n "$holder" ] && [ "$(cat /proc/"$holder"/comm 2>/dev/null)" = t ]; then
  ecode=5 # the lock's refusal: GSLRT_EXIT_BUSY
  expect "a second job on a directory in use" 1 \
    "--checkpoint d: another run has this directory (pid $holder on host $(hostname) holds d/.lock); wait for it to end, or give another directory" \
    ./t --steps 3 --checkpoint d
  ecode=1
  # to the rank itself, as tests/faults.sh signals ranks (and a batch
  # system signals every task): through timeout and mpiexec the signal
  # was once lost under load (the rank ended, status 0, with no checkpoint)
  kill -TERM "$holder"; wait $apid; arc=$?
  if grep -q '^t: stopped by SIGTERM after step [0-9]*/100000000; checkpoint d/step-[0-9]* written' a.err &&
     [ -n "$(ls d | grep '^step-[0-9]*$')" ] && [ -z "$(ls d | grep tmp)" ]; then
    pass "the first job, stopped by SIGTERM, wrote its checkpoint unharmed"
  else
    fail "the first job: status $arc, d holds:"; ls -a d; cat a.out a.err
  fi
else
  fail "the first job holds no lock naming its own process (lock: '$(cat d/.lock 2>/dev/null)')"
fi
apid=

# ---- manifests read by a JSON parser ------------------------------------------
rm -rf d; cp -R ck d
$PY - d/step-00000002/manifest.json <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
json.dump(dict(reversed(list(d.items()))), open(p, "w"), indent=1)
PY
head -2 d/step-00000002/manifest.json | grep -q '^ "tensors": \[$' || fail "the manifest was not re-indented and reordered"
run e 1 ./t --steps 4 --checkpoint d --resume --output w=e.npy
if [ $rc -eq 0 ] && grep -qx "resumed from d/step-00000002 at step 2" e.out && cmp -s e.npy ref.npy; then
  pass "a manifest re-indented (indent=1), its keys reversed: resumed, w as never stopped"
else
  fail "the re-indented manifest: status $rc"; cat e.out e.err
fi

# bad NAME TEXT PYTHON: the manifest changed by PYTHON (on m, the text, or
# d, the document, written back with json.dumps), then resuming must fail
# with "checkpoint b/step-00000002: TEXT"
bad() {
  rm -rf b; cp -R ck b
  $PY - b/step-00000002/manifest.json "$3" <<'PY'
import json, sys
p, code = sys.argv[1], sys.argv[2]
m = open(p).read()
d = json.loads(m)
env = {"m": m, "d": d, "json": json}
exec(code, env)
open(p, "w").write(env["m"] if env["m"] is not m else json.dumps(env["d"], indent=2))
PY
  expect "$1" 1 "checkpoint b/step-00000002: $2" ./t --steps 4 --checkpoint b --resume
}
bad "a fractional step" 'manifest.json: "step" must be a whole number, not 2.9' 'd["step"] = 2.9'
bad "a step of 1e30" 'manifest.json: "step" must be a whole number, not 1e+30' 'd["step"] = 1e30'
bad "a step not the directory's" 'manifest.json: "step" is 3, but the directory is step-00000002' 'd["step"] = 3'
bad "a negative step" 'manifest.json: "step" is -2, not in [0, 9223372036854775807]' 'd["step"] = -2'
bad "junk after the document" 'manifest.json:23:1: end of file expected near '"'"'x'"'"'' 'm = m + "x\n"'
bad "a key given twice" "manifest.json:5:19: duplicate object key near '\"step\"'" \
  'm = m.replace("\"step\": 2,", "\"step\": 2, \"step\": 2,")'
bad "a tensor given twice" 'manifest.json: tensors[0] and tensors[4] both have the name "w"' \
  'd["tensors"].append(d["tensors"][0])'
bad "dtype f64" 'manifest.json: tensors[0].dtype is "f64", not "f32", "i32" or "bf16"' 'd["tensors"][0]["dtype"] = "f64"'
bad "kind bogus" 'manifest.json: tensors[1].kind is "bogus", not "param" or "state"' 'd["tensors"][1]["kind"] = "bogus"'
bad "a dtype not the program's" 'param w is i32[3] there, f32[3] in this program' 'd["tensors"][0]["dtype"] = "i32"'
bad "a kind not the program's" 'w is a state there, a param in this program' 'd["tensors"][0]["kind"] = "state"'
bad "a crc32 out of range" 'manifest.json: tensors[0].crc32 is 4294967296, not in [0, 4294967295]' \
  'd["tensors"][0]["crc32"] = 2**32'
bad "a size as a string" 'manifest.json: tensors[0].bytes must be a whole number, not "140"' \
  'd["tensors"][0]["bytes"] = str(d["tensors"][0]["bytes"])'
bad "a shape of 3.0" 'manifest.json: tensors[0].shape[0] must be a whole number >= 1, not 3.0' \
  'd["tensors"][0]["shape"] = [3.0]'
bad "a file outside the checkpoint" 'manifest.json: tensors[0].file is "../w.npy", not a file name in the checkpoint'"'"'s directory' \
  'd["tensors"][0]["file"] = "../w.npy"'
bad "an unknown field" 'manifest.json: the document has a field "extra", which a checkpoint manifest does not have' \
  'd["extra"] = 1'
bad "an unknown field with a newline" 'manifest.json: tensors[0] has a field "a\x0ab", which a checkpoint manifest does not have' \
  'd["tensors"][0]["a\nb"] = 1'
bad "a name with a control byte" 'manifest.json: tensors[0].name is "w\x01", with a byte that is not printable ASCII' \
  'd["tensors"][0]["name"] = "w\x01"'
bad "a missing field" 'manifest.json: the document has no "seed"' 'del d["seed"]'
bad "a seed as a number" 'manifest.json: "seed" must be a string, not 0' 'd["seed"] = 0'
bad "a seed beyond 2^64" 'manifest.json: "seed" is "18446744073709551616", not a decimal integer from 0 to 18446744073709551615' \
  'd["seed"] = str(2**64)'
bad "another format version" 'manifest.json has format version 1, this runtime reads 2 to 6' 'd["version"] = 1'
bad "a precision not f32 or bf16" 'manifest.json: "precision" is "f16", not "f32" or "bf16"' 'd["precision"] = "f16"'
bad "no precision in version 6" 'manifest.json: the document has no "precision"' 'del d["precision"]'
bad "a precision in version 2" 'manifest.json: format version 2 has no "precision" (it came in 3)' \
  'd["version"] = 2; del d["signals"]; del d["build"]; del d["provenance"]'
bad "no signals in version 6" 'manifest.json: the document has no "signals"' 'del d["signals"]'
bad "signals in version 3" 'manifest.json: format version 3 has no "signals" (they came in 4)' 'd["version"] = 3; del d["build"]; del d["provenance"]'
bad "a build record in version 4" 'manifest.json: format version 4 has no "build" (it came in 5)' \
  'd["version"] = 4; del d["provenance"]'
bad "no build record in version 6" 'manifest.json: the document has no "build"' 'del d["build"]'
bad "a provenance record in version 5" 'manifest.json: format version 5 has no "provenance" (it came in 6)' 'd["version"] = 5'
bad "no provenance record in version 6" 'manifest.json: the document has no "provenance"' 'del d["provenance"]'
bad "a provenance record not an object" 'manifest.json: "provenance" must be an object, not "alice"' 'd["provenance"] = "alice"'
bad "a build record not an object" 'manifest.json: "build" must be an object, not an array' 'd["build"] = []'
bad "signals not an object" 'manifest.json: "signals" must be an object, not an array' 'd["signals"] = []'
bad "a signal not a number" 'manifest.json: signals."lr" must be a number or null, or an array of them, not "0.1"' 'd["signals"]["lr"] = "0.1"'
bad "a run identity not hex" 'manifest.json: "run" is "xyz", not 32 hexadecimal digits' 'd["run"] = "xyz"'
bad "an optimizer not a string" 'manifest.json: "optimizer" must be a string, not an object' 'd["optimizer"] = {}'
# a tensor's file that is a FIFO or a link (to a device that never ends) is refused, not read
for how in fifo link; do
  rm -rf b; cp -R ck b; rm b/step-00000002/w.npy
  if [ $how = fifo ]; then
    mkfifo b/step-00000002/w.npy; want="w.npy is not a regular file"
  else
    ln -s /dev/zero b/step-00000002/w.npy; want="cannot open w.npy: it is a symbolic link"
  fi
  expect "a tensor's file that is a $how" 1 "checkpoint b/step-00000002: $want" ./t --steps 4 --checkpoint b --resume
done
# the crc32 in decimal, as the manifest keeps it (Python's zlib computes it)
crc=$($PY -c 'import zlib; print(zlib.crc32(open("ck/step-00000002/w.npy", "rb").read()))')
bad "a crc32 that does not match" "w.npy has crc32 $crc, the manifest says $((crc ^ 1))" \
  'd["tensors"][0]["crc32"] ^= 1'

# ---- the run's own files inside DIR ------------------------------------------
# inside WHAT OPTION DIR ARGS...: a usage error (status 2) naming OPTION
# as "OPTION is inside the --checkpoint directory DIR", and nothing run
inside() {
  what=$1 opt=$2 dir=$3; shift 3
  run e 1 "$@"
  if [ $rc -eq 2 ] && [ "$(head -1 e.err)" = "t: error: $opt is inside the --checkpoint directory $dir (a run never writes its own files there)" ] &&
     ! grep -q '^step ' e.out; then
    pass "$what: refused"
  else
    fail "$what: status $rc (want 2), stderr:"; cat e.err e.out
  fi
}
rm -rf d lk s2 sub; cp -R ck d; mkdir sub; ln -s d lk; ln -s d/step-00000002 s2
cp d/step-00000002/manifest.json m.keep; cp d/step-00000002/w.npy w.keep
inside "--metrics DIR/step-N/manifest.json, with --resume" "--metrics d/step-00000002/manifest.json" d \
  ./t --steps 4 --checkpoint d --resume --metrics d/step-00000002/manifest.json
inside "--output into DIR/step-N, over a kept tensor" "--output w=d/step-00000002/w.npy" d \
  ./t --steps 4 --checkpoint d --resume --output w=d/step-00000002/w.npy
inside "--output through a link to DIR" "--output w=lk/step-00000002/w.npy" d \
  ./t --steps 4 --checkpoint d --resume --output w=lk/step-00000002/w.npy
inside "--metrics, a new file through a link to DIR/step-N" "--metrics s2/new.jsonl" d \
  ./t --steps 4 --checkpoint d --resume --metrics s2/new.jsonl
inside "--metrics through .." "--metrics sub/../d/new.jsonl" d ./t --steps 4 --checkpoint d --resume --metrics sub/../d/new.jsonl
inside "--checkpoint given as a link, --metrics by the real name" "--metrics d/.lock" lk \
  ./t --steps 4 --checkpoint lk --resume --metrics d/.lock
ln d/step-00000002/manifest.json hard.json
run e 1 ./t --steps 4 --checkpoint d --resume --metrics hard.json
if [ $rc -eq 2 ] && [ "$(head -1 e.err)" = "t: error: --metrics hard.json is another name (a hard link) of d/step-00000002/manifest.json, inside the --checkpoint directory d (a run never writes its own files there)" ]; then
  pass "--metrics, a hard link to DIR/step-N/manifest.json: refused (it would be truncated in place)"
else
  fail "--metrics, a hard link into DIR: status $rc (want 2), stderr:"; cat e.err
fi
rm -f hard.json
inside "without --resume, into a DIR not yet made" "--metrics fresh/m.jsonl" fresh ./t --steps 2 --checkpoint fresh --metrics fresh/m.jsonl
if cmp -s m.keep d/step-00000002/manifest.json && cmp -s w.keep d/step-00000002/w.npy && [ ! -e d/new.jsonl ] &&
   [ ! -e d/step-00000002/new.jsonl ] && [ ! -e fresh ] && [ "$(ls d)" = step-00000002 ]; then
  pass "the refusals touched nothing: the manifest and w.npy as they were, no file made, no DIR made"
else
  fail "a refused run touched DIR:"; ls -la d d/step-00000002
fi
run e 1 ./t --steps 4 --checkpoint d --resume --metrics d.jsonl --output w=dw.npy --quiet
if [ $rc -eq 0 ] && [ -s d.jsonl ] && [ -s dw.npy ] && [ -f d/step-00000004/manifest.json ]; then
  pass "files beside DIR whose names begin with its name (d.jsonl, dw.npy) are written, and DIR resumes"
else
  fail "files beside DIR: status $rc"; cat e.err
fi
exit $status
