#!/bin/sh
# tests/train_log.sh — what libgslrt does with a training program's loss
# and optimizer state (runtime/main.c, runtime/tensors.c), through the
# hand-written program tests/train_log_prog.c on 1 and 2 ranks: the log
# line with its elapsed time, the --metrics JSON Lines file (also with
# --quiet, and without a loss), a NaN or infinite loss stopping the run
# with one error line, the metrics of the steps before it and no --output,
# a --metrics target that cannot be written refused before step 1, and
# --input naming a state refused.
#
# Expected losses are 1 / step (step from 1) rounded to f32, printed %.9g,
# worked out by hand: 1, 0.5, 0.333333343 (f32 0x3eaaaaab), 0.25,
# 0.200000003 (f32 0x3e4ccccd); in the log line (%.6g) 1, 0.5, 0.333333,
# 0.25, 0.2.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/hand_prog.sh"
hand_prog train_log_prog "${TRAIN_LOG_PROG:-tests/train_log_prog}"

# steps_losses FILE: "STEP LOSS" per metrics line ("STEP -" without a loss)
steps_losses() {
  sed -e 's/^{"step": \([0-9]*\), "loss": \([^,]*\), .*/\1 \2/' \
      -e 's/^{"step": \([0-9]*\), "tokens_per_s".*/\1 -/' "$1"
}

# well_formed FILE NP: every line holds the five (or, without a loss, four)
# fields in order, the numbers plain decimals, then on NP > 1 ranks the
# slowest rank's four (pace_json); the last line ends with the NP ranks'
# peak RSS (rss_json); the first line then ends with the run's
# "provenance" object, no other line has it (tests/provenance_run.sh
# checks what it holds)
well_formed() {
  num='[0-9][0-9.e+-]*'
  head="^{\"step\": [0-9]*\(, \"loss\": $num\)\{0,1\}, \"tokens_per_s\": $num, \"elapsed_s\": $num, \"ms_per_step\": $num$(pace_json "$2")"
  head -1 "$1" | grep -q ', "provenance": {.*}}$' && ! sed 1d "$1" | grep -q '"provenance"' || return 1
  sed '1s/, "provenance": {.*}}$/}/' "$1" >"$1.noprov"
  ! sed '$d' "$1.noprov" | grep -v "$head}\$" >/dev/null && tail -n 1 "$1.noprov" | grep -q "$head$(rss_json "$2")}\$"
}

