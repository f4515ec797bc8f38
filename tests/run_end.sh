#!/bin/sh
# tests/run_end.sh — how a run ends when MPI does not let it (issue 45,
# items 1 and 2, on one host), with tests/mpi_hang.c preloaded to make a
# call never return:
#
#   (a) MPI_Finalize never returns on either rank, after a run whose steps,
#       checkpoint and output were written: the job ends with status 0,
#       each rank saying so in one warning line, and the output and the
#       checkpoint are those of a run without the hang, byte for byte;
#   (a2) MPI_Finalize ended from inside after the work: an exit(1) on rank
#       0 (MPICH's error handler), a SIGHUP on rank 1: status 0, a warning
#       from each rank, output and checkpoint whole;
#   (a3) under gslrun, a rank SIGKILLed inside MPI_Finalize after the
#       work: mpirun's status is not 0, gslrun warns, ends 0, no restart;
#   (b) the same after a usage error: status 2, the run's own;
#   (c) MPI_Abort never returns: a rank stopped mid-run, the watchdog ends
#       the job, and the rank whose MPI_Abort hangs ends itself (status 4)
#       GSLRT_ABORT_GRACE (5) s later; no process of the job is left;
#   (d) the launcher gone: hydra's proxy killed, the ranks it started end
#       with it (the kernel's parent-death signal) instead of training on.
#
# Every run is under timeout as a guard against a hang, never as a
# measure of speed; the times are printed.
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1
guard=300
# left: how many processes run the test's program
left() { pgrep -f "$work/two" | wc -l; }

$CC -shared -fPIC $(pkg-config --cflags mpich) "$top_srcdir/tests/mpi_hang.c" -o mpi_hang.so ||
  fatal "cannot build tests/mpi_hang.c"
cat >two.gsl <<'EOF'
mesh [d = 2]
param w: f32[4] split(0) = ones()
input x: f32[4] = normal(1.0)
let y = w * x
output y
train sum(y * y, 0) with sgd(lr = 0.01)
EOF
$GSLC two.gsl -o two || fatal "gslc"
T=$(scaled 2) # --collective-timeout: 2 s on an idle machine, more on a busy one (tests/lib.sh)

# (a) MPI_Finalize hangs after the work is done
timeout $guard $MPIEXEC -n 2 ./two --steps 3 --quiet --checkpoint ref --output y=ref.npy || fail "(a) the plain run"
t0=$(now)
HANG_FINALIZE=0,1 LD_PRELOAD=$work/mpi_hang.so timeout $guard $MPIEXEC -n 2 ./two --steps 3 --quiet \
  --collective-timeout $T --checkpoint ck --output y=y.npy >a.out 2>a.err
rc=$?
took=$(secs "$t0" "$(now)")
warned=$(grep -c "^two: rank [01]: warning: MPI_Finalize did not return within $T s; the run's work is done (its steps, checkpoint and outputs written) and agreed: this rank ends itself with status 0$" a.err)
if [ $rc -eq 0 ] && [ "$warned" -eq 2 ] && cmp -s ref.npy y.npy &&
  cmp -s ref/step-00000003/w.npy ck/step-00000003/w.npy; then
  pass "(a) MPI_Finalize never returns after the work: status 0, two warnings, output and checkpoint whole ($took s)"
else
  fail "(a) status $rc, $warned warnings"; cat a.err
fi

# (a2) MPI_Finalize ends the rank from inside after the work is done: an
# exit(1) on rank 0, a SIGHUP on rank 1
EXIT_FINALIZE=0 HUP_FINALIZE=1 LD_PRELOAD=$work/mpi_hang.so timeout $guard $MPIEXEC -n 2 ./two --steps 3 --quiet \
  --collective-timeout $T --checkpoint ck2 --output y=y2.npy >a2.out 2>a2.err
rc=$?
warned=$(grep -c "^two: rank [01]: warning: MPI_Finalize was ended from inside (an exit, or a signal from the process manager); the run's work is done (its steps, checkpoint and outputs written) and agreed: this rank ends with status 0$" a2.err)
if [ $rc -eq 0 ] && [ "$warned" -eq 2 ] && cmp -s ref.npy y2.npy && cmp -s ref/step-00000003/w.npy ck2/step-00000003/w.npy; then
  pass "(a2) MPI_Finalize ends a rank by exit(1) and one by SIGHUP after the work: status 0, two warnings"
