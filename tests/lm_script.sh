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
# Then the timing run, at the same toy size with BUDGET=6 and no STEPS:
# the timing run's 240 steps are kept in RUNS/lm.timing.jsonl, and the
# steps lm.sh trains are worked out here from them by its rule (the
# fastest 40-step window after the first; the steps that fit in 97 % of
# the budget after 10 passes over the held-out batches, each a third of
# a step a batch), and must be the steps it says fit and compiles in.
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

DATA="$work/data" RUNS="$work/timed" EXPERTS= BUDGET=6 NP=2 CKPT=no MPIEXEC="$MPIEXEC" \
  SIZES="-D T=16 -D B=8 -D M=32 -D NH=2 -D H=64 -D L=2 -D E=4 -D LR=0.003 -D MIN_LR=0.0003 -D WARMUP=5 -D CLIP=1.0" \
  sh "$top/scripts/lm.sh" >"$work/out2" 2>"$work/err2" || fail "scripts/lm.sh with BUDGET=6: $(cat "$work/err2")"
t="$work/timed/lm.timing.jsonl"
windows=$(grep -c '"ms_per_step"' "$t" 2>/dev/null)
[ "$windows" = 6 ] && grep -q '^{"step": 240,' "$t" || fail "the timing run's metrics are not 6 windows to step 240: $(cat "$t")"
held=$(python3 -c 'import ast, sys
f = open(sys.argv[1], "rb"); f.read(8); n = int.from_bytes(f.read(2), "little")
print(ast.literal_eval(f.read(n).decode("latin1"))["shape"][0])' "$work/data/eval.npy")
want=$(grep '"ms_per_step"' "$t" | sed 's/.*"ms_per_step": *\([0-9.e+-]*\).*/\1/' | python3 -c '
import sys
w = [float(l) for l in sys.stdin][1:]
ms, held = min(w), int(sys.argv[1])
s = int((0.97 * 6 * 1000 - 10 * held * ms / 3) / ms)
print(s if s > 100 else 100)' "$held")
got=$(sed -n 's/^scripts\/lm.sh: .* ms a step on 2 ranks .*: \([0-9]*\) steps fit in 6 s$/\1/p' "$work/out2")
[ -n "$want" ] && [ "$got" = "$want" ] || fail "lm.sh sized $got steps from its timing run, the rule gives $want: $(cat "$work/out2")"
last=$(sed -n '$s/^{"step": *\([0-9]*\).*/\1/p' "$work/timed/lm.jsonl")
[ -n "$last" ] && [ "$last" -le "$want" ] || fail "the timed run ended at step '$last', past its $want"
[ $status -eq 0 ] && pass "lm_script (cross-entropy $ce after 20 steps; $got steps sized from the timing run)"
exit $status
