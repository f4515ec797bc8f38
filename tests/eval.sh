#!/bin/sh
# tests/eval.sh — evaluation while training (runtime/eval.c, runtime/main.c):
# --eval-input, --eval-every and gslrt_declare_eval through the hand-written
# program tests/eval_prog.c on 1 and 2 ranks: eval_loss and eval_NAME in the
# log line and the --metrics record at the steps due (every K, the last,
# once), a step evaluated logged whatever --log-every says, the training
# losses after an evaluation unchanged (the training batch bound again),
# the --output values as the last step left them, a one-batch eval file,
# a NaN eval loss logged as nan (null in the metrics) without stopping the
# run, the evaluation's time left out of ms/step, a checkpoint evaluated
# without training (--resume at --steps), the count of --eval-every after
# --resume, and every usage and run-time error with its message and status
# (on 2 ranks: one message).
#
# Expected numbers, worked out by hand. x.npy holds 3 training batches,
# batch k all k + 1, so step S (from 1) reads batch (S - 1) mod 3, of mean
# (S - 1) mod 3 + 1; w is 1 + (S - 1) / 2 during step S and 1 + S / 2 after
# it; the loss of step S is mean(x) * w:
#   S:    1  2  3  4    5  6
#   loss: 1  3  6  2.5  6  10.5
# xe.npy holds 2 held-out batches, 0..7 (sum 28, mean 3.5) and 8..15 (sum
# 92, mean 11.5); after S steps each batch's loss is its mean * w, so
#   eval_loss = (3.5 + 11.5) / 2 * (1 + S / 2) = 7.5 * (1 + S / 2),
#   eval_xsum = (28 + 92) / 2 = 60, eval_wmean = 1 + S / 2:
#   S:          2   3      4     5      6
#   eval_loss:  15  18.75  22.5  26.25  30
# xe1.npy is the one batch 0..7 of x's exact shape: eval_loss 3.5 * w,
# eval_xsum 28.
set -u
. "$top_srcdir/tests/lib.sh"
[ -n "${NPYTOOL:-}" ] || fatal "NPYTOOL is not set (make check sets it)"
. "$top_srcdir/tests/hand_prog.sh"
hand_prog eval_prog "${EVAL_PROG:-tests/eval_prog}"

# fields FILE KEY...: per metrics line, the step and the values of KEYs
# ("-" for a key the line lacks)
fields() {
  f=$1; shift
  awk -v keys="$*" 'BEGIN { n = split(keys, k, " ") }
    { line = $0; sub(/^\{"step": /, "", line); s = line + 0; out = s
      for (i = 1; i <= n; i++) {
        p = index($0, "\"" k[i] "\": ")
        if (!p) { out = out " -"; continue }
        v = substr($0, p + length(k[i]) + 4); sub(/[,}].*/, "", v); out = out " " v
      }
      print out }' "$f"
}

# logged: the log lines without their timings (tokens/s onwards)
logged() { sed 's/  tokens\/s .*//; s/  (eval [0-9.]* s)$//' out; }

# expect NP STATUS MESSAGE ARGS...: a failing run whose stderr is exactly
# MESSAGE (and, for a usage error, the "Try" line), with nothing on stdout
expect() {
  np=$1 want_rc=$2 msg=$3; shift 3
  run "$np" "$@"
  if [ $want_rc -eq 2 ]; then
    printf 'eval_prog: error: %s\nTry '"'"'eval_prog --help'"'"'.\n' "$msg" >want_err
  else
    printf 'eval_prog: rank 0: error: %s\n' "$msg" >want_err
  fi
  if [ $rc -eq $want_rc ] && cmp -s err want_err && [ ! -s out ]; then
    pass "$np rank(s): ${EVAL_PROG_NO_TRAIN:+no train statement: }$* -> $want_rc"
  else
    fail "$np rank(s): $*: exit status $rc (want $want_rc), stderr:"; cat err; echo "want:"; cat want_err
    echo "stdout:"; cat out
  fi
}

# the data
"$NPYTOOL" write x.npy f32 3,4,2 1 1 1 1 1 1 1 1  2 2 2 2 2 2 2 2  3 3 3 3 3 3 3 3 || exit 1
"$NPYTOOL" write xe.npy f32 2,4,2 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 || exit 1
"$NPYTOOL" write xe1.npy f32 4,2 0 1 2 3 4 5 6 7 || exit 1
"$NPYTOOL" write bad.npy f32 3 0 1 2 || exit 1
"$NPYTOOL" write ne.npy f32 3,2 0 0 0 0 0 0 || exit 1

