#!/bin/sh
# scripts/lm_experts.sh — more experts at the same FLOPs a token (issue 44,
# item 4; GShard's table in miniature): the byte-level LM trained with E
# experts a MoE layer for each E of ELIST, for the same number of steps and
# for the same wall-clock time, then two tables and a plot of held-out
# nats/byte, params, FLOPs a token, tokens/s and peak RSS against E.
#
#   sh scripts/lm_experts.sh
#   ELIST="4 16" TABLES=steps STEPS=2000 sh scripts/lm_experts.sh
#
# Settings, from the environment:
#   ELIST    the expert counts (default "1 4 16 64 256"); 1 is the dense model
#   TABLES   steps, time or both (default "steps time")
#   STEPS    the equal-steps runs' steps (default 16000)
#   BUDGET   the equal-time runs' seconds each (default 600, lm.sh's)
#   HE       the experts' width (default H / TOP: H the dense layers' width
#            in SIZES, else examples/lm.gsl's; TOP 2, or MOE's -D TOP)
#   MOE      more -D settings for the MoE runs, after E and HE (default
#            none; e.g. "-D CAP=2")
#   NP, CORPUS, SIZES, DATA, MPIEXEC, PYTHON   as scripts/lm.sh takes them
#            (SIZES: default the recipe, scripts/lm_recipe.sh)
#   RUNS     where everything goes (default runs/experts)
#
# Method. What is held equal is the FLOPs a token of everything but the
# router: every size but E is the recipe's, and a MoE layer's TOP = 2
# experts of width HE = H / 2 cost what a dense layer of width H costs. E = 1
# with top-2 would be a dense layer with a gate, so E = 1 is the dense model
# examples/lm_dense.gsl at the same sizes (a layer of width H in every layer:
# the same FLOPs a token, without the router). The router's 2 M E FLOPs a
# token a MoE layer grow with E and are counted apart (scripts/lm_experts.py
# reports each model's FLOPs a token from its sizes, and the router's part).
# Each run is scripts/lm.sh into RUNS/TABLE/eE (no checkpoint, no sample):
# for the steps table with STEPS=N (no timing run; --max-time far away),
# for the time table with BUDGET (lm.sh's timing run sizes the steps and
# the schedule, and --max-time ends the run). A run is kept once it ends
# with status 0 (RUNS/TABLE/eE/status) under the same settings
# (RUNS/TABLE/eE/settings): running the script again trains only what is
# missing, failed or asked differently, so a long table can be made over
# several sessions, one E at a time. params are gslc's count (--stats on one
# device). Then scripts/lm_experts.py writes RUNS/experts.md (the two
# tables) and RUNS/experts.png (matplotlib, if installed), from every run
# of ELIST and TABLES that has ended. Exit status 0 when every run ended
# well, 1 when one failed (the tables then say which), 2 on a usage error.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
ELIST=${ELIST:-1 4 16 64 256}
TABLES=${TABLES:-steps time}
STEPS=${STEPS:-16000}
BUDGET=${BUDGET:-600}
NP=${NP:-2}
CORPUS=${CORPUS:-corpus}
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || echo python3)}
MOE=${MOE:-}
runs=${RUNS:-runs/experts}
say() { echo "scripts/lm_experts.sh: $*"; }
usage() { echo "scripts/lm_experts.sh: error: $*" >&2; exit 2; }
# the recipe: T, B, SIZES (scripts/lm_recipe.sh)
. scripts/lm_recipe.sh
H=$(printf ' %s\n' "$SIZES" | sed -n 's/.* -D *H=\([0-9][0-9]*\)\( .*\)*$/\1/p')
[ -n "$H" ] || H=$(sed -n 's/^const H = \([0-9][0-9]*\).*/\1/p' examples/lm.gsl)
k=$(printf ' %s\n' "$MOE" | sed -n 's/.* -D *TOP=\([0-9][0-9]*\)\( .*\)*$/\1/p')
HE=${HE:-$((H / ${k:-2}))}
for t in $TABLES; do
  case $t in steps|time) ;; *) usage "TABLES holds steps and time, not '$t'" ;; esac
