#!/bin/sh
# tests/multihost.sh — GSL on several hosts, simulated on this machine by
# tests/sim_hosts.sh: hosts h1, h2, h3 (network, UTS and mount namespaces,
# veth links to a bridge), hydra's ssh launcher pointed at a script that
# enters a host and starts the proxy in a new session, UCX forced onto TCP
# over each host's eth0 (UCX_TLS=tcp,self UCX_NET_DEVICES=eth0), and the
# filesystem shared as over NFS. mpiexec and gslrun run on h1. Programs at
# tiny sizes under --same-bits (the same bits on any mesh, gsl(7)):
#
#   A  examples/moe.gsl (4 groups of 32 tokens, width 16) on 2 hosts x 2
#      ranks, 20 steps: the checkpoint's every file and the output y byte
#      for byte those of 1 host x 4 ranks (shared memory); UCX's log says
#      every endpoint between ranks is tag(tcp/eth0), on both hosts;
#   A3 the same on 3 hosts (2, 1 and 1 ranks);
#   B  a resume across host counts: 8 steps on 2 hosts x 2 ranks, to 14 on
#      1 host x 2 ranks ([d = 2]), to 20 on 2 hosts again: equal to A's;
#   C  gslrun --hostfile (h1:2, h2:2) over examples/mlp.gsl (2 x 2 mesh),
#      rank 3 SIGKILLed on h2 after step 5: gslrun names rank 3, its pid
#      and h2, restarts from the newest checkpoint and ends 0 with w1 and
#      w2 those of an uninterrupted run on 1 host;
#   D  the same, host 2 lost after step 5 (its link cut, every process on
#      it killed, the hostfile edited to h1:2): the watchdog (3 T, below)
#      ends the segment naming h2, or, where the loss fell inside the
#      step-8 checkpoint, the runtime's deadline over its MPI-IO call and
#      gslrun's end of the mpirun left waiting for h2 (D2's path); gslrun
#      recompiles for [data = 1, model = 2] and ends 0 on h1 alone, w1
#      and w2 still those bits;
#   D2 the same, host 2 lost once the step-8 checkpoint has begun (its
#      temporary directory made): the ranks on h1 end at the deadline of
#      the MPI-IO call; hydra then either ends (status 9, as seen) or
#      waits for ever for h2's proxy, and gslrun ends it 10 s after the
#      last rank on h1 ended, naming ranks 2 and 3 on h2 (without that,
#      the case ends at its 300 s timeout);
#   E  a cut link (ip link set eth0 down on h2) under --collective-timeout
#      T (5 s, or 20 steps where the machine is slower): the job ends with
#      status 4 within T plus a margin of 10 steps (at least 2 s) of the
#      pace measured just before the cut, its message names h2.
#
# After every job: status 0 for a finished run, and no process of the job
# left on any host (a binary of the test's, or anything on a host but its
# holder; /proc is shared, so found by path and namespace) 2 s after, or
# for E within the runtime's 5 s grace for an abort that cannot reach the
# process manager plus the margin. Every other limit is a guard against a
# hang (minutes, and --collective-timeout 30, which also bounds an
# MPI_Finalize that does not return), never a measure of speed. A table of
# the cases and their times ends the log. Without root or network
# namespaces (or with another mpiexec than MPICH's hydra) the test says so
# and is skipped (status 77). Everything is torn down on every exit.
set -u
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/sim_hosts.sh"
why=$(sim_check)
if [ -z "$why" ] && ! $MPIEXEC --version 2>/dev/null | grep -q HYDRA; then
  why="$MPIEXEC is not MPICH's hydra, whose ssh launcher the test points through the hosts"
fi
[ -z "$why" ] || skip "multihost: $why"
. "$top_srcdir/tests/hand_prog.sh"
hand_prog gslrun "${GSLRUN:-gslrun}"
gslrun=$bin
mkdir tmp

