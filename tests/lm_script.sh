#!/bin/sh
# tests/lm_script.sh — scripts/lm.sh end to end at a toy size: the data
# made from a small file (DATA), a MoE model 2 layers deep and 32 wide
# trained for STEPS=20 (no timing run) on 2 ranks into a scratch RUNS,
# evaluated, checkpointed and sampled. Checked: exit status 0; the
# held-out cross-entropy it prints is the last eval_ce of its metrics
# file, a number between 0 and ln 256; the metrics reach step 20 with
# lr and grad_norm; the checkpoint of step 20 exists; the score on
# eval_all.npy (here a copy of eval.npy) is the last eval_ce, to the bit;
# the sample after the prompt is SAMPLE bytes.
set -u
. "$top_srcdir/tests/lib.sh"
LC_ALL=C
export LC_ALL

top=$(cd "$top_srcdir" && pwd)
python3 "$top/scripts/lm_data.py" --out "$work/data" --batch 8 --seq 16 --input "$top/man/gsl.7" >/dev/null ||
  fatal "lm_data.py"
# an eval_all.npy as the corpus has one: here the same batches as eval.npy,
# so the checkpoint's score on it must be the last evaluation's, to the bit
cp "$work/data/eval.npy" "$work/data/eval_all.npy"
GSLC_DIR=$(cd "$(dirname "$GSLC")" && pwd)
[ "$GSLC_DIR" = "$top" ] || skip "scripts/lm.sh runs ./gslc of the source tree (an in-tree build)"
DATA="$work/data" RUNS="$work/runs" EXPERTS= STEPS=20 NP=2 SAMPLE=24 PROMPT="The " MPIEXEC="$MPIEXEC" \
  SIZES="-D T=16 -D B=8 -D M=32 -D NH=2 -D H=64 -D L=2 -D E=4 -D LR=0.003 -D MIN_LR=0.0003 -D WARMUP=5 -D CLIP=1.0" \
  sh "$top/scripts/lm.sh" >"$work/out" 2>"$work/err" || fail "scripts/lm.sh: $(cat "$work/err")"
m="$work/runs/lm.jsonl"
ce=$(sed -n 's/^scripts\/lm.sh: moe: held-out cross-entropy \([0-9.e+-]*\) nats\/byte after 20 steps.*/\1/p' "$work/out")
last=$(grep '"eval_ce"' "$m" | sed -n '$s/.*"eval_ce": *\([0-9.e+-]*\).*/\1/p')
[ -n "$ce" ] && [ "$ce" = "$last" ] || fail "the printed cross-entropy '$ce' is not the metrics' last eval_ce '$last'"
awk -v c="$ce" 'BEGIN { exit !(c > 0 && c < 5.546) }' || fail "cross-entropy $ce is not in (0, ln 256)"
all=$(sed -n 's/^scripts\/lm.sh: moe: on all the held-out bytes ([^)]*eval_all.npy): \([0-9.e+-]*\) nats\/byte$/\1/p' "$work/out")
[ -n "$all" ] && [ "$all" = "$last" ] || fail "the score on eval_all.npy '$all' is not the last eval_ce '$last'"
grep -q '^{"step": 20, .*"lr": .*"grad_norm": ' "$m" || fail "no step-20 record with lr and grad_norm in $m"
[ -f "$work/runs/lm.ckpt/step-00000020/manifest.json" ] || fail "no checkpoint of step 20: $(ls "$work/runs/lm.ckpt")"
# the sample: the line after the notice, the prompt, then SAMPLE bytes, then a newline
n=$(sed -n '/a sample/,$p' "$work/out" | sed 1d | head -c 2000 | wc -c)
[ "$n" -eq $((4 + 24 + 1)) ] || fail "the sample is $n bytes with its prompt and newline, not 29"
[ $status -eq 0 ] && pass "lm_script (cross-entropy $ce after 20 steps)"
exit $status
