#!/bin/sh
# tests/lm_plot.sh — scripts/lm_plot.py on synthetic --metrics files: an MoE
# run whose two blocks (lm.gsl:74, lm.gsl:74#2) record every router signal
# (load, load_min, load_max, load_std, drop, idle, entropy, bias_range) for
# 300 steps, evaluations every 100, and an older-format one with load and
# drop alone. Both give a PNG; the gnuplot program (--script) draws each
# quantity of each block the file has, and no bias range where it has none.
# A run of 30000 records has every k-th of them drawn, at most about 2000,
# and the last. The numbers are made up: what is checked is what is drawn.
# Skipped (77) without gnuplot or python3.
set -u
. "$top_srcdir/tests/lib.sh"
command -v gnuplot >/dev/null 2>&1 || skip "no gnuplot"
command -v python3 >/dev/null 2>&1 || skip "no python3"
cd "$work" || exit 1
plot=$top_srcdir/scripts/lm_plot.py

# moe.jsonl: the new format; old.jsonl: the old one (load and drop alone); dense.jsonl: no moe block
metrics='BEGIN {
  for (s = 1; s <= 300; s++) {
    line = sprintf("{\"step\": %d, \"loss\": %.4f", s, 3 / (1 + s / 50))
    for (b = 1; b <= 2; b++) {
      n = b == 1 ? "lm.gsl:74" : "lm.gsl:74#2"
      hi = 0.25 + 0.2 / (b + s / 30); lo = 0.25 - 0.2 / (b + s / 30)
      line = line sprintf(", \"moe.%s.load\": [%.4f, 0.25, 0.25, %.4f]", n, hi, lo) \
                  sprintf(", \"moe.%s.drop\": %.4f", n, 0.1 / (1 + s / 20))
      if (fmt == "new")
        line = line sprintf(", \"moe.%s.load_min\": %.4f, \"moe.%s.load_max\": %.4f", n, 4 * lo, n, 4 * hi) \
                    sprintf(", \"moe.%s.load_std\": %.4f, \"moe.%s.idle\": %.4f", n, 4 * (hi - 0.25) / 1.414,
                            n, s < 50 ? 0.25 : 0) \
                    sprintf(", \"moe.%s.entropy\": %.4f, \"moe.%s.bias_range\": %.4f", n, 1.386 - 0.3 / (1 + s / 40),
                            n, 0.01 * s / 300)
    }
    print line "}"
    if (s % 100 == 0)
      printf "{\"step\": %d, \"eval_ce\": %.4f}\n", s, 3.1 / (1 + s / 50)
  }
}'
awk -v fmt=new "$metrics" >moe.jsonl
awk -v fmt=old "$metrics" >old.jsonl
awk 'BEGIN {
  for (s = 1; s <= 300; s++) {
    printf "{\"step\": %d, \"loss\": %.4f}\n", s, 3.2 / (1 + s / 60)
    if (s % 100 == 0)
      printf "{\"step\": %d, \"eval_ce\": %.4f}\n", s, 3.3 / (1 + s / 60)
  }
}' >dense.jsonl
grep -q '"moe.lm.gsl:74#2.bias_range": ' moe.jsonl || fail "moe.jsonl has no bias_range"
grep -q 'bias_range' old.jsonl && fail "old.jsonl has bias_range"

for f in moe old; do
  rm -f out.png
  python3 "$plot" --moe $f.jsonl --dense dense.jsonl --eval eval_ce -o out.png --script $f.gp >$f.out 2>$f.err
  rc=$?
  [ $rc -eq 0 ] || { cat $f.out $f.err; fail "$f: exit $rc"; continue; }
  [ -s out.png ] || fail "$f: no out.png"
  [ "$(od -An -tx1 -N4 out.png | tr -d ' ')" = 89504e47 ] || fail "$f: out.png is not a PNG"
  [ -s $f.err ] && { cat $f.err; fail "$f: warnings on stderr"; }
  grep -q '"MoE held out (eval_ce)"' $f.gp || fail "$f: no MoE eval curve"
  grep -q 'multiplot layout 3,1' $f.gp || fail "$f: not three panels: $(grep multiplot $f.gp)"
  # no more than about 2000 data lines a block: 300 records each, all drawn
  [ "$(sed -n '/^\$router0 << EOD$/,/^EOD$/p' $f.gp | grep -c '^[0-9]')" -eq 300 ] || fail "$f: block 0's records"
done

# the new format: every quantity of each block, bias range on the right axis
for n in 'lm.gsl:74' 'lm.gsl:74#2'; do
  for q in max std min dropped idle entropy 'bias range'; do
    grep -qF "\"$n $q\"" moe.gp || fail "moe: no curve \"$n $q\""
  done
done
grep -qF 'set y2label "entropy (nats), bias range"' moe.gp || fail "moe: the right axis's label"
grep -q 'axes x1y2 .* title "lm.gsl:74#2 bias range"' moe.gp || fail "moe: bias range not on the right axis"
grep -q '^lm_plot: router lm.gsl:74#2 *300 points, dropped .*, entropy .*, bias range ' moe.out ||
  fail "moe: the router's summary: $(grep router moe.out)"

# the old format: the busiest expert's load and the drop of each block, nothing else, no right axis
for n in 'lm.gsl:74' 'lm.gsl:74#2'; do
  for q in max dropped; do
    grep -qF "\"$n $q\"" old.gp || fail "old: no curve \"$n $q\""
  done
done
grep -Eq '[ "](bias range|entropy|idle|std|min)[ "]' old.gp &&
  fail "old: draws what the file lacks: $(grep -E '[ "](bias range|entropy|idle|std|min)[ "]' old.gp)"
grep -q '^set y2label' old.gp && fail "old: a right axis"

# a long run: every k-th record of 30000, and the last
awk 'BEGIN {
  for (s = 1; s <= 30000; s++)
    printf "{\"step\": %d, \"loss\": 2, \"moe.b.drop\": 0.01, \"moe.b.entropy\": 1}\n", s
}' >long.jsonl
if python3 "$plot" --moe long.jsonl --dense dense.jsonl -o long.png --script long.gp >long.out 2>long.err; then
  k=$(sed -n '/^\$router0 << EOD$/,/^EOD$/p' long.gp | grep -c '^[0-9]')
  [ "$k" -le 2001 ] && [ "$k" -ge 1000 ] || fail "long: $k records of 30000 drawn"
  sed -n '/^\$router0 << EOD$/,/^EOD$/p' long.gp | grep -q '^30000 ' || fail "long: the last record not drawn"
  grep -q 'multiplot layout 2,1' long.gp || fail "long: not two panels: $(grep multiplot long.gp)"
else
  cat long.out long.err; fail "long: exit status"
fi

[ $status -eq 0 ] && pass "lm_plot (the router's panels, from new- and old-format metrics)"
exit $status