# job_left: the pids of the job's processes still there: a binary under the
# work directory (a rank), or anything on a host but its holder; not a
# zombie (ended: the init that reaps an orphan may take its time)
job_left() {
  {
    sim_procs
    find /proc/[0-9]*/exe -maxdepth 0 -lname "$work/*" 2>/dev/null | cut -d/ -f3
  } | sort -u | while read -r p; do
    { read -r st <"/proc/$p/stat"; } 2>/dev/null || continue
    case "${st##*) }" in Z*) ;; *) echo "$p" ;; esac
  done
}
# (on every exit, before lib.sh removes the work directory)
teardown() {
  sim_down
  for p in $(job_left); do kill -KILL "$p" 2>/dev/null; done
}
at_exit teardown

sim_up 3 "$work/net" || skip "multihost: $sim_why"

# (to 0.1 s: the table's and case E's measure, where lib.sh's is to 0.01 s)
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# begin: a case begins. end_case ID ERR PASSMSG WHAT: it ends: PASSMSG
# said if no FAIL was said since it began, else ERR's last lines but the
# steps (none where ERR is -); then its row of the table, ID WHAT, PASS or FAIL
begin() { t=$(now) f0=$fails; }
end_case() {
  r=PASS
  if [ "$fails" -eq "$f0" ]; then
    pass "$3"
  else
    r=FAIL
    [ "$2" = - ] || grep -v '^step' "$2" | tail -20
  fi
  printf '%s|%s|%s|%s\n' "$1" "$4" "$(secs "$t" "$(now)")" $r >>table
}

# none_left WHAT SECONDS: no process of the job left within SECONDS (0: now);
# else a FAIL naming each (its host and command line), which is killed
none_left() {
  end=$(awk -v t="$(now)" -v s="$2" 'BEGIN { printf "%.3f", t + s }')
  while [ -n "$(job_left)" ] && awk -v t="$(now)" -v e="$end" 'BEGIN { exit !(t < e) }'; do sleep 0.2; done
  left=$(job_left)
  [ -z "$left" ] && return 0
  fail "$1: processes of the job left $2 s after its end:"
  for p in $left; do
    cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)
    [ -n "$cmd" ] || cmd="(exited, not yet reaped)"
    h=$(sim_host_of "$p")
    echo "  pid $p on ${h:-?}: $cmd"
  done
  # how much later they end of themselves, if they do (20 s given)
  t1=$(now)
  while [ -n "$(job_left)" ] && awk -v a="$(secs "$t1" "$(now)")" 'BEGIN { exit !(a < 20) }'; do
    sleep 0.2
  done
  left=$(job_left)
  if [ -z "$left" ]; then
    echo "  (all ended of themselves $(secs "$t1" "$(now)") s later)"
  else
    echo "  (still there 20 s later: killed)"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
  fi
  return 1
}

