# tests/lib.sh — sourced by the shell tests (through tests/hand_prog.sh,
# or directly): time limits that hold on a busy machine.
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
# changed).
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
  wait $lib_own $lib_apart 2>/dev/null
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

measure_slow
