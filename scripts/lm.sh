#!/bin/sh
# scripts/lm.sh — train the byte-level language model for a fixed budget of
# wall-clock time on this machine's cores, evaluate it on the held-out
# bytes, and print a sample of its text.
#
#   sh scripts/lm.sh                 the MoE model (examples/lm.gsl)
#   MODEL=dense sh scripts/lm.sh     the dense one (examples/lm_dense.gsl)
#   MODEL=shared sh scripts/lm.sh    shared and fine-grained experts
#                                    (examples/lm_shared.gsl: DeepSeekMoE's)
#
# Settings, from the environment:
#   MODEL    moe (default), dense or shared
#   BUDGET   seconds of training, evaluations included (default 600)
#   NP       ranks, one a core (default 2; the mesh is [data = 1, expert = NP])
#   SIZES    the model's -D settings (default: the recipe, the same for
#            both models: scripts/lm_recipe.sh)
#   EXPERTS  the MoE model's -D settings of its experts, after SIZES
#            (default the recipe's: -D E=16 -D HE=256 -D CAP=4
#            -D BIAS_RATE=0.001 -D AUX=0; empty for the file's own, as
#            the shared model's default: capacity 1.0 and the aux loss)
#   PROMPT   the sample's prompt (default "The "), SAMPLE its bytes (400;
#            0: no sample)
#   CKPT     yes (default) or no: no checkpoint, and so no sample
#   STEPS    skip the timing run and train this many steps
#   CORPUS   corpus (default: lm_data.py's, Python's and Linux's
#            documentation, GCIDE and the fortunes, 2 % of the documents
#            held out) or fortunes (lm_data.py --fortunes, the recipe's data
#            before issue 44)
#   DATA     the data's directory (default data/CORPUS_tT, made if missing)
#   RUNS     where the program, metrics and checkpoint go (default runs)
#
# Method. The data (scripts/lm_data.py, windows of T + 1 bytes) are made if
# missing. The program is compiled with --precision bf16 and the recipe's
# sizes. A timing run of 240 steps, logged every 40, gives the step time:
# the fastest of its windows after the first (the first steps also make
# oneDNN's primitives, and a moe block's skipped slots make more, for fill
# counts not seen before, for a while; a routed model's step keeps getting
# faster as its load evens out, so a late window still over-estimates it);
# the timing run's metrics stay in RUNS/NAME.timing.jsonl. The steps that
# fit in 97 % of BUDGET at that speed, after the evaluations
# (10 of them, each costing what one timed pass over the held-out batches
# takes), are then trained, with the learning-rate schedule sized to them
# (-D STEPS: linear warmup, cosine decay to LR / 10), gradients clipped to
# norm 1. The run also gets --max-time BUDGET - 2 (the margin: mpirun's
# start and end): where the steps do not fit, it ends early, short of the
# schedule's end. The estimate errs to the fast side on purpose: the
# cosine's tail is flat (at 90 % of the schedule the lr is within 2.5 % of
# LR - MIN_LR of its floor), so a run cut short loses little, where a
# step time guessed long leaves budget unused (the mean of the last 40 of
# 160 steps, the guess before 2026-11-29, was 10 % long for the MoE and
# left 66 s of its ten minutes unused; doc/lm.md). The run writes
# RUNS/NAME.jsonl (--metrics) and, unless CKPT=no, a checkpoint at the end
# (RUNS/NAME.ckpt), prints the held-out cross-entropy of the last
# evaluation, the wall-clock time of the training command, and, on the
# corpus (whose evaluations read eval.npy, a fixed subset of the held-out
# batches), the checkpoint's cross-entropy on all of them (eval_all.npy,
# outside the budget, RUNS/NAME.all.jsonl); then it generates
# SAMPLE bytes from the checkpoint (temperature 0.8, top-k 40, seed 1).
# Exit status 0, or the failing command's.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
MODEL=${MODEL:-moe}
BUDGET=${BUDGET:-600}
NP=${NP:-2}
PROMPT=${PROMPT:-The }
SAMPLE=${SAMPLE:-400}
MPIEXEC=${MPIEXEC:-mpirun}
PYTHON=${PYTHON:-python3}
CORPUS=${CORPUS:-corpus}
CKPT=${CKPT:-yes}
case $MODEL in
moe) src=examples/lm.gsl name=lm ;;
dense) src=examples/lm_dense.gsl name=lm_dense ;;
shared) src=examples/lm_shared.gsl name=lm_shared ;;
*) echo "scripts/lm.sh: error: MODEL is moe, dense or shared, not '$MODEL'" >&2; exit 2 ;;
esac
case $CORPUS in
fortunes) corpus_flag=--fortunes ;;
corpus) corpus_flag= ;;
*) echo "scripts/lm.sh: error: CORPUS is fortunes or corpus, not '$CORPUS'" >&2; exit 2 ;;
esac
case $CKPT in
yes) ;;
no) SAMPLE=0 ;;
*) echo "scripts/lm.sh: error: CKPT is yes or no, not '$CKPT'" >&2; exit 2 ;;
esac
# the recipe: T, B, SIZES and RECIPE_EXPERTS (scripts/lm_recipe.sh)
. scripts/lm_recipe.sh
if [ "$MODEL" = moe ] && [ -z "${EXPERTS+x}" ]; then EXPERTS=$RECIPE_EXPERTS; fi
SIZES="$SIZES ${EXPERTS:-}"
[ -x ./gslc ] || { echo "scripts/lm.sh: error: no ./gslc: build first (sh scripts/quickstart.sh build)" >&2; exit 1; }

