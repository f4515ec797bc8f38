#!/bin/sh
# tests/lm_experts.sh — scripts/lm_experts.sh end to end at a toy size: E =
# 1 (the dense model) and E = 4 (experts of width H / 2 = 32, top-2), a
# model 2 layers deep and 32 wide, on data made from a small file, for 20
# steps (the steps table) and for 8 s (the time table, lm.sh's timing run
# first), on 2 ranks. Checked: exit status 0; RUNS/experts.md has both
# tables, each with a row for E = 1 and E = 4 in that order; the params
# are the hand-worked counts (dense 33,600; E = 4 37,824: they grow with
# E) and the FLOPs a token too (dense 53,248; E = 4 53,504, the dense
# model's plus the router's 2 M E = 256: equal but for the router); the
# steps table's runs made 20 steps; every held-out cross-entropy is a
# number in (0, ln 256 + 1) and every tokens/s a positive number; the
# picture is written where /usr/bin/python3 has matplotlib. Run again, the
# script keeps every run and writes the same tables; a manifest whose
# params disagree with the formula is refused.
set -u
. "$top_srcdir/tests/lib.sh"
LC_ALL=C
export LC_ALL

top=$(cd "$top_srcdir" && pwd)
python3 "$top/scripts/lm_data.py" --out "$work/data" --batch 8 --seq 16 --input "$top/man/gsl.7" >/dev/null ||
  fatal "lm_data.py"
GSLC_DIR=$(cd "$(dirname "$GSLC")" && pwd)
[ "$GSLC_DIR" = "$top" ] || skip "scripts/lm_experts.sh runs ./gslc of the source tree (an in-tree build)"
run() {
  ELIST="1 4" TABLES="steps time" STEPS=20 BUDGET=8 NP=2 DATA="$work/data" RUNS="$work/runs" MPIEXEC="$MPIEXEC" \
    SIZES="-D T=16 -D B=8 -D M=32 -D NH=2 -D H=64 -D L=2 -D LR=0.003 -D MIN_LR=0.0003 -D WARMUP=5 -D CLIP=1.0" \
    sh "$top/scripts/lm_experts.sh"
}
run >"$work/out" 2>"$work/err" || fail "scripts/lm_experts.sh: $(cat "$work/out" "$work/err")"
md="$work/runs/experts.md"
[ -f "$md" ] || { fail "no $md"; cat "$work/out" "$work/err"; exit 1; }

# the rows of each table: E, params, FLOP, router, steps, tokens/s, held-out
for t in steps time; do
  title=$([ $t = steps ] && echo "Equal steps" || echo "Equal time")
  awk -v t="$title" '/^## / { on = index($0, "## " t) == 1; next } on && /^\| [0-9]/' "$md" |
    awk -F' \\| ' '{ gsub(/,/, "", $4); gsub(/,/, "", $5); gsub(/,/, "", $8); gsub(/,/, "", $11)
      sub(/^\| /, "", $1); sub(/ \|$/, "", $14); split($6, r, " ")
      print $1, $4, $5, r[1], $8, $11, $14 }' >"$work/$t.rows"
  es=$(cut -d' ' -f1 "$work/$t.rows" | tr '\n' ' ')
  [ "$es" = "1 4 " ] || fail "$t table: rows for E = '$es', not 1 and 4"
  # hand-worked: dense V M + T M + 2 (2L + 1) M + 4 L M^2 + L 2 M H + M V = 33600,
  # FLOP L (8 M^2 + 4 T M) + L 4 M H + 2 M V = 53248; the MoE's E = 4: one dense
  # layer fewer (- 4096 params) and one MoE layer (M E + 2 E M HE = 8320), FLOP
  # the dense model's + 2 M E = 256 (the router: TOP HE = H, the experts cost a dense layer)
  awk -v t="$t" 'NR == 1 { p1 = $2; f1 = $3 }
    NR == 1 && !($2 == 33600 && $3 == 53248 && $4 == 0) { print "FAIL: " t ": dense row params/FLOP/router " $2 " " $3 " " $4; bad = 1 }
    NR == 2 && !($2 == 37824 && $3 == 53504 && $4 == 256) { print "FAIL: " t ": E = 4 row params/FLOP/router " $2 " " $3 " " $4; bad = 1 }
    NR == 2 && !($2 > p1 && $3 - f1 == $4) { print "FAIL: " t ": params do not grow with E or FLOPs differ by more than the router"; bad = 1 }
    t == "steps" && $5 != 20 { print "FAIL: steps: E = " $1 " made " $5 " steps, not 20"; bad = 1 }
    !($6 + 0 > 0 && $6 + 0 < 1e12) { print "FAIL: " t ": E = " $1 " tokens/s is " $6; bad = 1 }
    !($7 + 0 > 0 && $7 + 0 < 6.546) { print "FAIL: " t ": E = " $1 " held-out is " $7; bad = 1 }
    END { exit bad }' "$work/$t.rows" || status=1
done
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  [ -s "$work/runs/experts.png" ] || fail "matplotlib is installed, yet no $work/runs/experts.png"
else
  grep -q 'no plot: matplotlib is not installed' "$work/out" || fail "no note that the plot needs matplotlib"
fi

# again: every run kept, the same tables
cp "$md" "$work/first.md"
run >"$work/out2" 2>"$work/err2" || fail "scripts/lm_experts.sh, run again: $(cat "$work/err2")"
[ "$(grep -c ': kept (' "$work/out2")" -eq 4 ] || fail "run again, not every run was kept: $(cat "$work/out2")"
cmp -s "$md" "$work/first.md" || fail "run again, the tables differ"

# a manifest whose params are not the formula's is refused
sed '1s/\t33600\t/\t33601\t/' "$work/runs/experts.tsv" >"$work/bad.tsv"
if python3 "$top/scripts/lm_experts.py" "$work/bad.tsv" -o "$work/bad.md" 2>"$work/err3"; then
  fail "a manifest with the wrong params was taken"
else
  grep -q 'gslc counts 33601 params for E = 1, the formula 33600' "$work/err3" || fail "wrong params: $(cat "$work/err3")"
fi
[ $status -eq 0 ] && pass "lm_experts ($(tr '\n' ';' <"$work/steps.rows"))"
exit $status