done
for e in $ELIST; do
  case $e in ''|*[!0-9]*) usage "ELIST holds whole numbers, not '$e'" ;; esac
  [ "$e" -ge 1 ] || usage "ELIST: an expert count is at least 1, not $e"
  [ "$e" -eq 1 ] || [ $((e % NP)) -eq 0 ] || usage "ELIST: $e experts cannot be split over NP = $NP ranks"
done
[ -x ./gslc ] || { echo "scripts/lm_experts.sh: error: no ./gslc: build first (sh scripts/quickstart.sh build)" >&2; exit 1; }
data=${DATA:-data/${CORPUS}_t$T}
mkdir -p "$runs"
manifest=$runs/experts.tsv
: >"$manifest.new"
status=0
for t in $TABLES; do
  for e in $ELIST; do
    dir=$runs/$t/e$e
    if [ "$e" -eq 1 ]; then
      model=dense name=lm_dense src=examples/lm_dense.gsl experts=
    else
      model=moe name=lm src=examples/lm.gsl experts="-D E=$e -D HE=$HE $MOE"
    fi
    # params: gslc's count on one device (every param f32, 4 bytes)
    # shellcheck disable=SC2086 # SIZES and experts are words
    params=$(./gslc --stats $SIZES $experts -D DATA=1 -D EXPERT=1 "$src" | sed -n 's/^params  *\([0-9][0-9]*\)$/\1/p')
    [ -n "$params" ] || { echo "scripts/lm_experts.sh: error: gslc --stats gave no params for E = $e" >&2; exit 1; }
    params=$((params / 4))
    # what the run was asked: kept only if asked the same again
    settings="$t $model NP=$NP CORPUS=$CORPUS DATA=$data $SIZES $experts"
    if [ "$t" = steps ]; then settings="$settings STEPS=$STEPS"; else settings="$settings BUDGET=$BUDGET"; fi
    if [ "$(cat "$dir/status" 2>/dev/null)" = 0 ] && [ "$(cat "$dir/settings" 2>/dev/null)" = "$settings" ]; then
      say "$t, E = $e: kept ($dir)"
    else
      rm -rf "$dir"
      mkdir -p "$dir"
      printf '%s\n' "$settings" >"$dir/settings"
      say "$t, E = $e ($model, $params params): training, output in $dir/lm.sh.log"
      rc=0
      if [ "$t" = steps ]; then
        # --max-time a day: the steps decide the run's end
        STEPS=$STEPS BUDGET=86400 MODEL=$model EXPERTS=$experts SIZES=$SIZES NP=$NP CORPUS=$CORPUS \
          DATA=$data RUNS=$dir CKPT=no PYTHON=$PYTHON sh scripts/lm.sh >"$dir/lm.sh.log" 2>&1 || rc=$?
      else
        (unset STEPS; BUDGET=$BUDGET MODEL=$model EXPERTS=$experts SIZES=$SIZES NP=$NP CORPUS=$CORPUS \
          DATA=$data RUNS=$dir CKPT=no PYTHON=$PYTHON sh scripts/lm.sh) >"$dir/lm.sh.log" 2>&1 || rc=$?
      fi
      rm -f "$dir/$name"
      echo "$rc" >"$dir/status"
      if [ "$rc" -ne 0 ]; then
        status=1
        say "$t, E = $e: scripts/lm.sh failed (status $rc); the end of $dir/lm.sh.log:"
        tail -n 5 "$dir/lm.sh.log" | sed 's/^/  /'
      else
        grep '^scripts/lm.sh: .*held-out' "$dir/lm.sh.log" | sed 's/^scripts\/lm.sh: /  /' || true
      fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$e" "$model" "$(cat "$dir/status")" "$params" \
      "$dir/$name.jsonl" "$dir/lm.sh.log" "$SIZES $experts" >>"$manifest.new"
  done
done
mv "$manifest.new" "$manifest"
$PYTHON scripts/lm_experts.py "$manifest" -o "$runs/experts.md" --png "$runs/experts.png" \
  --steps "$STEPS" --budget "$BUDGET" --np "$NP" --corpus "$CORPUS" || exit 1
exit $status
