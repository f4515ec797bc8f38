#!/bin/sh
# tests/generate_live.sh — generation beside a training run that prunes
# its checkpoints (runtime/ckpt_lock.c, "Readers beside a run";
# man/gslrun.7 GENERATION): a program trained with --checkpoint-every 1
# --keep 1 writes a checkpoint and removes the one before every step or
# so, while 25 --generate runs, one after another, read the newest
# checkpoint from the same directory. Before the readers' lock about one
# generation in ten failed (a .npy file gone between the manifest and the
# read: "cannot open", MPI_File_open); now every one must succeed and
# write its 2 bytes, each reading a checkpoint the pruner leaves alone
# while it is read. When training stops (SIGTERM, a checkpoint of its
# last step), the prune after it, with no reader left, brings the
# directory back to --keep 1: one checkpoint, no temporary.
set -u
. "$top_srcdir/tests/lib.sh"
tpid=
at_exit '[ -n "$tpid" ] && kill "$tpid" 2>/dev/null'
cd "$work" || exit 1

# the logits of the convention (generate.c), and a param of 1 MiB whose
# adam states make each checkpoint a few MiB: reading one takes long
# enough for a prune to fall in the middle
cat >live.gsl <<'GSL'
input tokens: i32[2, 7] = uniform(0, 16)
param w: f32[16, 16] = normal(1.0)
param big: f32[512, 512] = normal(0.01)
let logits = gather(w, slice(tokens, 1, 0, 6))
output logits
train mean(logits * logits) + mean(big * big) with adam(lr = 0.001)
GSL
"$GSLC" live.gsl -o live || fatal "gslc live.gsl"

# the training's guard covers the 25 generations beside it (tests/lib.sh's
# limits, scaled for a busy machine)
timeout "$(scaled 120)" $MPIEXEC -n 1 ./live --steps 100000000 --checkpoint ck --checkpoint-every 1 --keep 1 --quiet \
  >train.out 2>train.err &
tpid=$!
checkpointed() { ls ck 2>/dev/null | grep -q '^step-[0-9]*$'; }
poll_until 20 checkpointed || { fail "training wrote no checkpoint in $(scaled 20) s: $(cat train.err)"; exit 1; }

ok=0 n=25
for g in $(seq 1 $n); do
  timeout "$(scaled 60)" $MPIEXEC -n 1 ./live --checkpoint ck --generate 2 --top-k 1 --prompt "$(printf '\001')" --quiet \
    >g.out 2>g.err
  rc=$?
  if [ $rc -eq 0 ] && [ "$(wc -c <g.out)" -eq 2 ] && [ ! -s g.err ]; then
    ok=$((ok + 1))
  else
    fail "generation $g beside the training: status $rc, $(wc -c <g.out) bytes, stderr: $(cat g.err)"
  fi
done
steps=$(ls ck | sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
[ $ok -eq $n ] && pass "$n generations beside a training pruning to --keep 1 (at step ${steps:-?}): every one read its checkpoint"

# stop the training at the rank itself (tests/checkpoint_dir.sh says why)
holder=$(sed -n 's/^pid \([0-9]*\) host .*/\1/p' ck/.lock 2>/dev/null)
if [ -n "$holder" ] && [ "$(cat /proc/"$holder"/comm 2>/dev/null)" = live ]; then
  kill -TERM "$holder"
else
  fail "the training holds no lock naming its own process (lock: '$(cat ck/.lock 2>/dev/null)')"
  kill "$tpid"
fi
wait "$tpid"
trc=$?
tpid=
left=$(ls ck | tr '\n' ' ')
if [ $trc -eq 3 ] && grep -q '^live: stopped by SIGTERM after step [0-9]*/100000000; checkpoint ck/step-[0-9]* written' train.err &&
   [ "$(ls ck | grep -c '^step-[0-9]*$')" -eq 1 ] && [ -z "$(ls ck | grep tmp)" ]; then
  pass "the training ended by SIGTERM, its last prune back to --keep 1 ($left)"
else
  fail "the training: status $trc (want 3), ck holds '$left': $(cat train.err)"
fi
exit $status
