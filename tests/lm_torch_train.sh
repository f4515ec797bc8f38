#!/bin/sh
# tests/lm_torch_train.sh — bench/lm_torch_train.py, scripts/lm.sh's recipe
# in PyTorch, at a toy size (2 layers, width 32, 4 experts of width 32, T
# 16) on data made from a small file; skipped where no python3 has torch.
# Checked, for 60 steps in f32, index dispatch, on one thread: the initial
# loss (step 1) within 0.1 of ln 256; the held-out cross-entropy falls by
# more than 1 nat/byte from the first evaluation to the last; 10 records (one every
# STEPS / 10 steps) with GSL's keys; the lr of GSL's schedule (warmup 5,
# cosine from 3e-3 to 3e-4 over 60 steps: 3e-3 at step 6, 0.00293392618 at
# step 12 as GSL logs it); the routing bias's range at each record a whole
# number of its rate, within 2 steps times it, not 0 throughout;
# scripts/lm_runs.py reads the file. Then, with a
# budget of 8 s, --precision auto and --way auto: the six pairs of f32 or
# bf16 and index, einsum or loop timed, one chosen, and the run (its last
# record's elapsed time and evaluation) ends within 1.5 times the budget.
# Then --timing-limit 0.5 against 100000 timing steps: the three f32 pairs'
# timings end at the limit, after 4 steps or more, and say so. Last, the
# routing bias against hand-worked values, and moe_torch's self-check: the
# index and loop ways compute the einsum way's y, aux and gradients.
set -u
. "$top_srcdir/tests/lib.sh"
LC_ALL=C
export LC_ALL

top=$(cd "$top_srcdir" && pwd)
py=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch, numpy' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || skip "lm_torch_train: no python3 with torch and numpy (Debian: python3-torch)"
python3 "$top/scripts/lm_data.py" --out "$work/data" --batch 8 --seq 16 --input "$top/man/gsl.7" >/dev/null ||
  fatal "lm_data.py"
sizes="--T 16 --B 8 --M 32 --NH 2 --H 64 --HE 32 --L 2 --E 4 --lr 0.003 --min-lr 0.0003 --warmup 5 --clip 1.0"

# shellcheck disable=SC2086 # sizes are words
"$py" "$top/bench/lm_torch_train.py" --data "$work/data" $sizes --steps 60 --precision f32 --way index --threads 1 \
  --metrics "$work/m.jsonl" >"$work/out" 2>&1 || fail "lm_torch_train.py --steps 60: $(cat "$work/out")"
first=$(sed -n 's/^step 1 loss \([0-9.]*\) .*/\1/p' "$work/out")
awk -v l="$first" 'BEGIN { exit !(l != "" && l - log(256) < 0.1 && log(256) - l < 0.1) }' ||
  fail "the initial loss '$first' is not within 0.1 of ln 256"
"$py" - "$work/m.jsonl" <<'EOF' || status=1
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
bad = []
if [r["step"] for r in recs] != list(range(6, 61, 6)):
    bad.append("records at steps %s, not 6, 12, ..., 60" % [r["step"] for r in recs])
keys = {"step", "loss", "lr", "grad_norm", "eval_loss", "eval_ce", "tokens_per_s", "elapsed_s", "ms_per_step", "eval_s"}
for r in recs:
    if not keys <= set(r):
        bad.append("step %s lacks %s" % (r["step"], sorted(keys - set(r))))
if "peak_rss_kib" not in recs[-1] or "provenance" not in recs[0]:
    bad.append("no peak_rss_kib in the last record or no provenance in the first")
if not recs[0]["eval_ce"] - recs[-1]["eval_ce"] > 1.0:
    bad.append("held-out %.4f -> %.4f: it did not fall by 1" % (recs[0]["eval_ce"], recs[-1]["eval_ce"]))
if abs(recs[0]["lr"] - 0.003) > 1e-9 or abs(recs[1]["lr"] - 0.00293392618) > 1e-8:
    bad.append("lr %r at step 6 and %r at step 12, not GSL's 0.003 and 0.00293392618" % (recs[0]["lr"], recs[1]["lr"]))
# the routing bias (default rate R = 0.001) moves in training: after k steps each of the moe layer's 4
# biases is n R for an integer n in [-k, k], so its range is a whole number of R's, at most 2 k R, and
# not 0 at every record (that would take every expert's moves up and down to cancel alike)
R, ranges = 0.001, [r.get("moe.layer1.bias_range") for r in recs]
if None in ranges:
    bad.append("records without moe.layer1.bias_range: %s" % ranges)
elif not all(0 <= x <= 2 * r["step"] * R + 1e-6 and abs(x / R - round(x / R)) < 1e-3 for x, r in zip(ranges, recs)) \
        or not max(ranges) > 0:
    bad.append("bias ranges %s: not whole numbers of R = 0.001 within 2 k R, or all 0" % ranges)
for b in bad:
    print("FAIL: lm_torch_train: " + b)
