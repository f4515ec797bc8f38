#!/bin/sh
# tests/provenance_run.sh — a run's provenance for audit (issue 33, item
# 5; runtime/provenance.c, man/gslrun.7 CHECKPOINTS and LOG AND METRICS)
# and the modes of the files a run creates, end to end on 2 ranks:
#
#   - a program importing nn and training with sgd, compiled by gslc, run
#     with --checkpoint, --metrics and an --output whose name has a space,
#     quotes and an "é": the manifest's "provenance" and the first metrics
#     record's are the same object, and each field is checked against what
#     the test finds by itself: the user (id -un, id -u), each rank's host
#     (hostname, twice), gslc's version (gslc --version), the program, each
#     source read (the program, stdlib/nn.gsl, stdlib/optim.gsl, in that
#     order) with the SHA-256 sha256sum gives it and the SHA-256 of their
#     bytes one after another (as tests/provenance.sh finds gslc hashes
#     them), the binary's path and sha256sum, argv exactly as run, and a
#     start time (UTC, ISO 8601) within the seconds the test saw the run
#     start and end; no later metrics record has one;
#   - resumed (--resume) with a byte that is not UTF-8 in an argument: the
#     new checkpoint's provenance is the resumed run's (its argv, that byte
#     as U+FFFD, its start time), and so is its first metrics record;
#   - the same run under umask 077 and under umask 022: every file created
#     (the --checkpoint directory, DIR/.lock, DIR/step-N, its manifest and
#     its tensor written through MPI-IO, the --metrics file, the --output
#     file) has mode 0666 or 0777 less the umask, never more open; an
#     existing --metrics file is truncated in place and keeps its mode;
#   - run by a uid without a name (as root, through setpriv): "user" is
#     the uid in decimal.
set -u
. "$top_srcdir/tests/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
cd "$work" || exit 1
cat >p.gsl <<'GSL'
import "nn"
mesh [d = 2]
param w: f32[4] split(0) = ones()
input x: f32[4] = ones()
train mse(w * x, x * 2.0) with sgd(lr = 0.1)
output w
GSL
"$GSLC" p.gsl -o p || { fail "gslc p.gsl"; exit 1; }
stdlib=$(dirname "$GSLC")/stdlib
[ -f "$stdlib/nn.gsl" ] || stdlib=$top_srcdir/stdlib
h() { sha256sum "$1" | cut -c1-64; }
all=$(cat p.gsl "$stdlib/nn.gsl" "$stdlib/optim.gsl" | sha256sum | cut -c1-64)
version=$("$GSLC" --version | head -1 | awk '{print $NF}')

# check MANIFEST METRICS T0 T1 ARGV...: the provenance in both, against
# what this script found; ARGV the command line as run
check() {
  $PY - "$@" <<'PY'
import calendar, json, os, sys, time
manifest, metrics, t0, t1, user, uid, host, version, p, nn, optim, all_, exe, exe_sha = sys.argv[1:15]
argv = [a.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for a in sys.argv[15:]]
m = json.load(open(manifest))
assert m["version"] == 6, m["version"]
prov = m["provenance"]
lines = [json.loads(l) for l in open(metrics, encoding="utf-8")]
assert lines and lines[0].get("provenance") == prov, (lines[0], prov)
assert all("provenance" not in l for l in lines[1:]), lines
assert list(prov) == ["user", "uid", "hosts", "gslc_version", "program", "sources", "source_sha256", "binary",
                      "binary_sha256", "argv", "started"], list(prov)
assert prov["user"] == user and prov["uid"] == int(uid), (prov["user"], prov["uid"])
assert prov["hosts"] == [host, host], prov["hosts"]
assert prov["gslc_version"] == version and prov["program"] == "p.gsl", prov
files = [(os.path.basename(s["file"]), s["sha256"]) for s in prov["sources"]]
assert files == [("p.gsl", p), ("nn.gsl", nn), ("optim.gsl", optim)], files
assert prov["source_sha256"] == all_, prov["source_sha256"]
assert prov["binary"] == exe and prov["binary_sha256"] == exe_sha, (prov["binary"], prov["binary_sha256"])
assert prov["argv"] == argv, (prov["argv"], argv)
started = calendar.timegm(time.strptime(prov["started"], "%Y-%m-%dT%H:%M:%SZ"))
assert int(t0) <= started <= int(t1), (t0, prov["started"], t1)
PY
}

exe=$(realpath p)
t0=$(date -u +%s)
timeout 120 $MPIEXEC -n 2 ./p --steps 3 --log-every 1 --quiet --checkpoint ck --metrics m.jsonl \
  --output 'w=out "q" é.npy' || fail "p --steps 3: status $?"
