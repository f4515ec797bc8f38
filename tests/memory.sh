#!/bin/sh
# tests/memory.sh — a compiled program's peak resident memory stays within
# what gslc --stats predicts, on one device and on two with a split tensor,
# and for a plan gslc --auto-shard found under --mem-budget.
#
# The program chains four [N, K] x [K, K] products, each through tanh, so
# eight activation buffers of N*K*4 bytes (per device: N/devices rows) are
# made one after another but at most two are live at once: the plan puts
# them in an arena of two buffers, where one allocation each would take
# eight. At N = 1024, K = 2048 an activation is 8 MiB on one device: planned
# 16 MiB against 64 MiB without reuse (two devices: 8 MiB against 32 MiB),
# beside 16 MiB of params and 8 (4) MiB of input.
#
# Peak RSS (/usr/bin/time -v, "Maximum resident set size": the largest
# single process, so under mpirun the largest rank) must be at most
#   params + inputs + planned intermediates + collective scratch + SLACK
# (no output is written, so rank 0 gathers nothing). SLACK is the
# runtime and its libraries: the same program at N = K = 16 peaks at about
# 16.4 MiB on this machine (MPICH's initialization and shared memory,
# OpenBLAS with one thread, libc, the program's text), and large products
# touch a further MiB or so of OpenBLAS work space; the watchdog's
# messages between ranks (runtime/health.c) open MPI's point-to-point
# paths, about 1.5 MiB a rank under UCX, counted in SLACK = 26 MiB; the
# rest is headroom.
# A plan that lost its reuse would need 48 MiB more on one device (24 MiB
# on two), beyond the slack. And the RSS must be below what one allocation
# per buffer implies: params + inputs + the no-reuse sum + BASE, with
# BASE = 16 MiB the tiny program's own peak.
set -u
. "$top_srcdir/tests/lib.sh"
MIB=1048576
SLACK=$((26 * MIB))
BASE=$((16 * MIB))
cat >"$work/mem.gsl" <<'GSL'
const DEV = 1
const N = 1024
const K = 2048
mesh [d = DEV]
input x: f32[N, K] split(0, d) = normal(1.0)
param w: f32[K, K] = normal(0.02)
let h1 = tanh(x @ w)
let h2 = tanh(h1 @ w)
let h3 = tanh(h2 @ w)
let h4 = tanh(h3 @ w)
output h4
GSL

# the byte count on --stats line $1 (its first number)
stat() { sed -n "s/^$1  *\([0-9][0-9]*\).*/\1/p" "$work/stats"; }

for dev in 1 2; do
  "$GSLC" -D DEV=$dev --stats "$work/mem.gsl" >"$work/stats" || fatal "gslc --stats (DEV=$dev)"
  "$GSLC" -D DEV=$dev "$work/mem.gsl" -o "$work/mem" || fatal "gslc (DEV=$dev)"
  params=$(stat params); inputs=$(stat inputs)
  planned=$(stat "intermediates, planned"); noreuse=$(stat "intermediates, no reuse")
  scratch=$(sed -n 's/.*collective scratch \([0-9][0-9]*\).*/\1/p' "$work/stats")
  /usr/bin/time -v $MPIEXEC -n $dev "$work/mem" --steps 2 --quiet 2>"$work/time" ||
    { cat "$work/time"; fatal "the program failed on $dev devices"; }
  rss=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/time") * 1024 ))
  bound=$((params + inputs + planned + scratch + SLACK))
  without=$((params + inputs + noreuse + BASE))
  echo "devices $dev: rss $rss, bound $bound (params $params, inputs $inputs, planned $planned, scratch $scratch), without reuse $without"
  [ "$planned" -lt "$noreuse" ] || fail "planned $planned is not below the no-reuse $noreuse"
  [ "$rss" -le "$bound" ] || fail "peak RSS $rss above the prediction $bound on $dev devices"
  [ "$rss" -lt "$without" ] || fail "peak RSS $rss not below the no-reuse $without on $dev devices"
done
# gslc --auto-shard --mem-budget 40M on two devices: a 16 MiB param
# trained with adam (48 MiB whole with its states) on links priced 1000
# times dearer, which the search would keep whole without the budget: the
# plan's --stats total is within the budget, and the peak RSS within that
# total and the slack
cp "$top_srcdir/tests/auto/budget.gsl" "$work/wh.gsl"
cp "$top_srcdir/tests/auto/slow.machine" "$work/slow.machine"
budget=$((40 * MIB))
"$GSLC" --auto-shard --machine "$work/slow.machine" --mem-budget $budget --stats "$work/wh.gsl" >"$work/stats" &&
  "$GSLC" --auto-shard --machine "$work/slow.machine" --mem-budget $budget "$work/wh.gsl" -o "$work/wh" ||
  fatal "gslc --auto-shard --mem-budget"
total=$(stat total)
/usr/bin/time -v $MPIEXEC -n 2 "$work/wh" --steps 2 --quiet 2>"$work/time" ||
  { cat "$work/time"; fatal "the budgeted program failed"; }
rss=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/time") * 1024 ))
echo "--auto-shard --mem-budget $budget: total $total, rss $rss, bound $((total + SLACK))"
[ "$total" -le "$budget" ] || fail "--stats total $total above the budget $budget"
[ "$rss" -le $((total + SLACK)) ] || fail "peak RSS $rss above the prediction $total + slack"

[ $status -eq 0 ] && pass "memory"
exit $status
