#!/bin/sh
# tests/faults.sh — what survives which fault during a training run
# (runtime/main.c, runtime/checkpoint.c), through the hand-written program
# tests/train_log_prog.c on 2 ranks: its steps sleep (TRAIN_LOG_SLEEP_MS)
# so that a fault lands mid-run, and each step checks that w and its state
# hold what the steps before it left, so a resumed run fails unless the
# checkpoint restored them.
#
#   - SIGTERM to every rank (as a scheduler sends it), SIGTERM to
#     rank 1 alone, SIGINT without --checkpoint: every rank finishes its
#     step, the checkpoint of that step is written (or, without
#     --checkpoint, nothing), one line says so, the status is 3, no
#     --output and no temporary is left, and the checkpoint resumes;
#   - SIGKILL of rank 1: the process manager ends the job within seconds
#     (10 on an idle machine, scaled by tests/lib.sh's slow; its one
#     message), and the newest complete checkpoint resumes;
#   - a write error mid-checkpoint (the file-size limit of the running
#     ranks lowered with prlimit, i.e. what `ulimit -f` sets: under UCX a
#     limit set before MPI_Init kills MPI_Init itself, which extends its
#     shared-memory files): status 1, one line naming the cause, the
#     temporary removed, the previous checkpoint intact and resumable;
#   - a NaN loss at step 7 with a checkpoint every 3 steps: status 1, one
#     line, the checkpoint of step 6 kept, complete and resumable.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
hand_prog train_log_prog "${TRAIN_LOG_PROG:-tests/train_log_prog}"

# start ARGS...: the program on 2 ranks in the background, 100 ms a step,
# under timeout (tests/lib.sh's limits, scaled for a busy machine); its
# pid (timeout's) in tpid, stdout in out, stderr in err
start() {
  rm -f out err
  TRAIN_LOG_SLEEP_MS=100 timeout "$(scaled 60)" $MPIEXEC -n 2 "$bin" --log-every 1 "$@" >out 2>err &
  tpid=$!
}
# wait_for FILE: until FILE exists (at most 20 s, scaled)
wait_for() { poll_until 20 test -e "$1"; }
# step_done K: until the log shows step K (at most 20 s, scaled)
step_done() { poll_until 20 grep -q "^step $1/" out 2>/dev/null; }
# ranks: the pids of the ranks (timeout > mpiexec > hydra proxy > ranks)
ranks() {
  for m in $(pgrep -P "$tpid"); do
    for p in $(pgrep -P "$m"); do pgrep -P "$p"; done
  done
}
# rank_pid R: the pid of rank R
rank_pid() {
  for x in $(ranks); do
    tr '\0' '\n' <"/proc/$x/environ" 2>/dev/null | grep -qx "PMI_RANK=$1" && echo "$x"
  done
}
# finish: waits for the job; its status in rc, the time since t0 in took
finish() {
  wait "$tpid"
  rc=$?
  took=$(secs "$t0" "$(now)")
}
# no_debris DIR: no temporary in DIR, no --output or temporary beside it
no_debris() {
  ! ls "$1" | grep -q '\.tmp' && ! ls | grep -q '^w\.npy'
}
# resumes DIR STEP: the checkpoint resumes on 1 rank, at STEP, and runs on
resumes() {
  timeout "$(scaled 60)" $MPIEXEC -n 1 "$bin" --steps $(($2 + 3)) --checkpoint "$1" --resume --output w=r.npy >rout 2>rerr &&
    grep -qx "resumed from $1/step-$(printf %08d "$2") at step $2" rout && grep -q "^step $(($2 + 3))/" rout
}
# one_line TEXT: err is one line, holding TEXT
one_line() { [ "$(wc -l <err)" -eq 1 ] && grep -qF -- "$1" err; }

# SIGTERM to every rank (as a batch scheduler sends it), to rank 1 alone,
# and twice to every rank within milliseconds (as a signal to a process
# group reaches the ranks and mpiexec, which passes it on: one stop, not
# the second signal's kill). (Not through mpiexec: hydra's own exit status
# after it forwards a signal depends on timing, 0 or the ranks'; the
# ranks' behaviour is what is tested.)
for who in all rank1 twice; do
  rm -rf ck
  start --steps 100 --checkpoint ck --output w=w.npy
  step_done 3
  t0=$(now)
  case $who in
  all) kill -TERM $(ranks) ;;
  rank1) kill -TERM "$(rank_pid 1)" ;;
  twice) r=$(ranks); kill -TERM $r; kill -TERM $r ;; # one pgrep: under load one may take past 200 ms
  esac
  finish
  k=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\)\/100.*/\1/p' err)
  if [ $rc -eq 3 ] && [ -n "$k" ] &&
     one_line "train_log_prog: stopped by SIGTERM after step $k/100; checkpoint ck/step-$(printf %08d "$k") written" &&
     [ "$(ls ck)" = "step-$(printf %08d "$k")" ] && grep -q "\"step\": $k," "ck/step-$(printf %08d "$k")/manifest.json" &&
     no_debris ck && resumes ck "$k"; then
    pass "SIGTERM to $who: stopped after step $k, its checkpoint written and resumed, status 3 in $took s"
  else
    fail "SIGTERM to $who (status $rc, $took s):"; cat err; ls -a . ck; cat rerr 2>/dev/null
  fi