else
  fail "(a2) status $rc, $warned warnings"; cat a2.err
fi

# (a3) under gslrun, a rank killed (SIGKILL, which nothing can catch)
# inside MPI_Finalize after the work is done: mpirun's status is not 0,
# but the runtime said the work was done and agreed: gslrun says so in a
# warning, ends 0 and does not restart
KILL_FINALIZE=1 LD_PRELOAD=$work/mpi_hang.so timeout $guard "$GSLRUN" --max-restarts 2 --backoff 0.1 -np 2 ./two \
  --steps 3 --quiet --collective-timeout $T --checkpoint ck3 >a3.out 2>a3.err
rc=$?
if [ $rc -eq 0 ] && grep -q "^gslrun: warning: segment 1: mpirun's status [1-9][0-9]* came after every rank's work was done and agreed" a3.err &&
  ! grep -q "segment 2" a3.err && ! grep -q "gslrun-ranks" a3.out a3.err; then
  pass "(a3) gslrun: a rank SIGKILLed in MPI_Finalize after the work: a warning, status 0, no restart"
else
  fail "(a3) gslrun's status $rc"; cat a3.err
fi

# (b) ... after a usage error
HANG_FINALIZE=0,1 LD_PRELOAD=$work/mpi_hang.so timeout $guard $MPIEXEC -n 2 ./two --steps 3 --collective-timeout $T \
  --output nosuch=n.npy >b.out 2>b.err
rc=$?
if [ $rc -eq 2 ] && grep -q "^two: rank 0: warning: MPI_Finalize did not return within $T s; the run ends with status 2" b.err; then
  pass "(b) MPI_Finalize never returns after a usage error: status 2, the run's own"
else
  fail "(b) status $rc"; cat b.err
fi

# (c) MPI_Abort hangs on the rank the watchdog ends
HANG_ABORT=0 LD_PRELOAD=$work/mpi_hang.so timeout $guard $MPIEXEC -n 2 ./two --steps 100000000 --log-every 1000 \
  --collective-timeout $T >c.out 2>c.err &
job=$!
i=0
while ! grep -q '^step ' c.out && [ $i -lt $((guard * 10)) ]; do sleep 0.1; i=$((i + 1)); done
r1=$(rank_in $job 1)
t0=$(now)
[ -n "$r1" ] && kill -STOP "$r1"
wait $job
rc=$?
took=$(secs "$t0" "$(now)")
sleep 1
n=$(left)
# hydra's status: rank 0's 4, or 9 where it reports the stopped rank it killed
if [ -n "$r1" ] && { [ $rc -eq 4 ] || [ $rc -eq 9 ]; } &&
  grep -q "^two: rank 0: warning: MPI_Abort did not return within 5 s; the process manager may be out of reach: this rank ends itself with status 4" c.err &&
  [ "$n" -eq 0 ]; then
  pass "(c) MPI_Abort never returns: the rank ends itself, status 4, no process left ($took s from the stop; deadline $T s, grace 5 s)"
else
  fail "(c) status $rc, $n processes left"; cat c.err
  pkill -KILL -f "$work/two"
fi

# (d) the launcher gone
timeout $guard $MPIEXEC -n 2 ./two --steps 100000000 --log-every 1000 >d.out 2>d.err &
job=$!
i=0
while ! grep -q '^step ' d.out && [ $i -lt $((guard * 10)) ]; do sleep 0.1; i=$((i + 1)); done
r0=$(rank_in $job 0)
proxy=$(ps -o ppid= -p "$r0" 2>/dev/null | tr -d ' ')
t0=$(now)
[ -n "$proxy" ] && kill -KILL "$proxy"
i=0
while [ "$(left)" -gt 0 ] && [ $i -lt $((guard * 10)) ]; do sleep 0.1; i=$((i + 1)); done
took=$(secs "$t0" "$(now)")
n=$(left)
if [ -n "$proxy" ] && [ "$n" -eq 0 ]; then
  pass "(d) hydra's proxy killed: its ranks ended with it ($took s)"
else
  fail "(d) the proxy ($proxy) killed: $n processes of the job left"
  pkill -KILL -f "$work/two"
fi
wait $job 2>/dev/null

exit $status
