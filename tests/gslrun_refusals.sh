#!/bin/sh
# tests/gslrun_refusals.sh — what gslrun and a program refuse, and what
# they then leave alone (issue 43, items 1 to 5):
#
#   (a) gslrun never writes its records into a checkpoint: a --metrics
#       FILE inside the --checkpoint directory, by name or through a
#       symbolic link, is refused (status 2) before the job starts, the
#       manifest it names is byte for byte as it was, and --resume from it
#       still works;
#   (b) nor a file the program refused: a job ending in a usage error
#       leaves an existing --metrics file as it was;
#   (c) a second job on a --checkpoint directory a running job holds is
#       refused by the lock with status 5, as a plain mpirun job and under
#       gslrun alike, before it opens the --metrics file: the running
#       job's records (its provenance first) are untouched, and gslrun
#       neither writes nor restarts;
#   (d) a job that can never start is not started or restarted: no such
#       file, a directory, no x bit, a name not on PATH (gslrun's own
#       check), and an interpreter that does not exist (hydra's execvp
#       error): status 1, one message, no "restart";
#   (e) hostfiles: a line of 0 slots is refused naming the file and the
#       line, a file of comments only says there are no hosts; status 1,
#       nothing compiled or started;
#   (f) the watchdog covers the start-up: a rank stopped before MPI_Init
#       (a wrapper stops itself before it execs the program) ends the job
#       with status 4 and the start-up's message, and no process of the
#       job is left;
#   (g) a name of more than 18 digits, step-0000000000000000009, is no
#       checkpoint to the program or to gslrun (runtime/ckdir.c, which
#       both link): a resume that fails (another --seed) is restarted
#       from step-00000002, the one the program read (before, gslrun
#       read every digit and took the 19-digit name, step 9, for the
#       newest); a --quiet resume, whose first step gslrun knows from
#       DIR alone, records first_step 2 and logs step 3 first; the entry
#       is left as it was.
#
# Every run is under timeout as a guard against a hang, never as a
# measure of speed.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
hand_prog gslrun "${GSLRUN:-gslrun}"
gslrun=$bin
guard=300 # seconds: only a hang comes near it

cat >one.gsl <<'EOF'
param w: f32[4] = ones()
input x: f32[4] = normal(1.0)
let y = w * x
output y
train sum(y * y, 0) with sgd(lr = 0.01)
EOF
cat >two.gsl <<'EOF'
mesh [d = 2]
param w: f32[4] split(0) = ones()
input x: f32[4] = normal(1.0)
let y = w * x
output y
train sum(y * y, 0) with sgd(lr = 0.01)
EOF
$GSLC one.gsl -o one && $GSLC two.gsl -o two || fatal "gslc"

# no_restart FILE: gslrun's stderr FILE says nothing of a restart or a second segment
no_restart() { ! grep -q -e 'restart [0-9]' -e 'segment 2' "$1"; }

# (a) --metrics into the checkpoint: by name, through a link
timeout $guard $MPIEXEC -n 1 ./one --steps 2 --checkpoint ck --quiet || fail "(a) the first run"
man=ck/step-00000002/manifest.json
cp "$man" man.orig
timeout $guard "$gslrun" -np 1 ./one --steps 4 --checkpoint ck --resume --metrics "$man" >a1.out 2>a1.err
rc=$?
if [ $rc -eq 2 ] && cmp -s man.orig "$man" &&
  grep -qx "gslrun: error: --metrics $man is inside the --checkpoint directory ck (a run never writes its own files there); not starting" a1.err &&
  ! grep -q 'segment 1' a1.err; then
  pass "(a) --metrics naming a manifest: refused before the start (status 2), the manifest untouched"
else
  fail "(a) --metrics naming a manifest (status $rc)"; cat a1.err
fi
ln -s "$man" link.json
timeout $guard "$gslrun" -np 1 ./one --steps 4 --checkpoint ck --resume --metrics link.json >a2.out 2>a2.err
rc=$?
if [ $rc -eq 2 ] && cmp -s man.orig "$man" && grep -q 'link.json is inside the --checkpoint directory ck' a2.err; then
  pass "(a) --metrics through a link into the checkpoint: refused (status 2), the manifest untouched"
