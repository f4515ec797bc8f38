# tests/lib.sh — the one library every shell test sources first (each
# tests/*.sh that make check runs, and tests/run-gsl.sh for each .gsl
# test), as git's test-lib.sh serves its scripts: what each test would
# otherwise write for itself. A test begins
#
#   set -u
#   . "$top_srcdir/tests/lib.sh"
#
# with the environment make check gives it (Makefile.am's
# AM_TESTS_ENVIRONMENT: top_srcdir, GSLC, GSLRUN, NPYTOOL, MPIEXEC, MPICC,
# CC, ...), and ends with `exit $status`. The tests that drive libgslrt
# through a hand-written program then source tests/hand_prog.sh too.
#
# Results. automake's harness reads only the exit status: 0 passed, 1
# failed, 77 skipped. The lines say what was checked.
#   status             0, until a fail
#   fails              how many fails so far (a case's own count: compare
#                      it with its value when the case began)
#   fail MSG           prints "FAIL: MSG", sets status to 1; the test goes on
#   fatal MSG          prints "FAIL: MSG" and exits 1 (what follows cannot run)
#   pass MSG           prints "PASS: MSG"
#   skip WHY           prints "SKIP: WHY" and exits 77: a test that cannot
#                      run here says so, it never passes silently
#
# Scratch and clean-up. One trap, on EXIT; HUP, INT and TERM end the test
# through it (status 129, 130, 143), so an interrupted run leaves nothing
# behind. A test sets no trap of its own: it registers what must be undone.
# (A command started with & keeps this shell's handlers until it execs: a
# TERM sent to it in that instant is caught and lost, so a test signals a
# job once it is running, as the tests do, never the instant after the &.)
#   work               a new directory, ${TMPDIR:-/tmp}/gslNAME.XXXXXX
#                      (NAME the test's), removed on every exit (made
#                      writable first: a test may leave a read-only
#                      directory in it); the test cds into it if it wants
#   at_exit CMD        CMD (one string, evaluated on exit: variables are
#                      read then) run before work is removed: processes
#                      to kill, hosts to tear down; the last registered
#                      runs first; the test's exit status is kept
#
# MPI. MPIEXEC is configure's under make check; run by hand, the mpiexec
# on PATH. A job is started as $MPIEXEC -n NP PROGRAM ARGS, under timeout.
#   descendants PID    PID's descendants, each before its own
#   rank_in PID R      the pid of MPI rank R (PMI_RANK in its environment)
#                      among PID's descendants
#
# Time limits that hold on a busy machine.
#
# A time limit in a test is a guard against a hang, never a measure of
# speed. A machine shared with other work runs a test's processes several
# times slower than an idle one: on 2 cores beside six busy loops, a
# process gets two sevenths of a core at most. So every limit is written
# as what it would be on an idle machine and multiplied by a factor
# measured as the share of a core a CPU-bound process gets here now: its
# CPU time over 0.4 s of wall time. The measure is of the machine's load,
# not of its speed (a slow idle machine measures 1), and is taken as this
# file is sourced (measure_slow takes it again, where the load may have
# changed), unless the test set untimed=1 before (tests/run-gsl.sh, run
# once per .gsl test, scales no limit: it spares the half second).
#
# Two processes are measured at once, one in the test's session and one
# in a session of its own, as mpiexec starts each rank (hydra's proxy and
# every rank call setsid): where the kernel groups each session's
# processes for the scheduler (sched_autogroup_enabled), a session's
# processes share one group's CPU time, so busy loops started in the
# test's session slow its shell, gslc and mpiexec many times more than
# the ranks (on 2 cores, 15 times against 2, measured).
#
#   now                the time, in seconds since the epoch, to the ns
#   secs A B           B - A, to 0.01 s
#   measure_slow       sets slow_ranks, how many times an idle core the
#                      share of a process in a session of its own is, and
#                      slow, the larger of that and the same for a process
#                      of the test's session (each rounded, 1 to 50)
#   scaled N           N seconds times slow (an integer)
#   poll_until N CMD.. runs CMD every 0.05 s until it succeeds, for at most
#                      scaled N seconds; 0 once it has, else 1

status=0
fails=0
fail() { echo "FAIL: $*"; status=1; fails=$((fails + 1)); }
fatal() { echo "FAIL: $*"; exit 1; }
pass() { echo "PASS: $*"; }
skip() { echo "SKIP: $*"; exit 77; }

lib_hooks=""
at_exit() {
  lib_hooks="$1
$lib_hooks"
}
# (set +e: a test under set -e still runs every hook and removes work)
lib_exit() {
  set +e
  eval "$lib_hooks"
  chmod -R u+w "$work" 2>/dev/null
  rm -rf "$work"
}
work=$(mktemp -d "${TMPDIR:-/tmp}/gsl$(basename "$0" .sh).XXXXXX") || fatal "mktemp -d failed"
trap lib_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

: "${MPIEXEC:=mpiexec}"

descendants() { for lib_c in $(pgrep -P "$1"); do echo "$lib_c"; descendants "$lib_c"; done; }
rank_in() {
  for lib_x in $(descendants "$1"); do
    tr '\0' '\n' <"/proc/$lib_x/environ" 2>/dev/null | grep -qx "PMI_RANK=$2" && echo "$lib_x"
  done
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# the user and system ticks of process $1 so far (fields 14 and 15 of
# /proc/PID/stat; its name, field 2, is "(awk)", without spaces)
lib_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

measure_slow() {
  awk 'BEGIN { for (;;) ; }' </dev/null >/dev/null 2>&1 &
  lib_own=$!
  setsid awk 'BEGIN { for (;;) ; }' </dev/null >/dev/null 2>&1 & # no job control: setsid execs, no fork
  lib_apart=$!
  sleep 0.1 # their start (exec and awk's own) left out
  lib_o0=$(lib_ticks $lib_own) lib_a0=$(lib_ticks $lib_apart) lib_t0=$(now)
  sleep 0.4
  lib_o1=$(lib_ticks $lib_own) lib_a1=$(lib_ticks $lib_apart) lib_t1=$(now)
  kill $lib_own $lib_apart 2>/dev/null
  wait $lib_own $lib_apart 2>/dev/null || : # their status is the kill's
  set -- $(awk -v o="$((lib_o1 - lib_o0))" -v a="$((lib_a1 - lib_a0))" -v t="$lib_t0 $lib_t1" \
    -v hz="$(getconf CLK_TCK)" '
    function factor(ticks, share, f) {
      share = ticks / hz / wall
      f = share > 0.02 ? int(1 / share + 0.5) : 50
      return f < 1 ? 1 : (f > 50 ? 50 : f)
    }
    BEGIN { split(t, w, " "); wall = w[2] - w[1]; print factor(o), factor(a) }')
  slow_ranks=$2
  slow=$(($1 > $2 ? $1 : $2))
}

scaled() { echo $(($1 * slow)); }

poll_until() {
  lib_n=$(($(scaled "$1") * 20))
  shift
  lib_i=0
  until "$@"; do
    lib_i=$((lib_i + 1))
    [ $lib_i -lt $lib_n ] || return 1
    sleep 0.05
  done
}

[ "${untimed:-0}" = 1 ] || measure_slow