done

# SIGINT to every rank (a ^C reaches the whole process group), without --checkpoint
start --steps 100 --output w=w.npy
step_done 3
t0=$(now)
kill -INT $(ranks)
finish
if [ $rc -eq 3 ] && one_line "after step" && one_line "no checkpoint was asked for (--checkpoint DIR), nothing was saved" &&
   grep -q "stopped by SIGINT" err && ! ls | grep -q '^w\.npy'; then
  pass "SIGINT without --checkpoint: stopped after a step, nothing saved, status 3 in $took s"
else
  fail "SIGINT without --checkpoint (status $rc):"; cat err; ls
fi

# SIGKILL of rank 1
rm -rf ck
start --steps 100 --checkpoint ck --checkpoint-every 5 --output w=w.npy
wait_for ck/step-00000005
step_done 7
t0=$(now)
kill -KILL "$(rank_pid 1)"
finish
newest=$(ls ck | grep -v tmp | tail -1)
k=$(echo "$newest" | sed 's/^step-0*//')
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && awk -v t="$took" -v w="$(scaled 10)" 'BEGIN { exit !(t < w) }' &&
   [ "$(grep -c 'BAD TERMINATION' out)" -eq 1 ] && [ ! -s err ] && ! ls | grep -q '^w\.npy' &&
   [ -n "$k" ] && resumes ck "$k"; then
  pass "SIGKILL of rank 1: the job ended in $took s (status $rc, one message from mpiexec); $newest resumed"
else
  fail "SIGKILL of rank 1 (status $rc, $took s):"; cat out err; ls -a ck
fi

# a write error mid-checkpoint: the ranks' file-size limit lowered to 100
# bytes after the checkpoint of step 5 (each file is 136 bytes); on a busy
# machine the limit may land after a later checkpoint, so the failing one,
# K, is read from the message: every checkpoint before it stays, whole
rm -rf ck
start --steps 100 --checkpoint ck --checkpoint-every 5 --output w=w.npy
wait_for ck/step-00000005/manifest.json
for x in $(ranks); do prlimit --pid "$x" --fsize=100 || fail "prlimit --pid $x"; done
t0=$(now)
finish
k=$(sed -n 's|^train_log_prog: rank 0: error: checkpoint ck/step-0*\([1-9][0-9]*\): .*|\1|p' err)
kept=
for j in $(seq 5 5 $((${k:-10} - 5))); do kept="$kept step-$(printf %08d "$j")"; done
if [ $rc -eq 1 ] && [ -n "$k" ] && [ $((k % 5)) -eq 0 ] && [ "$k" -ge 10 ] &&
   one_line "File too large (the previous checkpoints are intact)" && [ "$(echo $(ls ck))" = "$(echo $kept)" ] &&
   no_debris ck && resumes ck $((k - 5)); then
  pass "a write error at step $k: status 1, one line, the temporary removed, the checkpoints before it intact, step $((k - 5)) resumed"
else
  fail "a write error mid-checkpoint (status $rc):"; cat err; ls -a ck; cat rerr 2>/dev/null
fi

# a NaN loss at step 7, a checkpoint every 3 steps
rm -rf ck
TRAIN_LOG_BAD_STEP=7 timeout "$(scaled 60)" $MPIEXEC -n 2 "$bin" --steps 10 --checkpoint ck --checkpoint-every 3 \
  --output w=w.npy >out 2>err
rc=$?
if [ $rc -eq 1 ] && one_line "train_log_prog: rank 0: error: the loss is nan at step 7; stopping" &&
   [ "$(ls ck)" = "$(printf 'step-00000003\nstep-00000006')" ] && no_debris ck && resumes ck 6; then
  pass "a NaN loss at step 7: status 1, one line, the checkpoint of step 6 kept and resumed"
else
  fail "a NaN loss (status $rc):"; cat err; ls -a ck; cat rerr 2>/dev/null
fi
exit $status