for n in 1 2; do
  # every 2 steps and the last: steps 2, 4 and 5, once each; --log-every 10
  # logs no other step
  rm -f m.jsonl xo.npy so.npy wo.npy
  run "$n" --steps 5 --eval-every 2 --log-every 10 --input x=x.npy --eval-input x=xe.npy \
    --metrics m.jsonl --output x=xo.npy --output xsum=so.npy --output w=wo.npy
  printf '%s\n' 'step 2/5  loss 3  eval_loss 15  eval_xsum 60  eval_wmean 2' \
    'step 4/5  loss 2.5  eval_loss 22.5  eval_xsum 60  eval_wmean 3' \
    'step 5/5  loss 6  eval_loss 26.25  eval_xsum 60  eval_wmean 3.5' >want
  if [ $rc -eq 0 ] && [ ! -s err ] && logged | cmp -s - want &&
     [ "$(grep -c "  tokens/s [0-9]*  ([0-9.]* ms/step, [0-9.]* s elapsed; eval [0-9.]* s$(pace_log "$n"))\$" out)" = 2 ] &&
     [ "$(grep -c "  tokens/s [0-9]*  ([0-9.]* ms/step, [0-9.]* s elapsed; eval [0-9.]* s$(pace_log "$n")$(rss_log "$n"))\$" out)" = 1 ]; then
    pass "$n rank(s): log lines at steps 2, 4 and 5"
  else
    fail "$n rank(s): log lines, exit status $rc, want:"; cat want; echo "got:"; cat out err
  fi
  printf '2 3 15 60 2\n4 2.5 22.5 60 3\n5 6 26.25 60 3.5\n' >want
  num='[0-9][0-9.e+-]*'
  line="^{\"step\": [0-9]*, \"loss\": $num, \"eval_loss\": $num, \"eval_xsum\": $num, \"eval_wmean\": $num, \"tokens_per_s\": $num, \"elapsed_s\": $num, \"ms_per_step\": $num, \"eval_s\": $num$(pace_json "$n")"
  # the first record ends with the run's provenance (tests/provenance_run.sh), no other
  sed '1s/, "provenance": {.*}}$/}/' m.jsonl >m.noprov
  if fields m.jsonl loss eval_loss eval_xsum eval_wmean | cmp -s - want &&
     head -1 m.jsonl | grep -q ', "provenance": {.*}}$' && ! sed 1d m.jsonl | grep -q '"provenance"' &&
     ! sed '$d' m.noprov | grep -v "$line}\$" >/dev/null && tail -n 1 m.noprov | grep -q "$line$(rss_json "$n")}\$"; then
    pass "$n rank(s): metrics at steps 2, 4 and 5"
  else
    fail "$n rank(s): metrics, want (step loss eval_loss eval_xsum eval_wmean):"; cat want; echo "got:"; cat m.jsonl
  fi
  # the outputs as step 5 left them: its batch (all 2), its xsum, w = 3.5
  if "$NPYTOOL" compare xo.npy f32 4,2 2 2 2 2 2 2 2 2 && "$NPYTOOL" compare so.npy f32 "" 16 &&
     "$NPYTOOL" compare wo.npy f32 2 3.5 3.5; then
    pass "$n rank(s): outputs as the last step left them"
  else
    fail "$n rank(s): outputs after the last evaluation"
  fi

  # every step logged: the losses after an evaluation are those of the
  # training batches; no eval fields where nothing was evaluated
  rm -f m.jsonl
  run "$n" --steps 4 --eval-every 2 --log-every 1 --input x=x.npy --eval-input x=xe.npy --metrics m.jsonl
  printf '%s\n' 'step 1/4  loss 1' 'step 2/4  loss 3  eval_loss 15  eval_xsum 60  eval_wmean 2' \
    'step 3/4  loss 6' 'step 4/4  loss 2.5  eval_loss 22.5  eval_xsum 60  eval_wmean 3' >want
  printf '1 1 - -\n2 3 15 s\n3 6 - -\n4 2.5 22.5 s\n' >want_m
  if [ $rc -eq 0 ] && logged | cmp -s - want && [ "$(grep -c '; eval ' out)" = 2 ] &&
     fields m.jsonl loss eval_loss eval_s | awk '$4 != "-" { $4 = "s" } { print }' | cmp -s - want_m; then
    pass "$n rank(s): training losses after an evaluation"
  else
    fail "$n rank(s): --eval-every 2 --log-every 1: exit status $rc, want:"; cat want want_m; echo "got:"
    cat out err m.jsonl
  fi

  # --eval-input without --eval-every: once, after the last step; --quiet
  # prints nothing but the metrics are written
  rm -f m.jsonl
  run "$n" --steps 3 --log-every 2 --input x=x.npy --eval-input x=xe.npy --metrics m.jsonl --quiet
  printf '2 3 - - -\n3 6 18.75 60 2.5\n' >want
  if [ $rc -eq 0 ] && [ ! -s out ] && [ ! -s err ] &&
     fields m.jsonl loss eval_loss eval_xsum eval_wmean | cmp -s - want; then
    pass "$n rank(s): one evaluation after the last step, --quiet"
  else
    fail "$n rank(s): --eval-input alone: exit status $rc, want:"; cat want; echo "got:"; cat out err m.jsonl
  fi

  # a file of x's exact shape is one held-out batch
  run "$n" --steps 2 --input x=x.npy --eval-input x=xe1.npy
  if [ $rc -eq 0 ] && [ "$(logged | tail -n 1)" = 'step 2/2  loss 3  eval_loss 7  eval_xsum 28  eval_wmean 2' ]; then
    pass "$n rank(s): one held-out batch"
  else
    fail "$n rank(s): --eval-input x=xe1.npy: exit status $rc:"; cat out err
  fi

  # a NaN eval loss (sign bit set) is logged as nan, null in the metrics,
  # and the run goes on
  rm -f m.jsonl
  EVAL_PROG_NAN=1 run "$n" --steps 2 --eval-every 1 --input x=x.npy --eval-input x=xe.npy --metrics m.jsonl
  printf '%s\n' 'step 1/2  loss 1  eval_loss nan  eval_xsum 60  eval_wmean 1.5' \
    'step 2/2  loss 3  eval_loss nan  eval_xsum 60  eval_wmean 2' >want
  if [ $rc -eq 0 ] && [ ! -s err ] && logged | cmp -s - want &&
     [ "$(grep -c '"eval_loss": null, "eval_xsum": 60,' m.jsonl)" = 2 ]; then
    pass "$n rank(s): a NaN eval loss"
  else
    fail "$n rank(s): NaN eval loss: exit status $rc, want:"; cat want; echo "got:"; cat out err m.jsonl
  fi

  # the evaluation's time (2 batches of 200 ms) is reported, counted in
  # elapsed, and left out of ms/step
  rm -f m.jsonl
  EVAL_PROG_SLEEP_MS=200 run "$n" --steps 2 --eval-every 1 --input x=x.npy --eval-input x=xe.npy \
    --metrics m.jsonl --quiet
  if [ $rc -eq 0 ] && awk 'function field(k) { return substr($0, index($0, "\"" k "\": ") + length(k) + 4) + 0 }
       { if (field("eval_s") < 0.4 || field("ms_per_step") >= 200) bad = 1 }
       NR == 2 && field("elapsed_s") < 0.4 { bad = 1 }
       END { exit bad || NR != 2 }' m.jsonl; then
    pass "$n rank(s): evaluation time"
  else
    fail "$n rank(s): evaluation time: exit status $rc:"; cat err m.jsonl
  fi

  # a checkpoint of step 4, evaluated without training: no --input needed
  rm -rf ck m.jsonl
  run "$n" --steps 4 --input x=x.npy --checkpoint ck --quiet
  [ $rc -eq 0 ] || { fail "$n rank(s): --checkpoint ck: exit status $rc"; cat err; }
  run "$n" --steps 4 --checkpoint ck --resume --eval-input x=xe.npy --metrics m.jsonl
  if [ $rc -eq 0 ] && [ ! -s err ] && [ "$(wc -l <out)" -eq 2 ] &&
     grep -qx 'resumed from ck/step-00000004 at step 4' out &&
     grep -qx 'step 4/4  eval_loss 22.5  eval_xsum 60  eval_wmean 3  (eval [0-9.]* s)' out &&
     grep -qx '{"step": 4, "eval_loss": 22.5, "eval_xsum": 60, "eval_wmean": 3, "eval_s": [0-9.]*, "provenance": {.*}}' m.jsonl &&
     [ "$(wc -l <m.jsonl)" -eq 1 ]; then
    pass "$n rank(s): a checkpoint evaluated without training"
  else
    fail "$n rank(s): --resume at --steps with --eval-input: exit status $rc:"; cat out err m.jsonl
  fi
  # resumed to step 6 with --eval-every 5: steps count from 1 globally, so
  # step 5 and the last, 6
  run "$n" --steps 6 --checkpoint ck --resume --eval-every 5 --log-every 10 --input x=x.npy \
    --eval-input x=xe.npy
  printf '%s\n' 'resumed from ck/step-00000004 at step 4' \
    'step 5/6  loss 6  eval_loss 26.25  eval_xsum 60  eval_wmean 3.5' \
    'step 6/6  loss 10.5  eval_loss 30  eval_xsum 60  eval_wmean 4' 'checkpoint ck/step-00000006 written' >want
  if [ $rc -eq 0 ] && logged | sed 's/ written (.*/ written/' | cmp -s - want; then
    pass "$n rank(s): --eval-every counts global steps after --resume"
  else
    fail "$n rank(s): resumed with --eval-every 5: exit status $rc, want:"; cat want; echo "got:"; cat out err
  fi
  # beyond the checkpoint, without --input: there are steps to train
  rm -rf ck2
  run "$n" --steps 2 --input x=x.npy --checkpoint ck2 --quiet
  expect "$n" 2 "input x has no initializer; bind it with --input x=FILE (--eval-input alone only evaluates a checkpoint at --steps; 1 step is left to run)" \
    --steps 3 --checkpoint ck2 --resume --eval-input x=xe.npy --quiet

  # usage errors, the same on any number of ranks: on 2, printed once
  [ "$n" -eq 2 ] || continue
  EVAL_PROG_NO_TRAIN=1 expect "$n" 2 "--eval-input: the program has no loss to evaluate (it has no train statement)" \
    --input x=x.npy --eval-input x=xe.npy
  EVAL_PROG_NO_TRAIN=1 expect "$n" 2 "--eval-every: the program has no loss to evaluate (it has no train statement)" \
    --input x=x.npy --eval-every 2
  expect "$n" 2 "--eval-every needs --eval-input NAME=FILE (the held-out data)" --input x=x.npy --eval-every 2
  expect "$n" 2 "invalid value '0' for --eval-every (expected an integer from 1 to 9223372036854775807)" --eval-every 0
  expect "$n" 2 "invalid value 'often' for --eval-every (expected an integer from 1 to 9223372036854775807)" --eval-every often
  expect "$n" 2 "--eval-input x given twice" --eval-input x=xe.npy --eval-input x=xe1.npy
  expect "$n" 2 "--eval-input x.npy: expected NAME=FILE" --eval-input x.npy
  expect "$n" 2 "--eval-input y=xe.npy: the program has no input named y" --input x=x.npy --eval-input y=xe.npy
  expect "$n" 2 "--eval-input w=xe.npy: w is a param, not an input" --input x=x.npy --eval-input w=xe.npy
  expect "$n" 2 "input x is bound by --input x=x.npy but has no held-out data; give --eval-input x=FILE" \
    --input x=x.npy --eval-input noise=ne.npy
  expect "$n" 2 "--metrics xe.npy and --eval-input x=xe.npy name the same file" \
    --input x=x.npy --eval-input x=xe.npy --metrics xe.npy
  # run-time errors: the header checked before step 1, the batch counts agree
  expect "$n" 1 "--eval-input x: bad.npy has shape [3] (f32), expected [4, 2] (f32) or [B, 4, 2]" \
    --input x=x.npy --eval-input x=bad.npy
  expect "$n" 1 "--eval-input noise=ne.npy holds 3 batches but --eval-input x=xe.npy holds 2 (every --eval-input file must hold the same number of held-out batches)" \
    --input x=x.npy --eval-input x=xe.npy --eval-input noise=ne.npy
  run "$n" --input x=x.npy --eval-input x=missing.npy
  if [ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q '^eval_prog: rank 0: error: --eval-input x: cannot open missing.npy: ' err &&
     [ ! -s out ]; then
    pass "$n rank(s): a missing --eval-input file"
  else
    fail "$n rank(s): --eval-input x=missing.npy: exit status $rc:"; cat out err
  fi
done
exit $status
