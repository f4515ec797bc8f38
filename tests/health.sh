#!/bin/sh
# tests/health.sh — the watchdog over collectives and each rank's pace
# (runtime/health.c), through a compiled program whose step is one matrix
# product contracted over the split dimension, summed over its rows, and
# then the all_reduce of the partial sums (t.gsl line 8): compute, then one
# small collective a step.
#
# Time limits are tests/lib.sh's: each written as on an idle machine and
# scaled by slow, the machine's load measured before each run the watchdog
# ends. So is the watchdog's deadline, T = 3 s times slow_ranks (a healthy
# job's collectives, a checkpoint of 64 MiB among them, wait longer where
# its ranks are slowed, and must not trip it), and the time the job may
# take to end after a rank is stopped, T + 5 s times slow (the watchdog's
# T, then the abort through mpiexec, in the test's session).
#
#   (a) a rank SIGSTOPped while the run is in its steps, under
#       --collective-timeout T, on 3 ranks (and on 2): the job ends within
#       T + 5 s with the watchdog's status 4 (stopped as step 30 is logged,
#       5 steps after the checkpoint of step 25, 20 before the next and 30
#       before the next log line's gather); every message names the
#       all_reduce, t.gsl:8, its group (d), which ranks had arrived and
#       which had not (or that every member had), and rank 1, only it, as
#       silent since; rank 1 prints nothing. (A stop
#       between the all_reduce and the runtime's check for a stop signal
#       after the step names that check: tried again, up to 5 times.) The time
#       from the stop to the end of the job, and the steps lost since the
#       newest checkpoint (--checkpoint-every 25), are printed.
#   (b) rank 1 slowed by the test (SIGSTOP and SIGCONT, 50 ms stopped of
#       every 100 ms) on 2 ranks, 12 log windows of 10 steps (each some
#       3 duty cycles on an idle machine, more on a busy one): after the
#       first 2 windows most name rank 1 the slowest with a score under
#       0.7 (log line and --metrics alike), and rank 0 warns, naming it,
#       only it:
#       "t2: warning: rank 1 on host H computes X times slower than rank 0"
#       (again only after it kept pace for 3 windows in a row).
#   (c) the same run unslowed: no warning, and the median window's score
#       is near 1 (at least 0.8: the test machine is shared), in one of 3
#       tries (other work may slow a rank for seconds).
#   (d) rank 1 SIGSTOPped while the checkpoint of step 8 is written (its
#       temporary directory seen, then 0, 0.05 or 0.15 s later), on 2
#       ranks, a 64 MiB param: status 4 within T + 5 s each time, rank 0's
#       one message names what it waited in (the MPI-IO file's opening or
#       its write, under their deadlines, or one of the checkpoint's watched
#       collectives) and
#       "writing the checkpoint of step 8", or a collective of a later
#       step where the write had ended; at least one try names the
#       checkpoint; the checkpoint of step 4 is intact and resumes, step 8
#       is complete only if the message came after it, or names the
#       checkpoint's verdict, which rank 0 shares once it has committed
#       step 8 (rank 1 stopped after the checksums' gathering).
#   (e) rank 1 SIGSTOPped as the last step is logged, with --output of
#       the 64 MiB param: status 4 within T + 5 s, one message naming the
#       outputs' gathering or verdict ("writing the outputs") or the end of
#       the run, and no output file.
#   --collective-timeout's range: 0 is accepted (no watchdog), a negative
#   or non-number value is a usage error.
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1

cat >t.gsl <<'EOF'
# one matrix product a step, contracted over the split dimension, summed
# over its rows, then the all_reduce of the partial sums (2 KiB): the step
# is mostly compute
const D = 2
mesh [d = D]
param w: f32[768, 512] split(0) = normal(0.05)
input x: f32[1024, 768] split(1) = normal(1.0)
let y = sum(x @ w, 0)
output y
EOF
"$GSLC" -D D=2 t.gsl -o t2 && "$GSLC" -D D=3 t.gsl -o t3 || fatal "t.gsl does not compile"