else
  fail "(a) --metrics through a link (status $rc)"; cat a2.err
fi
if timeout $guard "$gslrun" -np 1 ./one --steps 4 --checkpoint ck --resume --metrics m.jsonl >a3.out 2>a3.err &&
  grep -q '^resumed from ck/step-00000002' a3.out && grep -q '"gslrun":"completed"' m.jsonl; then
  pass "(a) the checkpoint still resumes"
else
  fail "(a) the checkpoint no longer resumes"; cat a3.err
fi

# (b) a file the program refused (a usage error: an output it does not have)
printf 'precious\n' >kept.json
timeout $guard "$gslrun" -np 1 ./one --steps 1 --metrics kept.json --output nosuch=x.npy >b.out 2>b.err
rc=$?
if [ $rc -eq 2 ] && [ "$(cat kept.json)" = precious ] && no_restart b.err; then
  pass "(b) a usage error: the --metrics file the program never opened is left as it was"
else
  fail "(b) (status $rc): kept.json now holds: $(head -c 300 kept.json)"; cat b.err
fi

# (c) the lock: a second job on a directory a running job holds
timeout $guard $MPIEXEC -n 2 ./two --steps 100000000 --log-every 100 --checkpoint ckl --checkpoint-every 100000000 \
  --metrics ml.jsonl --quiet >c0.out 2>c0.err &
jpid=$!
i=0
while ! grep -q provenance ml.jsonl 2>/dev/null && [ $i -lt $((guard * 10)) ]; do sleep 0.1; i=$((i + 1)); done
grep -q provenance ml.jsonl || fail "(c) the running job wrote no first record"
head -c 400 ml.jsonl >ml.head
timeout $guard $MPIEXEC -n 2 ./two --steps 10 --checkpoint ckl --metrics ml.jsonl --quiet >c1.out 2>c1.err
rc1=$?
timeout $guard "$gslrun" -np 2 ./two --steps 10 --checkpoint ckl --metrics ml.jsonl --quiet >c2.out 2>c2.err
rc2=$?
sleep 0.5 # the running job writes on: its records since must follow the first ones
head -c 400 ml.jsonl >ml.after
kill -TERM $jpid 2>/dev/null
wait $jpid
nuls=$(tr -cd '\000' <ml.jsonl | wc -c)
if [ $rc1 -eq 5 ] && grep -q 'error: --checkpoint ckl: another run has this directory (pid [0-9]* on host ' c1.err &&
  cmp -s ml.head ml.after && [ "$nuls" -eq 0 ]; then
  pass "(c) a second job on a held directory: status 5 before it opens --metrics; the first job's records whole"
else
  fail "(c) the second plain job (status $rc1, $nuls NUL bytes)"; cat c1.err; od -c ml.after | head -5
fi
if [ $rc2 -eq 5 ] && grep -q 'another run has this directory' c2.err &&
  grep -q '^gslrun: segment 1 was refused: another run holds the --checkpoint directory ckl' c2.err && no_restart c2.err &&
  ! grep -q '"gslrun"' ml.jsonl; then
  pass "(c) gslrun refused by the lock: status 5 at once, no restart, no record written"
else
  fail "(c) the second job under gslrun (status $rc2)"; cat c2.err
fi