t1=$(date -u +%s)
if check ck/step-00000003/manifest.json m.jsonl "$t0" "$t1" "$(id -un)" "$(id -u)" "$(hostname)" "$version" \
   "$(h p.gsl)" "$(h "$stdlib/nn.gsl")" "$(h "$stdlib/optim.gsl")" "$all" "$exe" "$(h p)" \
   ./p --steps 3 --log-every 1 --quiet --checkpoint ck --metrics m.jsonl --output 'w=out "q" é.npy'; then
  pass "the manifest and the first metrics record hold the user, hosts, gslc, sources, binary, argv and start"
else
  fail "the provenance of the first run:"; cat ck/step-00000003/manifest.json; head -1 m.jsonl
fi

# resumed: the provenance is the new run's
bad=$(printf 'm\377.jsonl')
sleep 1 # a start time the first run's cannot be
t0=$(date -u +%s)
timeout 120 $MPIEXEC -n 2 ./p --steps 4 --quiet --checkpoint ck --resume --metrics "$bad" ||
  fail "p --resume: status $?"
t1=$(date -u +%s)
if check ck/step-00000004/manifest.json "$bad" "$t0" "$t1" "$(id -un)" "$(id -u)" "$(hostname)" "$version" \
   "$(h p.gsl)" "$(h "$stdlib/nn.gsl")" "$(h "$stdlib/optim.gsl")" "$all" "$exe" "$(h p)" \
   ./p --steps 4 --quiet --checkpoint ck --resume --metrics "$bad"; then
  pass "a resumed run's checkpoint and metrics hold its own provenance (a byte not UTF-8 as U+FFFD)"
else
  fail "the provenance of the resumed run:"; cat ck/step-00000004/manifest.json; head -1 "$bad"
fi

# modes: under umask U, every file created by the run is 0666 & ~U, every
# directory 0777 & ~U
for u in 077 022; do
  rm -rf ck m.jsonl o.npy
  (umask $u && timeout 120 $MPIEXEC -n 2 ./p --steps 2 --quiet --checkpoint ck --metrics m.jsonl --output w=o.npy) ||
    fail "umask $u: status $?"
  f=$(printf '%o' $((0666 & ~0$u))); d=$(printf '%o' $((0777 & ~0$u)))
  got=$(stat -c '%n %a' ck ck/.lock ck/step-00000002 ck/step-00000002/manifest.json ck/step-00000002/w.npy \
        m.jsonl o.npy)
  want=$(printf '%s\n' "ck $d" "ck/.lock $f" "ck/step-00000002 $d" "ck/step-00000002/manifest.json $f" \
         "ck/step-00000002/w.npy $f" "m.jsonl $f" "o.npy $f")
  if [ "$got" = "$want" ]; then
    pass "umask $u: directories $d, files $f"
  else
    fail "umask $u: modes, want:"; echo "$want"; echo "got:"; echo "$got"
  fi
done
# an existing --metrics file is truncated in place: its mode stays
rm -rf ck && : >kept.jsonl && chmod 640 kept.jsonl
(umask 077 && timeout 120 $MPIEXEC -n 2 ./p --steps 1 --quiet --metrics kept.jsonl) || fail "kept.jsonl: status $?"
[ "$(stat -c %a kept.jsonl)" = 640 ] && [ -s kept.jsonl ] && pass "an existing --metrics file keeps its mode" ||
  fail "an existing --metrics file: mode $(stat -c %a kept.jsonl)"

# a user without a name (as root: setpriv to a uid without a passwd entry): "user" is the uid in decimal
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
  u=4242
  while getent passwd $u >/dev/null; do u=$((u + 1)); done
  chmod 711 "$work" && mkdir nameless && chmod 777 nameless && cp p nameless/
  (cd nameless && timeout 120 setpriv --reuid $u --regid $u --clear-groups env HOME="$work/nameless" \
    $MPIEXEC -n 2 ./p --steps 1 --quiet --metrics m.jsonl) || fail "uid $u: status $?"
  if $PY -c 'import json, sys; p = json.loads(open(sys.argv[1]).readline())["provenance"]
assert p["user"] == sys.argv[2] and p["uid"] == int(sys.argv[2]), p' nameless/m.jsonl $u; then
    pass "uid $u, which has no name: the user is the uid"
  else
    fail "uid $u without a name: $(head -1 nameless/m.jsonl)"
  fi
else
  echo "note: not root: a user without a name is not tried"
fi
exit $status