data=${DATA:-data/${CORPUS}_t$T}
runs=${RUNS:-runs}
if [ ! -f "$data/train.npy" ] || [ ! -f "$data/eval.npy" ]; then
  $PYTHON scripts/lm_data.py $corpus_flag --out "$data" --batch "$B" --seq "$T"
fi
mkdir -p "$runs"
# shellcheck disable=SC2086 # SIZES are words
flags="--precision bf16 -D DATA=1 -D EXPERT=$NP $SIZES"

if [ -z "${STEPS:-}" ]; then
  # shellcheck disable=SC2086
  ./gslc $flags -D STEPS=1000 "$src" -o "$runs/$name.timing"
  $MPIEXEC -n "$NP" "$runs/$name.timing" --steps 240 --log-every 40 --quiet --input "tokens=$data/train.npy" \
    --metrics "$runs/$name.timing.jsonl"
  # the fastest window after the first
  ms=$(sed -n 's/.*"ms_per_step": *\([0-9.e+-]*\).*/\1/p' "$runs/$name.timing.jsonl" |
    awk 'NR > 1 && (m == "" || $1 + 0 < m + 0) { m = $1 } END { if (m != "") print m }')
  [ -n "$ms" ] || { echo "scripts/lm.sh: error: the timing run logged no step time ($runs/$name.timing.jsonl)" >&2; exit 1; }
  # one pass over the held-out batches costs about their count of forward
  # passes, a third of a step each
  held=$($PYTHON -c 'import ast, sys
f = open(sys.argv[1], "rb"); f.read(8); n = int.from_bytes(f.read(2), "little")
print(ast.literal_eval(f.read(n).decode("latin1"))["shape"][0])' "$data/eval.npy")
  STEPS=$(awk -v ms="$ms" -v b="$BUDGET" -v h="$held" 'BEGIN { s = int((0.97 * b * 1000 - 10 * h * ms / 3) / ms); print (s > 100 ? s : 100) }')
  rm -f "$runs/$name.timing"
  echo "scripts/lm.sh: $ms ms a step on $NP ranks (the timing run's fastest window): $STEPS steps fit in $BUDGET s"
fi
# shellcheck disable=SC2086
./gslc $flags -D STEPS="$STEPS" "$src" -o "$runs/$name"
rm -rf "$runs/$name.ckpt"
every=$(( STEPS / 10 > 0 ? STEPS / 10 : 1 ))
set --
[ "$CKPT" = no ] || set -- --checkpoint "$runs/$name.ckpt" --checkpoint-every "$STEPS"
start=$(date +%s)
$MPIEXEC -n "$NP" "$runs/$name" --steps "$STEPS" --log-every "$every" --input "tokens=$data/train.npy" \
  --eval-every "$every" --eval-input "tokens=$data/eval.npy" --metrics "$runs/$name.jsonl" \
  "$@" --max-time "$((BUDGET > 4 ? BUDGET - 2 : BUDGET))"
end=$(date +%s)
ce=$(grep '"eval_ce"' "$runs/$name.jsonl" | sed -n '$s/.*"eval_ce": *\([0-9.e+-]*\).*/\1/p')
done=$(sed -n '$s/^{"step": *\([0-9]*\).*/\1/p' "$runs/$name.jsonl")
echo "scripts/lm.sh: $MODEL: held-out cross-entropy $ce nats/byte after $done steps, $((end - start)) s of training on $NP ranks"
if [ "$CKPT" = yes ] && [ -f "$data/eval_all.npy" ]; then
  # the corpus: the evaluations above read eval.npy, a fixed subset of the
  # held-out batches; the checkpoint is scored on every one of them
  $MPIEXEC -n "$NP" "$runs/$name" --steps "$done" --checkpoint "$runs/$name.ckpt" --resume --quiet \
    --input "tokens=$data/train.npy" --eval-input "tokens=$data/eval_all.npy" --metrics "$runs/$name.all.jsonl"
  all=$(sed -n '$s/.*"eval_ce": *\([0-9.e+-]*\).*/\1/p' "$runs/$name.all.jsonl")
  echo "scripts/lm.sh: $MODEL: on all the held-out bytes ($data/eval_all.npy): $all nats/byte"
fi
[ "$SAMPLE" -gt 0 ] || exit 0
echo "scripts/lm.sh: a sample (prompt '$PROMPT', $SAMPLE bytes, temperature 0.8, top-k 40, seed 1):"
printf '%s' "$PROMPT"
$MPIEXEC -n "$NP" "$runs/$name" --checkpoint "$runs/$name.ckpt" --generate "$SAMPLE" --prompt "$PROMPT" \
  --temperature 0.8 --top-k 40 --seed 1 --quiet
echo
