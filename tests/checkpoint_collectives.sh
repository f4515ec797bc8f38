#!/bin/sh
# tests/checkpoint_collectives.sh — a checkpoint costs the runtime a fixed
# number of collectives, whatever the number of tensors it saves or
# restores (runtime/checkpoint.c, issue 43).
#
# Two programs on [d = 2], alike but for their number of params, each
# f32[4] split over d and trained with adam (a param and its two moments
# a file each, and adam's step count): P = 2 (7 files) and P = 20 (61
# files). Each runs on 2 ranks with tests/collective_count.c preloaded, a
# PMPI shim that counts every MPI collective the ranks call (blocking and
# non-blocking: libgslrt's own run as MPI_I*) and, apart, the MPI-IO
# collective calls (MPI_File_open, _set_view, _write_all, _read_all, _sync,
# _close); rank 0's counts are read. By differences of runs that share
# everything else:
#   one save   = (--steps 2, --checkpoint-every 1: 2 saves) - (--steps 2,
#                --checkpoint: 1 save)
#   one resume = (--steps 3 --resume from step 2: resume, 1 step, 1 save)
#                - (--steps 1 --checkpoint: 1 step, 1 save)
# The collectives of a save, and of a resume, are the same for P = 2 and
# P = 20 (and not 0); the MPI-IO calls grow with the files (the shim sees
# the checkpoint's I/O at all; they are per file by nature, and stay).
# The counts are printed: 4 and 4 since issue 43; 6 + 3 a file before it
# (27 and 189 a save, as many a resume).
set -u
. "$top_srcdir/tests/lib.sh"
: "${GSLC:?}" "${MPICC:?}"
cd "$work" || exit 1

"$MPICC" -shared -fPIC -O1 -o count.so "$top_srcdir/tests/collective_count.c" ||
  fatal "cannot compile tests/collective_count.c"

prog() { # P: p$P, a program of P params
  {
    echo "mesh [d = 2]"
    echo "input x: f32[4] split(0) = normal(1.0)"
    i=1 loss=
    while [ "$i" -le "$1" ]; do
      echo "param w$i: f32[4] split(0) = ones()"
      loss="$loss${loss:+ + }sum(w$i * x * x)"
      i=$((i + 1))
    done
    echo "train $loss with adam(lr = 0.01)"
  } >"p$1.gsl"
  "$GSLC" "p$1.gsl" -o "p$1" || fatal "gslc p$1.gsl"
}

# count NAME P ARGS...: runs p$P on 2 ranks, counted; rank 0's collectives
# in NAME.c, its MPI-IO calls in NAME.f
count() {
  name=$1 p=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 120 $MPIEXEC -n 2 env LD_PRELOAD="$work/count.so" "./p$p" "$@" >"$name.out" 2>"$name.err" ||
    { fail "p$p $*: exit status $? ($(head -c 300 "$name.err"))"; echo 0 >"$name.c"; echo 0 >"$name.f"; return; }
  line=$(grep '^collective_count: rank 0: ' "$name.err")
  [ -n "$line" ] ||
    { fail "p$p $*: no count from rank 0 (is the shim preloaded?)"; echo 0 >"$name.c"; echo 0 >"$name.f"; return; }
  echo "$line" | sed 's/.*: \([0-9]*\) collectives.*/\1/' >"$name.c"
  echo "$line" | sed 's/.* \([0-9]*\) MPI-IO collective calls$/\1/' >"$name.f"
}

# measure P: p$P's collectives (and MPI-IO calls) of one save and of one
# resume, into save, resume (save_io, resume_io), printed
measure() {
  p=$1
  prog "$p"
  count "one$p" "$p" --steps 2 --checkpoint "c1_$p"
  count "two$p" "$p" --steps 2 --checkpoint "c2_$p" --checkpoint-every 1
  count "fresh$p" "$p" --steps 1 --checkpoint "c3_$p"
  count "resume$p" "$p" --steps 3 --checkpoint "c2_$p" --resume
  grep -q "resumed from c2_$p/step-00000002 at step 2" "resume$p.out" ||
    fail "p$p: the resume did not start from step 2 ($(cat "resume$p.out"))"
  save=$(($(cat "two$p.c") - $(cat "one$p.c")))
  save_io=$(($(cat "two$p.f") - $(cat "one$p.f")))
  resume=$(($(cat "resume$p.c") - $(cat "fresh$p.c")))
  resume_io=$(($(cat "resume$p.f") - $(cat "fresh$p.f")))
  echo "P = $p ($((3 * p + 1)) files): a save $save collectives ($save_io MPI-IO calls)," \
    "a resume $resume collectives ($resume_io MPI-IO calls)"
}

measure 2
save2=$save resume2=$resume save_io2=$save_io resume_io2=$resume_io
measure 20
if [ "$save2" -le 0 ] || [ "$resume2" -le 0 ]; then
  fail "a save or a resume made no collective at all: the counts are wrong"
fi
if [ "$save_io" -le "$save_io2" ] || [ "$resume_io" -le "$resume_io2" ]; then
  fail "the MPI-IO calls do not grow with the files: the shim does not see the checkpoint's I/O"
fi
if [ "$save" -eq "$save2" ]; then
  pass "a save makes $save2 collectives with 7 files and with 61"
else
  fail "a save makes $save2 collectives with 7 files, $save with 61: it grows with the tensors"
fi
if [ "$resume" -eq "$resume2" ]; then
  pass "a resume makes $resume2 collectives with 7 files and with 61"
else
  fail "a resume makes $resume2 collectives with 7 files, $resume with 61: it grows with the tensors"
fi
exit $status
