#!/bin/sh
# tests/moe_signals.sh — each moe block's signals (stdlib/moe.gsl's
# routing_signals, reported by gsl_step): its experts' loads in every
# --metrics record as "moe.NAME.load", the fraction of its routed choices
# dropped at capacity as "moe.NAME.drop" there and as dropK in the log
# line, on routings worked out by hand, alike on 1 and 2 ranks.
#
# Two groups hold the same 4 tokens; wg = ln 3 * I gives [1, 0] the gates
# [3/4, 1/4] and [0, 1] the gates [1/4, 3/4]: first choices 0, 0, 1, 0,
# second choices 1, 1, 0, 1.
#   block 1 (name = "router"): top 1, capacity 0.5, C = ceil(0.5 * 4 / 2)
#     = 1: expert 0 keeps token 0 and drops tokens 1 and 3; load [3/4,
#     1/4], drop 2/4.
#   block 2 (unnamed: "p.gsl:12"): top 2 without random routing, capacity
#     0.75, C = ceil(0.75 * 2 * 4 / 2) = 3: expert 0 takes the first choices
#     of tokens 0, 1, 3 (slots 0-2), then token 2's second choice finds it
#     full; expert 1 takes token 2's first choice (slot 0) and the second
#     choices of tokens 0 and 1 (slots 1, 2), and token 3's finds it full.
#     8 routed choices, 4 to each expert: load [1/2, 1/2], drop 2/8.
# The spread, from l_e = E * load_e: block 1 l = [3/2, 1/2], so load_min
# 0.5, load_max 1.5 (logged as max1), load_std sqrt(((1/2)^2 + (1/2)^2) /
# 2) = 0.5, idle 0; block 2 l = [1, 1]: 1, 1 (max2), 0, 0. The router's
# entropy: every token's gates are 3/4 and 1/4, so each block's is
# -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.5623351446 nats (to 1e-6 in f32).
# A bad name is a located error.
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1

cat >p.gsl <<'GSL'
const D = 1
mesh [d = D]
input x: f32[2, 4, 2] split(0)
input wg: f32[2, 2]
param b: f32[2] = zeros()
let y, aux = moe(x, gate = wg, top = 1, capacity = 0.5, name = "router") (t, e) {
  return t * 2
}
let z, aux2 = moe(x + b, gate = wg, top = 2, capacity = 0.75, random_routing = false) (t, e) {
  return t * 2
}
train mean(y * y) + mean(z * z) with sgd(lr = 0)
GSL
echo "1 0 1 0 0 1 1 0 1 0 1 0 0 1 1 0" | "$NPYTOOL" write x.npy f32 2,4,2 - &&
  echo "1.0986123 0 0 1.0986123" | "$NPYTOOL" write wg.npy f32 2,2 - || exit 1
want='"moe.router.load": [0.75, 0.25], "moe.router.drop": 0.5, "moe.router.load_min": 0.5, "moe.router.load_max": 1.5, "moe.router.load_std": 0.5, "moe.router.idle": 0, "moe.router.entropy": '
want2='"moe.p.gsl:9.load": [0.5, 0.5], "moe.p.gsl:9.drop": 0.25, "moe.p.gsl:9.load_min": 1, "moe.p.gsl:9.load_max": 1, "moe.p.gsl:9.load_std": 0, "moe.p.gsl:9.idle": 0, "moe.p.gsl:9.entropy": '
for np in 1 2; do
  "$GSLC" -D D=$np p.gsl -o p$np || { fail "gslc -D D=$np"; continue; }
  timeout 120 $MPIEXEC -n $np ./p$np --steps 2 --input x=x.npy --input wg=wg.npy --metrics m$np.jsonl \
    --log-every 1 >out$np 2>err$np || { fail "$np ranks: $(cat err$np)"; continue; }
  [ "$(grep -cF "$want" m$np.jsonl)" -eq 2 ] || fail "$np ranks: metrics $(cat m$np.jsonl), want $want"
  [ "$(grep -cF "$want2" m$np.jsonl)" -eq 2 ] || fail "$np ranks: metrics $(cat m$np.jsonl), want $want2"
  n=$(sed 's/"moe\.[^"]*\.entropy": \([-0-9.e+]*\)/\n\1\n/g' m$np.jsonl | grep -x '[-0-9.e+]*' |
    awk '{ d = $1 - 0.5623351446; if (d < 0) d = -d; if (d < 1e-6) n++ } END { print n + 0 }')
  [ "$n" -eq 4 ] || fail "$np ranks: $n of 4 entropies are 0.5623351446 to 1e-6: $(cat m$np.jsonl)"
  [ "$(grep -c '  drop1 0.5  max1 1.5  drop2 0.25  max2 1  ' out$np)" -eq 2 ] || fail "$np ranks: log $(cat out$np)"
done

sed 's/name = "router"/name = 3/' p.gsl >bad1.gsl
sed 's/name = "router"/name = "a b"/' p.gsl >bad2.gsl
"$GSLC" bad1.gsl -o bad 2>err1 && fail "name = 3 was accepted"
grep -q "bad1.gsl:6:64: error: moe's name must be a string" err1 || fail "name = 3: $(cat err1)"
"$GSLC" bad2.gsl -o bad 2>err2 && fail "name = \"a b\" was accepted"
grep -q "bad2.gsl:6:64: error: moe's name \"a b\" must be letters, digits" err2 || fail "name = \"a b\": $(cat err2)"
[ $status -eq 0 ] && pass "moe_signals (loads and drops by hand on 1 and 2 ranks)"
exit $status