# mpi NAME HOSTFILE NP ENV PROGRAM ARGS...: PROGRAM under mpiexec on h1 with
# the words of ENV in its environment (the hosts' launcher always), stdout
# in NAME.out, stderr in NAME.err, status in rc; then no process of it may
# be left (2 s given to their ends)
mpi() {
  name=$1 hf=$2 np=$3 extra=$4
  shift 4
  sim_in h1 env $sim_hydra $extra timeout 300 $MPIEXEC -f "$hf" -n "$np" "$@" >"$name.out" 2>"$name.err"
  rc=$?
  none_left "$name" 2 || rc=99
  [ $rc -eq 0 ] || { fail "$name: status $rc"; tail -5 "$name.err"; grep '^=   [A-Z]' "$name.out"; return 1; }
}
# mpi_bg NAME HOSTFILE NP ENV PROGRAM ARGS...: the same in the background, its pid in tpid
mpi_bg() {
  name=$1 hf=$2 np=$3 extra=$4
  shift 4
  sim_in h1 env $sim_hydra $extra timeout 300 $MPIEXEC -f "$hf" -n "$np" "$@" >"$name.out" 2>"$name.err" &
  tpid=$!
}
# sup NAME ARGS...: gslrun on h1 in the background, UCX over TCP, its
# binaries under tmp; stdout in NAME.out, stderr in NAME.err, pid in tpid
sup() {
  name=$1
  shift
  sim_in h1 env $sim_hydra $sim_tcp TMPDIR="$work/tmp" timeout 300 "$gslrun" --backoff 0.2 "$@" \
    >"$name.out" 2>"$name.err" &
  tpid=$!
}
# until_line FILE RE [N]: FILE has N (1) lines matching RE, within 120 s
count() { n=$(grep -c -- "$2" "$1" 2>/dev/null); echo "${n:-0}"; }
until_line() {
  i=0
  while [ "$(count "$1" "$2")" -lt "${3:-1}" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done
  [ "$(count "$1" "$2")" -ge "${3:-1}" ]
}
# rank_pid R: the pid of rank R of the job running now (a binary under tmp)
rank_pid() {
  for p in /proc/[0-9]*; do
    case $(readlink "$p/exe" 2>/dev/null) in "$work"/tmp/*) ;; *) continue ;; esac
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "PMI_RANK=$1" && echo "${p#/proc/}"
  done
}
# same WHAT DIR1 DIR2 FILE...: each FILE of DIR1 byte for byte the one of DIR2;
# a FILE A:B compares A with B (from the current directory)
same() {
  what=$1 d1=$2 d2=$3 bad=""
  shift 3
  for f in "$@"; do
    case $f in *:*) a=${f%%:*} b=${f#*:} ;; *) a=$d1/$f b=$d2/$f ;; esac
    [ -f "$a" ] && cmp -s "$a" "$b" || bad="$bad $b"
  done
  [ -z "$bad" ] || { fail "$what: not byte for byte:$bad"; return 1; }
}
# ck_files DIR: the .npy files of checkpoint DIR
ck_files() { (cd "$1" 2>/dev/null && ls -- *.npy 2>/dev/null); }
# pace FILE: the ms a step of the last log line in FILE
pace() { sed -n 's/.*(\([0-9.]*\) ms\/step.*/\1/p' "$1" | tail -1; }

printf 'h1:4\n' >hf1
printf 'h1:2\n' >hf12
printf 'h1:2\nh2:2\n' >hf22
printf 'h1:2\nh2:1\nh3:1\n' >hf3
ct=30
for d in 2 4; do
  sed "s/^mesh \[d = 4\]/mesh [d = $d]/" "$top_srcdir/examples/moe.gsl" >"moe$d.gsl"
  grep -q "^mesh \[d = $d\]" "moe$d.gsl" || { fail "examples/moe.gsl's mesh line is not 'mesh [d = 4]'"; exit 1; }
  $GSLC --same-bits -D S=32 -D M=16 -D H=32 "moe$d.gsl" -o "tmp/moe$d" || { fail "moe$d.gsl does not compile"; exit 1; }
done
moe4=$work/tmp/moe4 moe2=$work/tmp/moe2

# ---- A: 2 hosts x 2 ranks, byte for byte 1 host x 4 --------------------------------------------------------------
begin
mpi a1 hf1 4 "" "$moe4" --steps 20 --log-every 5 --collective-timeout $ct --checkpoint cka1 --output y=a1_y.npy
shm_ms=$(pace a1.out)
mpi a2 hf22 4 "$sim_tcp UCX_LOG_LEVEL=info" "$moe4" --steps 20 --log-every 5 --collective-timeout $ct \
  --checkpoint cka2 --output y=a2_y.npy
tcp_ms=$(pace a2.out)
files=$(ck_files cka1/step-00000020)
[ -n "$files" ] || fail "A: no checkpoint cka1/step-00000020"
same A cka1/step-00000020 cka2/step-00000020 $files a1_y.npy:a2_y.npy
eps=$(grep 'ep_cfg\[' a2.out)
if ! echo "$eps" | grep -q '\[h1:.*tag(tcp/eth0)' || ! echo "$eps" | grep -q '\[h2:.*tag(tcp/eth0)' ||
   echo "$eps" | sed 's/tcp\/eth0//g; s/self\/memory[0-9]*//g' | grep -q 'tag([^)]*[a-z]'; then
  fail "A: UCX's endpoints between ranks are not all tcp/eth0 on h1 and h2:"
  echo "$eps" | head -8
fi
end_case A - \
  "A: moe, 20 steps: 2 hosts x 2 ranks over TCP (tag(tcp/eth0) on h1 and h2) byte for byte 1 host x 4 ranks: $(echo $files | wc -w) checkpoint files and y" \
  "moe 20 steps: 1 host x 4 (shared memory), 2 hosts x 2 (TCP), equal"
echo "pace: moe at 4 ranks, ${shm_ms:-?} ms a step on 1 host (shared memory), ${tcp_ms:-?} ms on 2 hosts (TCP)"

# ---- A3: 3 hosts ---------------------------------------------------------------------------------------------------
begin
mpi a3 hf3 4 "$sim_tcp UCX_LOG_LEVEL=info" "$moe4" --steps 20 --quiet --collective-timeout $ct --checkpoint cka3 \
  --output y=a3_y.npy
same A3 cka1/step-00000020 cka3/step-00000020 $files a1_y.npy:a3_y.npy
for h in h1 h2 h3; do
  grep 'ep_cfg\[' a3.out | grep -q "\[$h:.*tag(tcp/eth0)" || fail "A3: no rank on $h used tcp/eth0"
done
end_case A3 - \
  "A3: moe, 20 steps on 3 hosts (2, 1 and 1 ranks) byte for byte 1 host x 4" \
  "moe 20 steps, 3 hosts (2 + 1 + 1 ranks), equal to 1 host x 4"

# ---- B: a resume across host counts --------------------------------------------------------------------------------
begin
mpi b1 hf22 4 "$sim_tcp" "$moe4" --steps 8 --quiet --collective-timeout $ct --checkpoint ckb
mpi b2 hf12 2 "" "$moe2" --steps 14 --quiet --collective-timeout $ct --checkpoint ckb --resume
mpi b3 hf22 4 "$sim_tcp" "$moe4" --steps 20 --quiet --collective-timeout $ct --checkpoint ckb --resume \
  --output y=b_y.npy
same B cka1/step-00000020 ckb/step-00000020 $files a1_y.npy:b_y.npy
end_case B - \
  "B: moe resumed from 2 hosts x 2 ranks (step 8) onto 1 host x 2 ranks ([d = 2]), then back onto 2 hosts (steps 15 to 20): byte for byte 1 host x 4" \
  "moe: 2 hosts x 2 to step 8, 1 host x 2 to 14, 2 hosts x 2 to 20, equal to A"

# ---- gslrun: the reference, uninterrupted on 1 host ----------------------------------------------------------------
mlp=$top_srcdir/examples/mlp.gsl
tiny="-D B=8 -D D=16 -D H=32 -D O=8"
steps=16
$GSLC --same-bits $tiny -D DP=2 -D MP=2 "$mlp" -o tmp/mlp4 || { fail "mlp.gsl does not compile"; exit 1; }
mpi ref hf1 4 "" "$work/tmp/mlp4" --steps $steps --quiet --collective-timeout $ct --output w1=ref_w1.npy \
  --output w2=ref_w2.npy
# finished NAME: gslrun's run NAME ended 0 after the last step, w1 and w2 the reference's bits
finished() {
  [ $rc -eq 0 ] || { fail "$1: gslrun's status $rc"; return; }
  grep -q "^step $steps/$steps" "$1.out" || fail "$1: no step $steps logged"
  same "$1" . . ref_w1.npy:"$1_w1.npy" ref_w2.npy:"$1_w2.npy"
}

# ---- C: a rank on host 2 SIGKILLed: named, restarted ---------------------------------------------------------------
begin
printf 'h1:2\nh2:2\n' >hfc
sup c --hostfile hfc -np 4 "$mlp" --same-bits $tiny -D DP=2 -D MP=2 -- --steps $steps --checkpoint ckc \
  --checkpoint-every 4 --collective-timeout $ct --output w1=c_w1.npy --output w2=c_w2.npy
victim="" host=""
if until_line c.out '^step 5/'; then
  victim=$(rank_pid 3)
  host=$(sim_host_of "$victim")
  [ -n "$victim" ] && kill -KILL "$victim"
fi
wait $tpid
rc=$?
none_left C 2
[ "$host" = h2 ] || fail "C: rank 3 was not found on h2 (pid ${victim:-?}, host ${host:-?})"
finished c
failed=$(grep '^gslrun: segment 1 failed' c.err)
echo "$failed" | grep -q "failed after [0-9.]* s: rank 3 (pid $victim on host h2) ended first, killed by signal 9 (SIGKILL)" ||
  fail "C: gslrun does not name rank 3 (pid $victim on host h2) killed by SIGKILL: ${failed:-no failed line}"
[ "$(count c.err '^gslrun: segment [0-9]* failed')" -eq 1 ] && grep -q '^gslrun: restart 1 of 3 in ' c.err ||
  fail "C: not one failure and one restart"
end_case C c.err \
  "C: rank 3 (pid $victim on h2) SIGKILLed after step 5: named with its host, restarted, status 0, w1 and w2 an uninterrupted run's bits" \
  "gslrun, 2 hosts x 2, mlp 16 steps: rank 3 SIGKILLed on h2, named, restarted"

# ---- the watchdog's deadline, from the pace over TCP: 5 s, or 20 steps where a step takes over 250 ms ----------------
T=$(awk -v ms="${tcp_ms:-0}" 'BEGIN { t = 20 * ms / 1000; print (t > 5 ? int(t + 0.999) : 5) }')

# ---- D: host 2 lost, the mesh shrinks onto host 1 -------------------------------------------------------------------
# (a deadline of 3 T: a checkpoint's MPI-IO calls run under it, and take seconds here)
TD=$((3 * T))
# lose_h2 NAME WHEN: gslrun over mlp on h1:2 + h2:2, host 2 lost once WHEN
# holds (its link cut, every process on it killed, the hostfile edited to
# h1:2); then the one failure, the mesh recompiled for h1 and resumed,
# status 0 and the bits of an uninterrupted run; the failed line in failed
lose_h2() {
  name=$1 when=$2
  printf 'h1:2\nh2:2\n' >"hf$name"
  sup "$name" --hostfile "hf$name" -np 4 "$mlp" --same-bits $tiny -D DP=2 -D MP=2 -- --steps $steps \
    --checkpoint "ck$name" --checkpoint-every 4 --collective-timeout $TD --output w1="${name}_w1.npy" \
    --output w2="${name}_w2.npy"
  lost=0
  if eval "$when"; then
    printf 'h1:2\n' >"hf$name"
    touch "$sim_dir/h2.down"
    sim_link h2 down
    for p in $(sim_procs); do [ "$(sim_host_of "$p")" = h2 ] && kill -KILL "$p" && lost=$((lost + 1)); done
  fi
  wait $tpid
  rc=$?
  none_left "$name" 2
  rm -f "$sim_dir/h2.down"
  sim_link h2 up
  [ $lost -gt 0 ] || fail "$name: nothing of the job was found on h2"
  finished "$name"
  failed=$(grep '^gslrun: segment 1 failed' "$name.err")
  [ "$(count "$name.err" '^gslrun: segment [0-9]* failed')" -eq 1 ] || fail "$name: not one failure"
  grep -q "the hostfile hf$name has 2 slots: recompiling .*mlp.gsl for mesh \[data = 1, model = 2\] (2 ranks, was \[data = 2, model = 2\])" "$name.err" &&
    grep -q '^gslrun: segment 2: 2 ranks, mesh \[data = 1, model = 2\], resuming' "$name.err" ||
    fail "$name: not recompiled for [data = 1, model = 2] and resumed on 2 ranks"
}
# what ended segment 1 in words: the watchdog's line naming h2 (a loss
# inside a step), or the runtime's deadline over a blocking MPI call and
# gslrun's end of the mpirun left waiting for h2, naming h2's ranks
by_watchdog() { echo "$failed" | grep -q "did not complete within $TD s.*(host h2)"; }
by_gslrun() {
  echo "$failed" | grep -q "did not complete within $TD s (writing the checkpoint of step 8).*mpirun had not ended [0-9]* s after the last rank found on this host (h1) had, so gslrun ended it; not seen to end: ranks 2, 3 on host h2 (the job ended"
}

# D: the loss after step 5, inside a step or the step-8 checkpoint (the
# machine decides; either way named)
begin
lose_h2 d "until_line d.out '^step 5/'"
if by_watchdog; then how="the watchdog named h2 within $TD s"
elif by_gslrun; then how="inside the step-8 checkpoint: the deadline of $TD s, then gslrun ended mpirun and named h2's ranks"
else fail "D: gslrun's line names neither the watchdog's h2 nor h2's ranks: ${failed:-no failed line}"
fi
end_case D d.err \
  "D: host 2 lost after step 5 ($lost processes killed, its link cut, the hostfile h1:2): $how, gslrun finished on [data = 1, model = 2] on h1, status 0, w1 and w2 an uninterrupted run's bits" \
  "gslrun, 2 hosts x 2, mlp 16 steps: host 2 lost, shrunk onto h1 ([data = 1, model = 2])"

# D2: the loss inside the step-8 checkpoint (its temporary directory made):
# the ranks on h1 end at the deadline of the MPI-IO call; hydra may then
# wait for h2's proxy for ever, and gslrun ends it PM_GRACE (10 s) later
begin
ck_started() {
  i=0
  while ! ls -d ckd2/step-00000008.tmp* >/dev/null 2>&1 && [ $i -lt 24000 ]; do sleep 0.005; i=$((i + 1)); done
  ls -d ckd2/step-00000008.tmp* >/dev/null 2>&1
}
lose_h2 d2 ck_started
how2=
if [ $lost -gt 0 ]; then
  if by_gslrun; then
    how2="gslrun ended the mpirun left waiting for h2 and named ranks 2, 3 on h2"
  elif echo "$failed" | grep -q "did not complete within $TD s (writing the checkpoint of step 8)" &&
    ! echo "$failed" | grep -q "so gslrun ended it"; then
    how2="mpirun ended of itself this time"
  elif by_watchdog; then
    how2="the checkpoint was written before the loss: the watchdog's path"
  else
    fail "D2: gslrun's line names neither the checkpoint's deadline (and, where gslrun ended mpirun, h2's ranks) nor the watchdog's h2: ${failed:-no failed line}"
  fi
fi
end_case D2 d2.err \
  "D2: host 2 lost inside the step-8 checkpoint: the MPI-IO deadline ($TD s), then $how2; finished on [data = 1, model = 2], status 0, the bits" \
  "gslrun, 2 hosts x 2, mlp 16 steps: host 2 lost inside a checkpoint, named, shrunk onto h1"

# ---- E: a cut link: the job ends within the watchdog's deadline, no rank left -------------------------------------
begin
mpi_bg e hf22 4 "$sim_tcp" "$moe4" --steps 100000000 --log-every 5 --collective-timeout $T
cut="" ms=? bound=? margin=2
if until_line e.out '^step 20/'; then
  ms=$(pace e.out)
  margin=$(awk -v ms="${ms:-0}" 'BEGIN { m = 10 * ms / 1000; printf "%.1f", (m > 2 ? m : 2) }')
  bound=$(awk -v t="$T" -v m="$margin" 'BEGIN { printf "%.1f", t + m }')
  cut=$(now)
  sim_link h2 down
else
  fail "E: no step 20"
fi
wait $tpid
rc=$?
ended=$(now)
took=$(secs "${cut:-$ended}" "$ended")
grace=$(awk -v m="$margin" 'BEGIN { print 5 + m }')
none_left E "$grace"
sim_link h2 up
[ $rc -eq 4 ] || fail "E: status $rc, not the watchdog's 4"
[ -n "$cut" ] && awk -v a="$took" -v b="$bound" 'BEGIN { exit !(a <= b) }' ||
  fail "E: the job ended $took s after the cut, past the deadline $T s and the margin $margin s"
hung=$(grep "did not complete within $T s" e.err | head -1)
echo "$hung" | grep -q '(host h2)' || fail "E: the watchdog's line does not name h2: ${hung:-none}"
end_case E e.err \
  "E: h2's link cut after step 20 ($ms ms a step): status 4 in $took s (deadline $T s, bound $bound s), h2 named, no process left on any host within $grace s" \
  "moe on 2 hosts x 2, h2's link cut, --collective-timeout $T: ended in $took s (bound $bound s)"

echo
echo "multihost: the cases ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
awk -F'|' '{ printf "  %-3s %-88s %7s s  %s\n", $1, $2, $3, $4 }' table
# what MPI_Finalize cost (it may not return under UCX's TCP transport; the deadline then ends the rank)
hangs=$(grep -l 'MPI_Finalize did not return\|(MPI_Finalize) did not complete' ./*.err 2>/dev/null | sed 's|^./||; s|\.err$||')
[ -z "$hangs" ] || echo "  MPI_Finalize did not return within $ct s in: $(echo $hangs)"
exit $status