# watch: the load measured now; T, the --collective-timeout of the next
# run, 3 s on an idle machine; within, the most seconds its end may take
# after a rank is stopped, T + 5 s on an idle machine
watch() {
  measure_slow
  T=$((3 * slow_ranks)) within=$((3 * slow_ranks + 5 * slow))
}
# start NP PROG ARGS...: PROG on NP ranks in the background under timeout;
# timeout's pid in tpid, stdout in out, stderr in err
start() {
  np=$1 prog=$2; shift 2
  rm -f out err
  timeout -k 5 "$(scaled 60)" $MPIEXEC -n "$np" "./$prog" "$@" >out 2>err &
  tpid=$!
}
# rank_of R: the pid of rank R (timeout > mpiexec > hydra proxy > ranks);
# rank_pid R: the same once it has started (at most 30 s, scaled)
rank_of() {
  for m in $(pgrep -P "$tpid"); do
    for p in $(pgrep -P "$m"); do
      for x in $(pgrep -P "$p"); do
        tr '\0' '\n' <"/proc/$x/environ" 2>/dev/null | grep -qx "PMI_RANK=$1" && { echo "$x"; return; }
      done
    done
  done
  return 1
}
rank_pid() { poll_until 30 rank_of "$1"; }
# stop_and_wait: SIGSTOPs $victim, waits for the job ($tpid): its status
# in rc, the seconds from the stop in took, its stderr less mpiexec's
# "Abort(4)" lines in msgs; then lets the victim go (it is killed by then)
stop_and_wait() {
  [ -n "$victim" ] && kill -STOP "$victim"
  t0=$(now)
  wait "$tpid"
  rc=$?
  took=$(secs "$t0" "$(now)")
  [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
  grep -v '^Abort(4)' err >msgs
}
# logged K: until stdout shows step K (at most 60 s, scaled; polled every 0.02 s)
logged() {
  i=0 n=$(($(scaled 60) * 50))
  while ! grep -q "^step $1/" out 2>/dev/null && [ $i -lt $n ]; do sleep 0.02; i=$((i + 1)); done
}

# ---- (a) the watchdog ----------------------------------------------------------
# A stop that lands between the step's all_reduce and the runtime's check
# for a stop signal after it is named as that check (no source line);
# each try must give one of the two messages, and the all_reduce's must
# come within five tries.
for np in 3 2; do
  prog=t$np
  seen=0 try=0
  while [ $seen -eq 0 ] && [ $try -lt 5 ]; do
    try=$((try + 1))
    rm -rf ck
    watch
    start "$np" "$prog" --steps 1000000 --log-every 30 --collective-timeout $T --checkpoint ck \
      --checkpoint-every 25
    # stopped as step 30 is logged: mid-run, 5 steps after the checkpoint
    # of step 25, 20 before the next and 30 before the next log line's
    # gather of each rank's pace (the test's stop lands some steps late)
    victim=$(rank_pid 1)
    logged 30
    stop_and_wait
    # each line: the all_reduce at t.gsl:8, over (d), within T s (or the
    # check after the step), who had arrived and who had not, and rank 1,
    # only it, named as silent since
    silent="; rank 1 (host [^)]*) has been silent since (stopped or cut off)\$"
    head="^$prog: rank [02]: error: "
    tail=" did not complete within $T s (training step [0-9]*): "
    ours="the all_reduce at t\.gsl:8:[0-9]* over (d)"
    check="the check for a stop signal after the step (the runtime's all_reduce over every rank)"
    whom="\(ranks* [0-9, -]* had arrived, ranks* [0-9, ]* had not\|every member had arrived (ranks [0-9, -]*)\)"
    step=$(sed -n 's/.*(training step \([0-9]*\)).*/\1/p' msgs | head -n 1)
    newest=$(ls ck | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -n 1)
    if [ $rc -eq 4 ] && awk -v t="$took" -v w=$within 'BEGIN { exit !(t <= w) }' && [ -s msgs ] &&
       ! grep -v -e "$head$ours$tail$whom$silent" -e "$head$check$tail$whom$silent" msgs >/dev/null &&
       ! grep -q '^t.: rank 1:' msgs; then
      pass "$np ranks, try $try: rank 1 stopped, deadline $T s: status 4 after $took s, at step $step, $((step - 1 - newest)) steps after checkpoint $newest; $(wc -l <msgs) message(s):"
      cat msgs
      grep -q "$ours" msgs && seen=1
    else
      fail "$np ranks: rank 1 stopped, deadline $T s: status $rc (want 4) after $took s (want at most $within), stderr:"; cat err
      break
    fi
  done
  [ $seen -eq 1 ] || fail "$np ranks: no try named the all_reduce at t.gsl:8"
done

# ---- (d), (e) outside the steps: a checkpoint's writing, the outputs ------------
cat >big.gsl <<'EOF'
# a 64 MiB param, split over 2 ranks: a checkpoint takes about half a second
const D = 2
mesh [d = D]
param w: f32[4096, 4096] split(0) = normal(0.01)
input x: f32[8, 4096] = normal(1.0)
let loss = mean((x @ w) * (x @ w))
train loss with sgd(lr = 0.001)
output w
EOF
"$GSLC" big.gsl -o big || fatal "big.gsl does not compile"
named=0
for delay in 0 0.05 0.15; do
  rm -rf ck; mkdir ck
  watch
  start 2 big --steps 40 --log-every 1 --collective-timeout $T --checkpoint ck --checkpoint-every 4
  victim=$(rank_pid 1)
  i=0 n=$(($(scaled 40) * 500))
  while ! ls -d ck/step-00000008.tmp.* >/dev/null 2>&1 && [ $i -lt $n ]; do sleep 0.002; i=$((i + 1)); done
  sleep $delay
  stop_and_wait
  grep -v '^big: warning: ' msgs >m && mv m msgs # a rank stopped may be called slow first
  during="^big: rank 0: error: the \(MPI_File_open of ck/step-00000008\.tmp\.[0-9]*/w\.npy\|MPI-IO write of param w (ck/step-00000008\.tmp\.[0-9]*/w\.npy)\|[a-z' ]*checkpoint's [a-z' ]* (the runtime's [a-z_]* over every rank)\) did not complete within $T s (writing the checkpoint of step 8): "
  after="^big: rank 0: error: .* did not complete within $T s (training step \(9\|[1-9][0-9]\)): "
  if grep -q "$during" msgs; then
    where=during
    [ -d ck/step-00000008 ] && ! grep -q "the sharing of the checkpoint's verdict" msgs && where=bad
  else
    where=after
  fi
  if [ $rc -eq 4 ] && awk -v t="$took" -v w=$within 'BEGIN { exit !(t <= w) }' && [ "$(wc -l <msgs)" -eq 1 ] &&
     grep -q -e "$during" -e "$after" msgs && [ "$where" != bad ] && [ -f ck/step-00000004/manifest.json ]; then
    pass "checkpoint of step 8, stopped ${delay} s after it began, deadline $T s: status 4 after $took s ($where the write): $(cat msgs)"
    [ $where = during ] && named=$((named + 1))
  else
    fail "checkpoint of step 8, stopped ${delay} s after it began, deadline $T s: status $rc after $took s (want at most $within; $where), ck: $(ls ck | tr '\n' ' '), stderr:"
    cat err
  fi
done
[ $named -ge 1 ] || fail "no try stopped rank 1 inside the checkpoint's writing"
rm -rf ck/step-00000008*
timeout "$(scaled 60)" $MPIEXEC -n 2 ./big --steps 5 --checkpoint ck --resume --quiet >out 2>err
rc=$?
if [ $rc -eq 0 ] && [ -d ck/step-00000005 ]; then
  pass "the checkpoint of step 4 left by the stopped runs resumes"
else
  fail "resuming the checkpoint of step 4: status $rc, stderr:"; cat err
fi

watch
start 2 big --steps 3 --log-every 1 --collective-timeout $T --output w=w.npy
victim=$(rank_pid 1)
logged 3
stop_and_wait
grep -v '^big: warning: ' msgs >m && mv m msgs
if [ $rc -eq 4 ] && awk -v t="$took" -v w=$within 'BEGIN { exit !(t <= w) }' && [ "$(wc -l <msgs)" -eq 1 ] && [ ! -e w.npy ] &&
   grep -q "^big: rank 0: error: .* did not complete within $T s (\(writing the outputs\|ending the run\)): " msgs; then
  pass "rank 1 stopped after the last step, deadline $T s: status 4 after $took s, no w.npy: $(cat msgs)"
else
  fail "rank 1 stopped after the last step, deadline $T s: status $rc after $took s (want at most $within), w.npy $( [ -e w.npy ] && echo exists || echo absent), stderr:"
  cat err
fi

# ---- (b), (c) each rank's pace -----------------------------------------------------
# windows FILE: per metrics record "SLOWEST SCORE"
windows() { sed -n 's/.*"slowest_rank": \([0-9]*\), "slowest_score": \([0-9.]*\),.*/\1 \2/p' "$1"; }

# 12 windows of 10 steps: the first before the duty cycle begins, the
# second where it does, then 10
rm -f m.jsonl
start 2 t2 --steps 120 --log-every 10 --metrics m.jsonl
victim=$(rank_pid 1)
logged 10
(while kill -STOP "$victim" 2>/dev/null; do sleep 0.05; kill -CONT "$victim"; sleep 0.05; done) &
duty=$!
wait "$tpid"
rc=$?
kill "$duty" 2>/dev/null; wait "$duty" 2>/dev/null
kill -CONT "$victim" 2>/dev/null
windows m.jsonl >w
# from the third window on (the duty cycle began after the first)
total=$(sed '1,2d' w | wc -l)
nslow=$(sed '1,2d' w | awk '$1 == 1 && $2 < 0.7' | wc -l)
log_slow=$(sed '1,2d' out | grep -c '; slowest rank 1, score 0\.[0-6][0-9]')
if [ $rc -eq 0 ] && [ "$total" -eq 10 ] && [ $((2 * nslow)) -ge "$total" ] && [ $((2 * log_slow)) -ge "$total" ] &&
   [ -s err ] && ! grep -v '^t2: warning: rank 1 on host [^ ]* computes [0-9]*\.[0-9] times slower than rank 0$' err >/dev/null; then
  pass "2 ranks: rank 1 slowed: named the slowest, score under 0.7, in $nslow of $total windows; $(cat err)"
else
  fail "2 ranks: rank 1 slowed: status $rc, rank 1 slow in $nslow of $total windows ($log_slow in the log), stderr:"
  cat err; cat w
fi

# Unslowed, up to 3 tries: other work on a shared machine may slow one
# rank for seconds, a real imbalance that the next try need not meet,
# where a fault in the pace would show in every try.
try=0
while :; do
  try=$((try + 1))
  rm -f m.jsonl
  start 2 t2 --steps 120 --log-every 10 --metrics m.jsonl
  wait "$tpid"
  rc=$?
  windows m.jsonl >w
  median=$(awk '{ print $2 }' w | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  if [ $rc -eq 0 ] && [ "$(wc -l <w)" -eq 12 ] && ! grep -q warning err &&
     awk -v m="$median" 'BEGIN { exit !(m >= 0.8) }'; then
    pass "2 ranks, none slowed, try $try: median score $median, no warning"
    break
  elif [ $try -lt 3 ]; then
    echo "2 ranks, none slowed, try $try: status $rc, median score $median, $(grep -c warning err) warning(s); again"
  else
    fail "2 ranks, none slowed, $try tries: status $rc, median score $median, stderr:"; cat err; cat w
    break
  fi
done

# ---- the option ---------------------------------------------------------------------
timeout "$(scaled 60)" $MPIEXEC -n 2 ./t2 --steps 3 --collective-timeout 0 --quiet >out 2>err
rc0=$?
timeout "$(scaled 60)" $MPIEXEC -n 2 ./t2 --steps 3 --collective-timeout -1 >out 2>err
rc1=$?
if [ $rc0 -eq 0 ] && [ $rc1 -eq 2 ] &&
   grep -qF "invalid value '-1' for --collective-timeout (expected 0 or a number from 0.001 to 1e9)" err; then
  pass "--collective-timeout 0 runs without a watchdog, -1 is refused"
else
  fail "--collective-timeout 0 (status $rc0) or -1: stderr:"; cat err
fi
exit $status