for n in 1 2; do
  # 5 steps of at least 20 ms, logged at steps 2, 4 and 5
  rm -f m.jsonl w.npy
  TRAIN_LOG_SLEEP_MS=20 run "$n" --steps 5 --log-every 2 --metrics m.jsonl --output w=w.npy
  printf '2 0.5\n4 0.25\n5 0.200000003\n' >want
  if [ $rc -ne 0 ]; then
    fail "$n rank(s): exit status $rc"; cat err
  elif ! steps_losses m.jsonl | cmp -s - want || ! well_formed m.jsonl "$n"; then
    fail "$n rank(s): metrics file, expected steps and losses:"; cat want; echo "got:"; cat m.jsonl
  else
    pass "$n rank(s): metrics steps and losses"
  fi
  # elapsed_s grows and is at least 20 ms per step done; ms_per_step >= 20
  if awk 'function field(k) { return substr($0, index($0, "\"" k "\": ") + length(k) + 4) + 0 }
           { s = field("step"); e = field("elapsed_s"); ms = field("ms_per_step")
             if (e < 0.020 * s || e <= prev || ms < 20) bad = 1; prev = e }
           END { exit bad || NR != 3 }' m.jsonl; then
    pass "$n rank(s): metrics timings"
  else
    fail "$n rank(s): metrics timings:"; cat m.jsonl
  fi
  if [ "$(grep -c "^step [24]/5  loss [0-9.]*  tokens/s [0-9]*  ([0-9.]* ms/step, [0-9.]* s elapsed$(pace_log "$n"))\$" out)" = 2 ] &&
     [ "$(grep -c "^step 5/5  loss [0-9.]*  tokens/s [0-9]*  ([0-9.]* ms/step, [0-9.]* s elapsed$(pace_log "$n")$(rss_log "$n"))\$" out)" = 1 ] &&
     [ "$(wc -l <out)" -eq 3 ] &&
     grep -q '^step 2/5  loss 0\.5 ' out && grep -q '^step 4/5  loss 0\.25 ' out &&
     grep -q '^step 5/5  loss 0\.2 ' out; then
    pass "$n rank(s): log lines with elapsed time"
  else
    fail "$n rank(s): log lines:"; cat out
  fi
  # w = 1 + 5 / 2 after five steps
  if [ -n "${NPYTOOL:-}" ] && ! "$NPYTOOL" compare w.npy f32 2 3.5 3.5; then
    fail "$n rank(s): output w"
  fi

  # --quiet: no log, the same metrics; every step logged with --log-every 1
  rm -f m.jsonl
  run "$n" --steps 3 --log-every 1 --quiet --metrics=m.jsonl
  printf '1 1\n2 0.5\n3 0.333333343\n' >want
  if [ $rc -eq 0 ] && [ ! -s out ] && [ ! -s err ] && steps_losses m.jsonl | cmp -s - want &&
     well_formed m.jsonl "$n"; then
    pass "$n rank(s): --quiet still writes the metrics"
  else
    fail "$n rank(s): --quiet: exit status $rc, stdout/stderr/metrics:"; cat out err m.jsonl
  fi

  # no loss reported: no "loss" in the log or the metrics
  TRAIN_LOG_NO_LOSS=1 run "$n" --steps 2 --metrics m.jsonl
  printf '1 -\n2 -\n' >want
  if [ $rc -eq 0 ] && ! grep -q loss out m.jsonl && [ "$(grep -c "elapsed$(pace_log "$n"))\$" out)" = 1 ] &&
     [ "$(grep -c "elapsed$(pace_log "$n")$(rss_log "$n"))\$" out)" = 1 ] &&
     steps_losses m.jsonl | cmp -s - want && well_formed m.jsonl "$n"; then
    pass "$n rank(s): no loss, no loss field"
  else
    fail "$n rank(s): no loss: exit status $rc, output and metrics:"; cat out err m.jsonl
  fi

  # a non-finite loss at step 3 of 5: exit 1 after step 3, one error line,
  # the metrics of steps 1 and 2, no output, no temporary left
  for bad in nan inf -inf; do
    rm -f m.jsonl w.npy
    TRAIN_LOG_BAD_STEP=3 TRAIN_LOG_BAD=$bad run "$n" --steps 5 --log-every 1 --metrics m.jsonl \
      --output w=w.npy
    printf '1 1\n2 0.5\n' >want
    if [ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] &&
       grep -qx "train_log_prog: rank 0: error: the loss is $bad at step 3; stopping" err &&
       steps_losses m.jsonl | cmp -s - want && [ ! -e w.npy ] &&
       [ -z "$(ls | grep '\.tmp$')" ] && ! grep -q '^step [345]/' out; then
      pass "$n rank(s): $bad loss at step 3 stops the run"
    else
      fail "$n rank(s): $bad loss at step 3: exit status $rc, stderr:"; cat err
      echo "metrics:"; cat m.jsonl; echo "files:"; ls
    fi
  done

  # --metrics targets that cannot be written: exit 1 before step 1, naming the file
  mkdir -p adir
  for target in adir "$work/missing/m.jsonl"; do
    run "$n" --steps 2 --metrics "$target"
    if [ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -qF "error: --metrics $target:" err &&
       [ ! -s out ]; then
      pass "$n rank(s): --metrics $target refused"
    else
      fail "$n rank(s): --metrics $target: exit status $rc, stdout and stderr:"; cat out err
    fi
  done
  # a link is refused and its target left as it was (--output refuses links too)
  echo precious >target.txt && rm -f link.jsonl && ln -s target.txt link.jsonl && rm -f fifo.jsonl && mkfifo fifo.jsonl
  for target in link.jsonl fifo.jsonl; do
    kind="a symbolic link"; [ $target = fifo.jsonl ] && kind="a FIFO"
    run "$n" --steps 2 --metrics $target
    if [ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] &&
       grep -qF "error: --metrics $target: $target is $kind, not a regular file (refusing to write it)" err &&
       [ ! -s out ] && [ "$(cat target.txt)" = precious ]; then
      pass "$n rank(s): --metrics $target ($kind) refused, nothing written through it"
    else
      fail "$n rank(s): --metrics $target: exit status $rc, target.txt holds '$(cat target.txt)', stdout and stderr:"
      cat out err
    fi
  done
  if [ "$(id -u)" -ne 0 ]; then
    mkdir -p ro && chmod a-w ro
    run "$n" --steps 2 --metrics ro/m.jsonl
    if [ $rc -eq 1 ] && grep -q 'error: --metrics ro/m.jsonl: .*Permission denied' err && [ ! -s out ]; then
      pass "$n rank(s): --metrics in a read-only directory refused"
    else
      fail "$n rank(s): --metrics ro/m.jsonl: exit status $rc, stdout and stderr:"; cat out err
    fi
  fi

  # --metrics and --output naming one file: a usage error, the file untouched
  echo keep >same.npy
  run "$n" --metrics same.npy --output w=same.npy
  if [ $rc -eq 2 ] && grep -q 'name the same file' err && [ "$(cat same.npy)" = keep ]; then
    pass "$n rank(s): --metrics and --output naming one file"
  else
    fail "$n rank(s): --metrics same.npy --output w=same.npy: exit status $rc, stderr:"; cat err
  fi

  # signals: after the loss in the log line (%.3g, by their log names) and
  # in the metrics (%.9g, null where not finite) and a checkpoint's
  # manifest; lr 0.125 / step: 0.125, 0.0625, 0.0416666679 (f32
  # 0x3d2aaaab), 0.03125; grad_norm the step, inf at step 3
  rm -rf m.jsonl ck
  TRAIN_LOG_SIGNALS=1 run "$n" --steps 4 --log-every 1 --metrics m.jsonl --checkpoint ck --checkpoint-every 2
  num='[0-9][0-9.e+-]*'
  if [ $rc -eq 0 ] && grep -q '^step 1/4  loss 1  lr 0\.125  gnorm 1  tokens/s ' out &&
     grep -q '^step 3/4  loss 0\.333333  lr 0\.0417  gnorm inf  tokens/s ' out &&
     grep -q '^{"step": 3, "loss": 0.333333343, "lr": 0.0416666679, "grad_norm": null, "tokens_per_s": ' m.jsonl &&
     grep -q '^{"step": 4, "loss": 0.25, "lr": 0.03125, "grad_norm": 4, "tokens_per_s": ' m.jsonl &&
     [ "$(grep -c "^{\"step\": [0-9], \"loss\": $num, \"lr\": $num, \"grad_norm\": \($num\|null\), \"tokens_per_s\": " m.jsonl)" -eq 4 ] &&
     tr -d ' \n' <ck/step-00000002/manifest.json | grep -q '"signals":{"lr":0.0625,"grad_norm":2\(.0\)\{0,1\}}' &&
     tr -d ' \n' <ck/step-00000004/manifest.json | grep -q '"signals":{"lr":0.03125,"grad_norm":4\(.0\)\{0,1\}}'; then
    pass "$n rank(s): signals in the log line, the metrics and the manifest"
  else
    fail "$n rank(s): signals: exit status $rc, output, metrics, manifests:"; cat out err m.jsonl ck/step-*/manifest.json
  fi

  # --max-time 1 with steps of 100 ms: the run ends, status 0, where one
  # more step would pass 1 s since it started (step 9 at the latest: 9
  # steps and a tenth take 1 s; at least 4 however slow the start), long
  # before --steps 1000; its last step is logged, checkpointed and its
  # w written (1 + N / 2); the log says why it ended
  rm -rf m.jsonl ck w.npy
  TRAIN_LOG_SLEEP_MS=100 run "$n" --steps 1000 --log-every 100 --max-time 1 --metrics m.jsonl \
    --checkpoint ck --output w=w.npy
  last=$(sed -n '$s/^{"step": \([0-9]*\),.*/\1/p' m.jsonl)
  if [ $rc -eq 0 ] && [ -n "$last" ] && [ "$last" -ge 4 ] && [ "$last" -le 9 ] &&
     grep -qx -- "--max-time 1 s: the run ends after step $last of --steps 1000" out &&
     grep -q "^step $last/1000  loss " out && [ "$(ls ck)" = "$(printf 'step-%08d' "$last")" ] &&
     { [ -z "${NPYTOOL:-}" ] || "$NPYTOOL" compare w.npy f32 2 "$(awk -v n="$last" 'BEGIN { print 1 + n / 2 }')" \
         "$(awk -v n="$last" 'BEGIN { print 1 + n / 2 }')"; }; then
    pass "$n rank(s): --max-time ends the run after step $last, checkpointed and written"
  else
    fail "$n rank(s): --max-time 1: exit status $rc, last step '$last', stdout, stderr, checkpoints:"
    cat out err; ls ck
  fi
  run "$n" --max-time 0
  if [ $rc -eq 2 ] && grep -qF "invalid value '0' for --max-time (expected a number from 0.001 to 1e9)" err; then
    pass "$n rank(s): --max-time 0 refused"
  else
    fail "$n rank(s): --max-time 0: exit status $rc, stderr:"; cat err
  fi

  # a state is not an input
  run "$n" --input adam.m.w=m.npy
  if [ $rc -eq 2 ] && grep -q '^train_log_prog: error: --input adam.m.w=m.npy: adam.m.w is optimizer state, not an input$' err &&
     [ ! -s out ]; then
    pass "$n rank(s): --input naming a state refused"
  else
    fail "$n rank(s): --input adam.m.w=m.npy: exit status $rc, stderr:"; cat err
  fi
done
exit $status