# (d) jobs that can never start
mkdir adir
cp one noexec && chmod -x noexec
printf '#!/nonexistent/interpreter\n' >badinterp && chmod +x badinterp
for p in ./no-such:'no such file' ./adir:'it is a directory' ./noexec:'it is not executable' \
  one:'no one on PATH (mpirun runs a name without '"'/'"' from PATH only; give ./one for the file here)' \
  ./badinterp:'the job could not be started: the program cannot be run: mpirun'"'"'s execvp error on file ./badinterp'; do
  prog=${p%%:*} why=${p#*:}
  timeout $guard "$gslrun" -np 1 "$prog" --steps 1 >d.out 2>d.err
  rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$why" d.err && no_restart d.err && ! grep -q 'signal' d.err; then
    pass "(d) $prog: not started, not restarted, status 1"
  else
    fail "(d) $prog (status $rc)"; cat d.err
  fi
done

# (e) hostfiles
printf '# the cluster\nlocalhost:2\nn2:0\n' >hf0
printf '# nothing here yet\n\n   # nor here\n' >hfc
timeout $guard "$gslrun" --hostfile hf0 -np 2 two.gsl -- --steps 1 >e1.out 2>e1.err
rc1=$?
timeout $guard "$gslrun" --hostfile hfc -np 2 two.gsl -- --steps 1 >e2.out 2>e2.err
rc2=$?
if [ $rc1 -eq 1 ] && [ "$(cat e1.err)" = "gslrun: error: --hostfile hf0:3: 'n2:0': 0 slots; a host needs at least 1 (leave the line out to use none of it)" ] &&
  [ $rc2 -eq 1 ] && [ "$(cat e2.err)" = "gslrun: error: no hosts in hfc (only comments and blank lines)" ]; then
  pass "(e) a host of 0 slots refused naming its line; a hostfile of comments has no hosts"
else
  fail "(e) hostfiles (status $rc1, $rc2)"; cat e1.err e2.err
fi

# (f) a rank stopped before MPI_Init
cat >stop1 <<'EOF'
#!/bin/sh
# rank 1 stops itself before it runs the program: before MPI_Init
[ "$PMI_RANK" = 1 ] && kill -STOP $$
exec "$@"
EOF
chmod +x stop1
timeout $guard $MPIEXEC -n 2 ./stop1 "$work/two" --steps 2 --collective-timeout 3 >f.out 2>f.err
rc=$?
sleep 1
left=$(pgrep -f "$work/two" | wc -l)
if [ $rc -eq 4 ] && grep -q '^two: rank 0: error: the start-up (MPI_Init and the run'"'"'s communicator) did not complete within 3 s' f.err &&
  [ "$left" -eq 0 ]; then
  pass "(f) a rank stopped before MPI_Init: status 4 by the start-up's deadline, no rank left"
else
  fail "(f) (status $rc, $left processes left)"; cat f.err
  pkill -KILL -f "$work/two"
fi

# (g) a name of 19 digits beside a checkpoint
timeout $guard $MPIEXEC -n 1 ./one --steps 2 --checkpoint ckg --quiet || fail "(g) the first run"
cp -R ckg/step-00000002 ckg/step-0000000000000000009
cp ckg/step-00000002/manifest.json g.orig
timeout $guard "$gslrun" --max-restarts 1 --backoff 0.1 -np 1 ./one --steps 4 --checkpoint ckg --resume --seed 12345 \
  >g1.out 2>g1.err
rc=$?
if [ $rc -eq 1 ] && grep -q 'error: checkpoint ckg/step-00000002: it was saved with --seed [0-9]*, not 12345' g1.err &&
  grep -q '^gslrun: restart 1 of 1 in 0.1 s: resuming from ckg/step-00000002 (step 2); ' g1.err &&
  ! grep -q 'step-0000000000000000009' g1.err; then
  pass "(g) a name of 19 digits: a failed resume restarted from step-00000002, the one the program read"
else
  fail "(g) a name of 19 digits, a failed resume (status $rc)"; cat g1.err
fi
timeout $guard "$gslrun" -np 1 ./one --steps 4 --checkpoint ckg --resume --quiet --metrics g.jsonl >g2.out 2>g2.err
rc=$?
if [ $rc -eq 0 ] && grep -q '^{"gslrun":"completed","segment":1,"mesh":null,"np":1,"first_step":2,' g.jsonl &&
  [ "$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' g.jsonl | head -1)" = 3 ] &&
  cmp -s g.orig ckg/step-0000000000000000009/manifest.json; then
  pass "(g) a name of 19 digits: a --quiet resume records first_step 2, the entry left as it was"
else
  fail "(g) a name of 19 digits, a --quiet resume (status $rc)"; cat g2.err; cat g.jsonl
fi

exit $status