sys.exit(1 if bad else 0)
EOF
python3 "$top/scripts/lm_runs.py" "torch=$work/m.jsonl" >"$work/table" 2>&1 &&
  grep -q '^| torch | 60 | .* | [0-9.]* (60) |$' "$work/table" || fail "lm_runs.py on its metrics: $(cat "$work/table")"

# shellcheck disable=SC2086
"$py" "$top/bench/lm_torch_train.py" --data "$work/data" $sizes --budget 8 --timing-steps 8 --threads 1 \
  --metrics "$work/b.jsonl" >"$work/outb" 2>&1 || fail "lm_torch_train.py --budget 8: $(cat "$work/outb")"
n=$(grep -c '^timing \(f32\|bf16\) \(index\|einsum\|loop\) [0-9.]* ms a step' "$work/outb")
[ "$n" -eq 6 ] && grep -q '^precision \(f32\|bf16\), way \(index\|einsum\|loop\)$' "$work/outb" ||
  fail "--precision auto --way auto: not 6 pairs timed and one chosen: $(cat "$work/outb")"
end=$(tail -n 1 "$work/b.jsonl" | sed 's/.*"elapsed_s": \([0-9.]*\).*"eval_s": \([0-9.]*\).*/\1 \2/')
awk -v e="$end" 'BEGIN { split(e, t, " "); exit !(t[1] + t[2] > 0 && t[1] + t[2] < 12) }' ||
  fail "--budget 8: the run ended at '$end' (elapsed, last evaluation) s"
# --timing-limit: each pair's timing ends once it has taken the limit, 4 steps or more run
# shellcheck disable=SC2086
"$py" "$top/bench/lm_torch_train.py" --data "$work/data" $sizes --steps 2 --precision f32 --timing-steps 100000 \
  --timing-limit 0.5 --threads 1 >"$work/outl" 2>&1 || fail "lm_torch_train.py --timing-limit 0.5: $(cat "$work/outl")"
ran=$(sed -n 's/^timing f32 \(index\|einsum\|loop\) [0-9.]* ms a step, [0-9.]* ms a held-out batch (\([0-9]*\) steps of 100000: --timing-limit 0.5 s)$/\2/p' "$work/outl")
[ "$(echo $ran | wc -w)" -eq 3 ] && for k in $ran; do [ "$k" -ge 4 ] && [ "$k" -lt 100000 ] || ran=; done && [ -n "$ran" ] ||
  fail "--timing-limit 0.5: not three pairs ended by the limit after 4 or more steps: $(cat "$work/outl")"
# the routing bias (--bias-rate, GSL's bias_rate), worked by hand: counts 3, 1, 2, 2 of 8 choices over
# E = 4 (even 1/4) move the biases by -R, +R, 0, 0; a bias of 1 on expert 3 makes it each token's
# first choice while the weights stay the gates' shares of the two chosen
"$py" - "$top/bench" <<'PY' || status=1
import math, sys
sys.dont_write_bytecode = True   # no __pycache__ in the source tree's bench/
sys.path.insert(0, sys.argv[1])
import torch
from moe_torch import bias_step, self_check, top2routes
bad = []
try:
    self_check(train=True)
except AssertionError as e:
    bad.append("moe_torch.self_check: %s" % e)
b = torch.zeros(4)
bias_step(b, torch.tensor([3.0, 1.0, 2.0, 2.0]), 0.5)
if b.tolist() != [-0.5, 0.5, 0.0, 0.0]:
    bad.append("bias_step: %s, not [-0.5, 0.5, 0, 0]" % b.tolist())
logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 0.5]]])   # [G 1, S 2, E 4]
r = top2routes(logits, 4, bias=torch.tensor([0.0, 0.0, 0.0, 1.0]))
g = [[math.exp(x) / sum(math.exp(y) for y in row) for x in row] for row in logits[0].tolist()]
# gates + bias: token 0 (gates .64 .24 .09 .03) takes expert 3 (1.03), then 0; token 1 (.04 .79 .11 .06)
# expert 3 (1.06), then 1
want = ([3, 3], [0, 1])
w1 = [g[0][3] / (g[0][3] + g[0][0]), g[1][3] / (g[1][3] + g[1][1])]
if (r.e1[0].tolist(), r.e2[0].tolist()) != want:
    bad.append("top2routes with a bias: experts %s, %s, not %s" % (r.e1[0].tolist(), r.e2[0].tolist(), want))
elif max(abs(x - y) for x, y in zip(r.w1[0].tolist(), w1)) > 1e-6:
    bad.append("top2routes with a bias: weights %s, not the gates' %s" % (r.w1[0].tolist(), w1))
if r.routed.tolist() != [1.0, 1.0, 0.0, 2.0]:
    bad.append("top2routes: routed %s, not [1, 1, 0, 2]" % r.routed.tolist())
for x in bad:
    print("FAIL: lm_torch_train: " + x)
sys.exit(1 if bad else 0)
PY
[ $status -eq 0 ] && pass "lm_torch_train (initial loss $first; $(tail -n 1 "$work/out"))"
exit $status
