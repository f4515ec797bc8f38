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
# (no output is written, so rank 0 gathers nothing). SLACK is the runtime
# and its libraries, BASE plus WORK. BASE is measured here, as the peak
# of the same program at N = K = 16 on as many devices (MPICH's
# initialization and shared memory, the watchdog's point-to-point paths,
# oneDNN and OpenBLAS with one thread, libc, the program's text): it was
# 16.4 MiB on one machine and 21 MiB on another, so a constant would
# measure the machine. WORK = 16 MiB is the GEMM libraries' work space
# for the large products, which their kernels size by the CPU (12 MiB
# measured with AVX2 kernels, under 10 with AVX-512's), and headroom.
# A plan that lost its reuse would need 48 MiB more on one device (24 MiB
# on two), beyond the slack. And the RSS must be below what one allocation
# per buffer implies: params + inputs + the no-reuse sum + BASE.
set -u
. "$top_srcdir/tests/lib.sh"
MIB=1048576
WORK=$((16 * MIB))
# the peak RSS of the tiny program on $1 devices, in bytes
cat >"$work/tiny.gsl" <<'GSL'
const DEV = 1
mesh [d = DEV]
input x: f32[16, 16] split(0, d) = normal(1.0)
param w: f32[16, 16] = normal(0.02)
let y = tanh(x @ w)
output y
GSL
base_rss() {
  "$GSLC" -D DEV=$1 "$work/tiny.gsl" -o "$work/tiny" &&
    /usr/bin/time -v $MPIEXEC -n $1 "$work/tiny" --steps 2 --quiet 2>"$work/tiny.time" >/dev/null ||
    { cat "$work/tiny.time"; fatal "the tiny program failed on $1 devices"; }
  echo $(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/tiny.time") * 1024 ))
}
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
  BASE=$(base_rss $dev) || exit 1
  SLACK=$((BASE + WORK))
  params=$(stat params); inputs=$(stat inputs)
  planned=$(stat "intermediates, planned"); noreuse=$(stat "intermediates, no reuse")
  scratch=$(sed -n 's/.*collective scratch \([0-9][0-9]*\).*/\1/p' "$work/stats")
  /usr/bin/time -v $MPIEXEC -n $dev "$work/mem" --steps 2 --quiet 2>"$work/time" ||
    { cat "$work/time"; fatal "the program failed on $dev devices"; }
  rss=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/time") * 1024 ))
  bound=$((params + inputs + planned + scratch + SLACK))
  without=$((params + inputs + noreuse + BASE))
  echo "devices $dev: rss $rss, bound $bound (base $BASE) (params $params, inputs $inputs, planned $planned, scratch $scratch), without reuse $without"
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
BASE=$(base_rss 2) || exit 1
SLACK=$((BASE + WORK))
/usr/bin/time -v $MPIEXEC -n 2 "$work/wh" --steps 2 --quiet 2>"$work/time" ||
  { cat "$work/time"; fatal "the budgeted program failed"; }
rss=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/time") * 1024 ))
echo "--auto-shard --mem-budget $budget: total $total, rss $rss, bound $((total + SLACK))"
[ "$total" -le "$budget" ] || fail "--stats total $total above the budget $budget"
[ "$rss" -le $((total + SLACK)) ] || fail "peak RSS $rss above the prediction $total + slack"

[ $status -eq 0 ] && pass "memory"
exit $status
