#!/bin/sh
# tests/index_errors.sh — an index out of range names what it is and
# where it came from (runtime/tensors.c, runtime/fail.c, the checks gslc
# declares in compiler/codegen.c and emits in compiler/cg_ops.c), on 1
# device and on 2 with the tokens split by rows (rank 1 holds rows 2, 3):
#
#   - a token of the --input file out of range for the gather that reads
#     it: the run ends before the step that would read it, on every rank
#     together, with one message naming the option, the file, the batch,
#     the step, the token's global position and value, and the gather;
#   - the same for a held-out batch (--eval-input), where the first such
#     token in C order is reported whichever rank holds it;
#   - a computed index (tokens + 1) out of range: the gather's own check
#     names the gather, the index's global position and value, and the
#     training step or the evaluation; a token the first gather does not
#     read (column 5) is left to it.
#
# Expected messages written by hand from the positions below (rows are
# windows, columns tokens; the program's gathers are at p.gsl:7:9 and
# p.gsl:8:15).
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1
cat >p.gsl <<'GSL'
# tokens in 4 windows of 6, split by windows; two gathers read them
const D = 1
mesh [d = D]
input tokens: i32[4, 6] split(0)
param emb: f32[8, 3] = normal(0.1)
let x = slice(tokens, 1, 0, 5)
let h = gather(emb, x)
let shifted = gather(emb, tokens + 1)
train mean(h * h) + mean(shifted) with sgd(lr = 0.1)
GSL
"$GSLC" p.gsl -o p1 || fatal "gslc p.gsl (D=1)"
"$GSLC" -D D=2 p.gsl -o p2 || fatal "gslc p.gsl (D=2)"

# tokens FILE B ROW,COL=V...: B batches of zeros (B 0: one, of the exact
# shape), with V at [batch, ROW, COL] for each B.ROW,COL=V given
tokens() {
  f=$1 b=$2; shift 2
  n=$((b > 0 ? b : 1)) shape=$( [ "$b" -gt 0 ] && echo "$b,4,6" || echo "4,6")
  awk -v n="$n" -v set="$*" 'BEGIN {
      split(set, s, " ")
      for (k in s) { split(s[k], a, "[.,=]"); v[a[1] * 24 + a[2] * 6 + a[3]] = a[4] }
      for (i = 0; i < n * 24; i++) print (i in v) ? v[i] : 0 }' |
    "$NPYTOOL" write "$f" i32 "$shape" - || exit 1
}
tokens train.npy 3 2.3,1=300
tokens held.npy 2 1.1,4=-1 1.2,0=-7
tokens zeros.npy 0
tokens col5.npy 0 0.2,5=7
tokens held5.npy 2 1.0,5=7

# expect NP STEPS_LOGGED MESSAGE ARGS...: exit status 1, the one error
# line MESSAGE (the process manager may add lines of its own, none with
# "error:"), and the log's last line that of step STEPS_LOGGED (- for none)
expect() {
  np=$1 logged=$2 msg="p$1: $3"; shift 3
  timeout 120 $MPIEXEC -n "$np" "./p$np" --log-every 1 "$@" >out 2>err
  rc=$?
  last=$(tail -n 1 out | sed 's/  loss .*//')
  want_last=$([ "$logged" = - ] || echo "step $logged")
  if [ $rc -eq 1 ] && grep -qxF -- "$msg" err && [ "$(grep -c 'error:' err)" -eq 1 ] &&
     [ "$last" = "$want_last" ]; then
    pass "np $np: $*"
  else
    fail "np $np: $*: exit status $rc (want 1), stderr:"; cat err
    echo "want: $msg"; echo "last log line '$last', want '$want_last'"
  fi
}

for np in 1 2; do
  expect $np 2/5 "rank 0: error: --input tokens=train.npy: batch 2 of 3 (training step 3): tokens[3, 1] = 300 is out of range for the gather at p.gsl:7:9, whose table has 8 rows" \
    --steps 5 --input tokens=train.npy
  expect $np 1/2 "rank 0: error: --eval-input tokens=held.npy: batch 1 of 2 (evaluation after step 2): tokens[1, 4] = -1 is out of range for the gather at p.gsl:7:9, whose table has 8 rows" \
    --steps 2 --input tokens=zeros.npy --eval-input tokens=held.npy
  # [2, 5] is rank 1's [0, 5] on 2 devices; [0, 5] is rank 0's
  expect $np - "rank $((np - 1)): error: the gather at p.gsl:8:15: index 8 at [2, 5] is out of range for its table of 8 rows (training step 1)" \
    --input tokens=col5.npy
  expect $np - "rank 0: error: the gather at p.gsl:8:15: index 8 at [0, 5] is out of range for its table of 8 rows (evaluation after step 1, held-out batch 1 of 2)" \
    --steps 1 --input tokens=zeros.npy --eval-input tokens=held5.npy
done
exit $status
