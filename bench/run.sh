#!/bin/sh
# bench/run.sh — examples/mlp.gsl's forward pass (its train line dropped), compiled by gslc, against
# the same computation in numpy and PyTorch (CPU), all on one core; then a
# check that the three compute the same numbers; then libgslrt's collectives
# against the raw MPI calls at mpiexec -n 2 (bench/collectives.c); then the
# sharded forward pass at mpiexec -n 1 and -n 2 (data and model parallel);
# then bench/moe.gsl's forward moe layer against PyTorch and its two
# all-to-alls at mpiexec -n 2 against raw MPI (bench/moe_a2a.c); then
# bench/moe_train.gsl's training step (forward, backward, Adam) against
# PyTorch's (bench/moe_train_torch.py) and its weak scaling at mpiexec -n 1
# and 2; then examples/lm.gsl's training step against PyTorch's
# (bench/lm_torch.py) at mpiexec -n 1; then the FMA peak and the
# matrix-product libraries on GSL's shapes, one thread (bench/gemm_peak.c).
# `make bench` runs it from the build
# directory after building gslc and the runtime. See bench/README.md.
# PyTorch and numpy are needed only here, from Debian: apt-get install
# python3-torch python3-numpy.
#
# Settings (environment): B D H O (sizes, default 256 1024 4096 1024),
# STEPS (timed steps, default 20), WARMUP (default 3), REPS (default 5),
# PYTHON (default /usr/bin/python3), GSLC (default ./gslc), OPENBLAS_CORETYPE
# (see below); for the collectives MPICC (default mpicc), MPIEXEC (default
# mpiexec), LIBGSLRT (default runtime/libgslrt.a), BENCH_REPS (default 25),
# BENCH_WARMUP (default 3), RT_LIBS (the libraries libgslrt.a needs, default
# "-lopenblas -lz -ljansson -lm"; make bench passes configure's); ONLY=mlp, ONLY=collectives, ONLY=scaling,
# ONLY=moe or ONLY=moe_a2a runs one part (scaling: the mlp forward at -np 1
# and 2, data and model parallel, with B D H O STEPS WARMUP REPS MPIEXEC as
# above; moe: bench/moe.gsl's forward moe layer against PyTorch, then
# moe_a2a: its two all-to-alls at -np 2 against raw MPI; settings MOE_SPEC
# and MOE_LARGE ("G S M H E", default "4 256 64 256 8" and
# "8 1024 256 1024 16"), STEPS WARMUP REPS for the SPEC size and
# MOE_LARGE_STEPS MOE_LARGE_WARMUP MOE_LARGE_REPS (default 3 3 3) for the
# large one, MOE_TORCH (PyTorch's ways, default "kept index_kept": of
# default, kept, index and index_kept, see torch_ways), TORCH_PREC (the
# precisions each way runs in, default "f32 bf16": bf16 is torch.autocast
# to bfloat16), and MPICC
# MPIEXEC LIBGSLRT BENCH_REPS BENCH_WARMUP as for the collectives);
# ONLY=moe_train runs the training part alone (the same MOE_* settings,
# STEPS WARMUP REPS and MPIEXEC, and MOE_CHECK_STEPS, the Adam steps of its
# agreement check, default 5); ONLY=lm runs the language model's training
# step against PyTorch (bench/lm_torch.py; STEPS WARMUP REPS MPIEXEC, LM_GSL
# (default examples/lm.gsl), LM_DIMS ("B T M NH H E", default
# "8 64 128 4 512 8"), LM_TORCH (as MOE_TORCH, default all four ways),
# TORCH_PREC and LM_CHECK_STEPS (default 5); its data from
# scripts/lm_data.py, which needs Debian's fortunes);
# ONLY=gemm measures the FMA peak and the matrix-product libraries on GSL's
# shapes, one thread (bench/gemm_peak.c; GEMM_REPS GEMM_WARMUP GEMM_MS
# GEMM_SHAPES, MPICC LIBGSLRT, GEMM_LIBS: the runtime's libraries, default
# RT_LIBS); ONLY=machine measures the rates of gslc --auto-shard's cost
# model and prints them as a machine file (bench/machine.c; BENCH_REPS,
# MACHINE_OUT: a file to write it to too); ONLY=auto compares gslc
# --auto-shard's plans of the examples with the hand-annotated ones at
# -np 2 (AUTO_STEPS: timed steps of mlp, moe and lm, default "300 150 80";
# WARMUP REPS MPIEXEC) and times the search on 4 and 64 devices;
# ONLY=depth times gslc -O2 on examples/lm.gsl against its depth
# (DEPTHS, default "4 12 24 48"; DEPTH_REPS; BASE_GSLC, another build's
# gslc to time beside, with the L = 4 step of each: DEPTH_STEPS);
# ONLY=remat runs examples/lm.gsl deep (REMAT_DIMS "L B T", default "48 32
# 128") kept, recomputed (`remat for`) and under --mem-budget at half the
# kept total: planned memory, peak RSS and the step (REMAT_STEPS);
# ONLY=samebits times gslc --same-bits against the same program without it,
# interleaved, median of REPS runs each: examples/mlp.gsl at -np 1 and on
# [data = 2], examples/moe.gsl on 1 and 2 devices, examples/lm.gsl under
# --precision bf16 at scripts/lm.sh's recipe (LM_RECIPE) on 1 device and
# on [expert = 2] (SAME_STEPS: timed steps of mlp, moe and lm, default
# "300 150 40"; WARMUP MPIEXEC), with --explain's estimate of each;
# ONLY=profile counts the page faults, context switches and sched_yield
# calls a step in the steady state of the lm's bf16 step at -np 1 and of
# bench/moe_train.gsl's at -np 1 and 2 (perf stat, /usr/bin/time; WARMUP
# STEPS, PROFILE_LONG: the later window's steps, default 200), then sorts
# perf record's samples of the lm's bf16 step into products, compiled
# loops by kind, routing, collectives, page faults, yields, oneDNN's
# primitive creation, kernel and runtime time, and moe_train's at -np
# 2 and its page faults alike (PROFILE_STEPS, default 100; PROFILE_PERIOD, ns between samples, default 1000000; LM_DIMS,
# MOE_SPEC, MPIEXEC); it needs perf and GNU time, and is skipped without;
# ONLY=hosts simulates 2 hosts on this machine (tests/sim_hosts.sh: network
# namespaces, veth links, UCX over TCP) and times MPI's all-reduce and
# all-to-all and examples/moe.gsl's step on 1 host (shared memory), 1 host
# over TCP and 2 hosts (HOSTS_STEPS, default 30; BENCH_REPS BENCH_WARMUP
# WARMUP REPS MPICC MPIEXEC LIBGSLRT); it needs root, and is skipped without.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
GSLC=${GSLC:-./gslc}
PYTHON=${PYTHON:-/usr/bin/python3}
B=${B:-256} D=${D:-1024} H=${H:-4096} O=${O:-1024}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-3} REPS=${REPS:-5}
# one core everywhere: one BLAS thread, one OpenMP thread
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export OPENBLAS_NUM_THREADS OMP_NUM_THREADS MKL_NUM_THREADS

ONLY=${ONLY:-}
# what a program linked against libgslrt.a needs (make bench passes configure's)
RT_LIBS=${RT_LIBS:--ldnnl -lgomp -lopenblas -lz -ljansson -lm}
die() { echo "bench: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gslbench.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# All implementations multiply through the same OpenBLAS (numpy and Debian's
# torch via libblas.so.3). OpenBLAS 0.3.21 does not know recent Xeons (e.g.
# family 6 model 207) and falls back to its SSE3 "Prescott" kernels, 3-4x
# slower than its AVX-512 ones; then pick SkylakeX (Haswell without AVX-512)
# for everything, unless OPENBLAS_CORETYPE is set already. Asks PROG (a
# compiled GSL program) which core OpenBLAS picks; decided once per run.
blas_core() {  # PROG WHO
  if [ -z "${blas_core_done:-}" ]; then
    core=$(OPENBLAS_VERBOSE=2 "$1" --version 2>&1 | sed -n 's/^Core: //p' | tail -n 1)
    if [ -z "${OPENBLAS_CORETYPE+set}" ] && [ "$core" = Prescott ]; then
      if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then OPENBLAS_CORETYPE=SkylakeX
      elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then OPENBLAS_CORETYPE=Haswell; fi
      if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
        export OPENBLAS_CORETYPE
        echo "  OpenBLAS detected core Prescott (CPU unknown to it): using OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE" \
             "for $2 (set OPENBLAS_CORETYPE=Prescott to keep its choice)"
        core=$OPENBLAS_CORETYPE
      fi
    fi
    blas_core_done=yes
  fi
  echo "  OpenBLAS core: ${core:-unknown}"
}

# ---- MFU: a step's time against the peak of its precision -----------------------
# peaks: this machine's peaks now, f32 and bf16 GFLOP/s (bench/gemm_peak.c
# with GEMM_PEAKS_ONLY: its FMA loop, and vdpbf16ps for bf16, measured twice,
# the better), into pf and pb, once a run.
peaks() {
  [ -n "${pb:-}" ] && return 0
  LIBGSLRT=${LIBGSLRT:-runtime/libgslrt.a} GEMM_LIBS=${GEMM_LIBS:-$RT_LIBS}
  [ -f "$LIBGSLRT" ] || die "no $LIBGSLRT (run make first, or set LIBGSLRT)"
  [ -x "$tmp/gemm_peak" ] || ${MPICC:-mpicc} -std=c11 -O2 -I"$top/runtime" "$here/gemm_peak.c" "$LIBGSLRT" \
    $GEMM_LIBS -ldl -o "$tmp/gemm_peak" || die "could not compile bench/gemm_peak.c"
  GEMM_PEAKS_ONLY=1 "$tmp/gemm_peak" >"$tmp/peaks.out" || die "bench/gemm_peak.c failed (the peaks)"
  pf=$(sed -n 's/^peaks used: f32 \([0-9.]*\), bf16 \([0-9.]*\).*/\1/p' "$tmp/peaks.out")
  pb=$(sed -n 's/^peaks used: f32 \([0-9.]*\), bf16 \([0-9.]*\).*/\2/p' "$tmp/peaks.out")
  [ -n "$pf" ] && [ -n "$pb" ] || die "bench/gemm_peak.c printed no peaks"
}
# The model's FLOP of products a step a device: gslc --stats' total of the
# model's products (the program before partitioning, a moe block's over
# its routed share of slots; gslc(1)) over DEVICES.
stats_flop() {  # DEVICES GSLC-ARGUMENTS...
  n=$1; shift
  # shellcheck disable=SC2068
  $GSLC --stats $@ | awk -v n="$n" '/^## FLOPs/ { on = 1; next } on && $1 == "step" { printf "%.0f", $2 / n; f = 1; exit }
    END { exit !f }' || die "gslc --stats gave no FLOPs ($*)"
}
# The median ms/step of KEY at SIZE in a times file ("SIZE KEY ms ...").
med() {  # FILE SIZE KEY
  awk -v s="$2" -v k="$3" '$1 == s && $2 == k { print $3 }' "$1" | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
mfu_header() {
  printf '  %-38s %9s %14s %9s %6s\n' "" ms/step "FLOP a device" GFLOP/s MFU
}
# One row: a step of MS ms doing FLOP model FLOP a device, against PEAK.
mfu_row() {  # WHAT MS FLOP PEAK
  [ -n "$2" ] || return 0
  awk -v w="$1" -v ms="$2" -v f="$3" -v p="$4" 'BEGIN { g = f / ms / 1e6
    printf "  %-38s %9.2f %14.0f %9.1f %5.1f%%\n", w, ms, f, g, 100 * g / p }'
}

mlp() {
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"

  sizes="-D B=$B -D D=$D -D H=$H -D O=$O"
  echo "GSL mlp benchmark: examples/mlp.gsl forward pass, B=$B D=$D H=$H O=$O, float32"
  echo "  $STEPS timed steps after $WARMUP warm-up steps, median of $REPS runs, one core" \
       "(OPENBLAS_NUM_THREADS=1)"
  # the forward pass: the example less its train statement
  sed '/^train /d' "$top/examples/mlp.gsl" >"$tmp/mlp_forward.gsl"
  $GSLC $sizes "$tmp/mlp_forward.gsl" -o "$tmp/mlp" || die "gslc failed"

  blas_core "$tmp/mlp" "all three"

  have_numpy=yes have_torch=yes
  $PYTHON -c 'import numpy' 2>/dev/null || have_numpy=no
  $PYTHON -c 'import torch' 2>/dev/null || have_torch=no

  # The same fixed batch x for every implementation; GSL reads it from x.npy
  # (every step re-reads it; without --input it would draw a fresh normal batch
  # each step inside the timed loop).
  xbind=
  if [ $have_numpy = yes ]; then
    $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(1).standard_normal(($B, $D)).astype(np.float32))" \
      "$tmp/x.npy" || die "could not write x.npy"
    xbind="--input x=$tmp/x.npy"
  fi

  # GSL: ms/step from the program's own log (--log-every 1, one line a step,
  # timed with MPI_Wtime around each step), averaged over the steps after the
  # warm-up; MPI start-up, param init and output writing are outside it.
  gsl_once() {
    "$tmp/mlp" --steps $((WARMUP + STEPS)) --log-every 1 $xbind >"$tmp/gsl.log" 2>&1 ||
      { cat "$tmp/gsl.log" >&2; return 1; }
    awk -v w=$WARMUP '/^step /{ split($2, a, "/"); if (a[1] + 0 > w) {
        s = $0; sub(/.*\(/, "", s); sub(/ ms\/step.*/, "", s); t += s; n++ } }
      END { if (n) printf "ms_per_step %.3f\n", t / n; else exit 1 }' "$tmp/gsl.log"
}
py_once() {  # SCRIPT
  $PYTHON "$here/$1" --B $B --D $D --H $H --O $O --steps $STEPS --warmup $WARMUP
}

: >"$tmp/times"
r=1
while [ $r -le $REPS ]; do  # interleaved, so that load on the machine hits all alike
  t=$(gsl_once) || die "the GSL program failed"
  echo "gsl ${t#ms_per_step }" >>"$tmp/times"
  if [ $have_numpy = yes ]; then
    t=$(py_once mlp_numpy.py) || die "mlp_numpy.py failed"
    echo "numpy ${t#ms_per_step }" >>"$tmp/times"
  fi
  if [ $have_torch = yes ]; then
    t=$(py_once mlp_torch.py) || die "mlp_torch.py failed"
    echo "torch ${t#ms_per_step }" >>"$tmp/times"
  fi
  r=$((r + 1))
done

median() {  # IMPL
  awk -v k="$1" '$1 == k { print $2 }' "$tmp/times" | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
all() { awk -v k="$1" '$1 == k { printf "%s%s", s, $2; s = " " }' "$tmp/times"; }
g=$(median gsl)
echo
printf '%-24s %10s %12s   %s\n' implementation ms/step "peer/GSL" "runs (ms/step)"
row() {  # NAME KEY
  m=$(median "$2")
  awk -v n="$1" -v m="$m" -v g="$g" -v runs="$(all "$2")" \
    'BEGIN { printf "%-24s %10.1f %12.2f   %s\n", n, m, m / g, runs }'
}
row "GSL (gslc -O2)" gsl
if [ $have_numpy = yes ]; then row "numpy $($PYTHON -c 'import numpy; print(numpy.__version__)')" numpy
else echo "numpy: skipped ($PYTHON cannot import numpy; apt-get install python3-numpy)"; fi
if [ $have_torch = yes ]; then row "PyTorch $($PYTHON -c 'import torch; print(torch.__version__)')" torch
else echo "PyTorch: skipped ($PYTHON cannot import torch; apt-get install python3-torch)"; fi
echo "(peer/GSL = peer's ms/step over GSL's: above 1 means GSL is faster)"

# Agreement: the same x and weights through all three. A copy of mlp.gsl
# with nonzero biases (mlp.gsl's are zeros()) so that the bias add counts.
echo
if [ $have_numpy = no ]; then
  echo "agreement check: skipped (needs numpy)"
  return 0
fi
sed -e 's/= zeros()/= normal(0.5)/' -e '/^train /d' "$top/examples/mlp.gsl" >"$tmp/mlpcheck.gsl"
$GSLC $sizes "$tmp/mlpcheck.gsl" -o "$tmp/mlpcheck" || die "gslc failed (check)"
"$tmp/mlpcheck" --quiet --steps 1 --input x="$tmp/x.npy" --output y="$tmp/y.npy" \
  --output w1="$tmp/w1.npy" --output b1="$tmp/b1.npy" --output w2="$tmp/w2.npy" \
  --output b2="$tmp/b2.npy" || die "the GSL check program failed"
echo "agreement (max |a - b| / max |ref|; ref = the same computation in float64):"
{ $PYTHON "$here/mlp_numpy.py" --check "$tmp" || die "mlp_numpy.py --check failed"
  if [ $have_torch = yes ]; then
    $PYTHON "$here/mlp_torch.py" --check "$tmp" || die "mlp_torch.py --check failed"
  fi; } >"$tmp/check"
sed 's/^check /  /' "$tmp/check"
awk '$1 == "check" && !($3 < 1e-4) { bad = 1 } END { exit bad }' "$tmp/check" ||
  die "FAILED: some error is not below 1e-4"
echo "  all below 1e-4: agree"
}

# ---- collectives: libgslrt against the raw MPI calls, at -np 2 ---------------
# bench/collectives.c is a hand-written GSL program (gslrt_main builds the
# group's communicator); it is compiled here against the build's libgslrt.a.
collectives() {
  MPICC=${MPICC:-mpicc} MPIEXEC=${MPIEXEC:-mpiexec} LIBGSLRT=${LIBGSLRT:-runtime/libgslrt.a}
  BENCH_REPS=${BENCH_REPS:-25} BENCH_WARMUP=${BENCH_WARMUP:-3}
  export BENCH_REPS BENCH_WARMUP
  [ -f "$LIBGSLRT" ] || die "no $LIBGSLRT (run make first, or set LIBGSLRT)"
  $MPICC -std=c11 -O2 -I"$top/runtime" "$here/collectives.c" "$LIBGSLRT" $RT_LIBS \
    -o "$tmp/collectives" || die "could not compile bench/collectives.c"
  $MPIEXEC -n 2 "$tmp/collectives" --quiet || die "the collectives benchmark failed"
}

# ---- scaling: the sharded mlp forward at -np 1 and -np 2 ---------------------
# The same forward pass compiled for 1 device, 2 devices data parallel (x split
# over `data`: no communication) and 2 devices model parallel (Megatron: w1
# split over `model` on its output dim, w2 on its input dim; one all-reduce of
# the [B, O] output per step), each run under $MPIEXEC -n N with one BLAS
# thread per rank and the same fixed batch, timed from rank 0's log like the
# mlp part. The three ys must agree.
scaling() {
  MPIEXEC=${MPIEXEC:-mpiexec}
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  sizes="-D B=$B -D D=$D -D H=$H -D O=$O"
  echo "GSL scaling benchmark: examples/mlp.gsl forward pass on 1 and 2 MPI ranks, B=$B D=$D H=$H O=$O, float32"
  echo "  $STEPS timed steps after $WARMUP warm-up steps, median of $REPS runs (configurations interleaved)," \
       "one BLAS thread per rank"
  # (not plain nproc: GNU nproc answers OMP_NUM_THREADS, set to 1 above)
  ncpu=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null ||
         getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')
  if [ "$ncpu" = 2 ]; then
    echo "  this machine has 2 cores: 2 ranks (one core each) is the most that makes sense here"
  else
    echo "  this machine has $ncpu cores; 2 ranks (one core each) is what this part measures"
  fi
  if ! $PYTHON -c 'import numpy' 2>/dev/null; then
    echo "scaling: skipped ($PYTHON cannot import numpy, needed for the fixed batch and the check;" \
         "apt-get install python3-numpy)"
    return 0
  fi

  # A copy of mlp.gsl whose biases are normal(0.5) instead of zeros(): the same
  # work per step, but the bias adds (b1 is split over `model`) count in the check.
  sed -e 's/= zeros()/= normal(0.5)/' -e '/^train /d' "$top/examples/mlp.gsl" >"$tmp/mlpscale.gsl"
  configs="1x1 2x1 1x2"  # DPxMP
  for c in $configs; do
    $GSLC $sizes -D DP=${c%x*} -D MP=${c#*x} "$tmp/mlpscale.gsl" -o "$tmp/scale_$c" ||
      die "gslc failed (DP=${c%x*} MP=${c#*x})"
  done
  blas_core "$tmp/scale_1x1" "every rank"
  $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(1).standard_normal(($B, $D)).astype(np.float32))" \
    "$tmp/xs.npy" || die "could not write xs.npy"

  # What the compiler puts between the devices (gslc --explain).
  for c in 2x1 1x2; do
    $GSLC $sizes -D DP=${c%x*} -D MP=${c#*x} --explain "$tmp/mlpscale.gsl" >"$tmp/explain_$c" ||
      die "gslc --explain failed (DP=${c%x*} MP=${c#*x})"
    echo "  DP=${c%x*} MP=${c#*x}: $(awk '/^## collectives/ { on = 1; next } on && /^$/ { on = 0 }
        on && NF { sub(/ *;.*/, ""); n++; printf "%s%s", (n > 1 ? "; " : ""), $0 }
        END { if (!n) printf "no collectives" }' "$tmp/explain_$c" | tr -s ' ')"
  done

  # ms/step from rank 0's log, averaged over the steps after the warm-up. With
  # model parallelism the all-reduce makes every step wait for both ranks; with
  # data parallelism the ranks never talk and rank 0's steps are its own.
  scale_once() {  # CONFIG [gslrt options]
    c=$1; shift
    n=$((${c%x*} * ${c#*x}))
    $MPIEXEC -n $n "$tmp/scale_$c" --steps $((WARMUP + STEPS)) --log-every 1 --input x="$tmp/xs.npy" \
      "$@" >"$tmp/scale.log" 2>&1 || { cat "$tmp/scale.log" >&2; return 1; }
    awk -v w=$WARMUP '/^step /{ split($2, a, "/"); if (a[1] + 0 > w) {
        s = $0; sub(/.*\(/, "", s); sub(/ ms\/step.*/, "", s); t += s; n++ } }
      END { if (n) printf "%.3f\n", t / n; else exit 1 }' "$tmp/scale.log"
  }
  : >"$tmp/stimes"
  r=1
  while [ $r -le $REPS ]; do  # interleaved, so that load on the machine hits all alike
    for c in $configs; do
      if [ $r = 1 ]; then t=$(scale_once $c --output y="$tmp/y_$c.npy")
      else t=$(scale_once $c); fi || die "the DP=${c%x*} MP=${c#*x} program failed under $MPIEXEC"
      echo "$c $t" >>"$tmp/stimes"
    done
    r=$((r + 1))
  done

  smedian() {  # CONFIG
    awk -v k="$1" '$1 == k { print $2 }' "$tmp/stimes" | sort -n |
      awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
  }
  m1=$(smedian 1x1)
  echo
  printf '%-28s %7s %9s %8s %10s   %s\n' configuration devices ms/step speedup efficiency "runs (ms/step)"
  for c in $configs; do
    case $c in
      1x1) name="1 device" ;; 2x1) name="data parallel" ;; 1x2) name="model parallel" ;;
    esac
    n=$((${c%x*} * ${c#*x}))
    awk -v name="$name (DP=${c%x*} MP=${c#*x})" -v n=$n -v m="$(smedian $c)" -v m1="$m1" -v k=$c '
      $1 == k { runs = runs sep sprintf("%.1f", $2); sep = " " }
      END { printf "%-28s %7d %9.1f %8.2f %10.2f   %s\n", name, n, m, m1 / m, m1 / m / n, runs }' "$tmp/stimes"
  done
  echo "(speedup = 1-device ms/step over this one's; efficiency = speedup / devices)"

  # The three must compute the same y from the same x and weights (param
  # initialization does not depend on the layout).
  echo
  $PYTHON -c "import numpy as np, sys
d = sys.argv[1]
ref = np.load(d + '/y_1x1.npy').astype(np.float64)
for c in sys.argv[2:]:
    y = np.load(d + '/y_%s.npy' % c).astype(np.float64)
    ok = y.shape == ref.shape and np.isfinite(y).all() and np.isfinite(ref).all()
    err = np.abs(y - ref).max() / np.abs(ref).max() if ok else float('inf')
    print('check DP=%s MP=%s %.3g' % (c.split('x')[0], c.split('x')[1], err))
" "$tmp" 2x1 1x2 >"$tmp/scheck" || die "the y check failed to run"
  echo "agreement of y with the 1-device y (max |a - b| / max |ref|):"
  awk '{ printf "  %s %s: %s\n", $2, $3, $4 }' "$tmp/scheck"
  awk '$1 == "check" && !($4 < 1e-4) { bad = 1 } END { exit bad }' "$tmp/scheck" ||
    die "FAILED: the sharded programs' y differs from the 1-device y by 1e-4 or more"
  echo "  all below 1e-4: agree"
}

# ---- moe: bench/moe.gsl's forward moe layer against PyTorch -------------------
# GShard's top-2 moe layer (SPEC section 6, no random routing), compiled by
# gslc (f32, and bf16 with --precision bf16), against the
# same layer in PyTorch (bench/moe_torch.py) dispatched by index (index_copy,
# bmm, index_add) or with GShard's dense one-hot tensors and einsums, each in
# f32 and under torch.autocast bf16, at two sizes, on one core; timed like
# the mlp part (GSL from its own log, the same fixed x bound with --input,
# interleaved runs, medians), the goal judged against the fastest peer.
# PyTorch's ways run with glibc malloc keeping freed memory
# (MALLOC_MMAP_MAX_=0; "kept", "index_kept") and, if asked, as it comes
# ("default", "index"): its temporaries (128 MiB each at the large size) are
# otherwise mmapped and unmapped every step, and on a VM that reports free
# pages to its host every step then faults them in afresh (see
# bench/README.md). Then y and aux of GSL and both PyTorch ways must agree
# on the same x and weights, also with choices dropped.

# The moe parts' size $1 (spec or large): dims, timed steps st, warm-up wu,
# repetitions rp, and G S M Hd E with the capacity C of top-2 at factor 2.
moe_size() {
  if [ "$1" = spec ]; then dims=$MOE_SPEC st=$STEPS wu=$WARMUP rp=$REPS
  else dims=$MOE_LARGE st=$MOE_LARGE_STEPS wu=$MOE_LARGE_WARMUP rp=$MOE_LARGE_REPS; fi
  set -- $dims
  [ $# = 5 ] || die "MOE_SPEC / MOE_LARGE: expected five numbers G S M H E, got '$dims'"
  G=$1 S=$2 M=$3 Hd=$4 E=$5
  C=$(awk -v s=$S -v e=$E 'BEGIN { c = 2.0 * 2 * s / e; print (c == int(c) ? c : int(c) + 1) }')
}
# The PyTorch parts' peers: whether numpy (needed: false when it is
# missing, the part then skipped; $2 says what for) and torch are there, and
# kept_env, glibc malloc without mmap and without trimming (freed memory
# stays in the heap); TORCH_PREC, the precisions every way runs in ("f32"
# and "bf16", torch.autocast to bfloat16). GSL runs in f32 and with
# --precision bf16. $1: the part's name, for messages.
peers_setup() {  # PART NUMPY_FOR
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  if ! $PYTHON -c 'import numpy' 2>/dev/null; then
    echo "$1: skipped ($PYTHON cannot import numpy, needed $2; apt-get install python3-numpy)"
    return 1
  fi
  have_torch=yes
  $PYTHON -c 'import torch' 2>/dev/null || have_torch=no
  [ $have_torch = yes ] ||
    echo "  PyTorch: skipped ($PYTHON cannot import torch; apt-get install python3-torch): GSL alone"
  kept_env="MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736"
  TORCH_PREC=${TORCH_PREC:-f32 bf16}
  for prec in $TORCH_PREC; do
    case $prec in f32|bf16) ;; *) die "TORCH_PREC: expected f32 and/or bf16, got '$prec'" ;; esac
  done
}

# The moe parts' settings (the sizes' defaults) and peers. $1: the part's name.
moe_setup() {
  MOE_SPEC=${MOE_SPEC:-4 256 64 256 8} MOE_LARGE=${MOE_LARGE:-8 1024 256 1024 16}
  MOE_LARGE_STEPS=${MOE_LARGE_STEPS:-3} MOE_LARGE_WARMUP=${MOE_LARGE_WARMUP:-3}
  MOE_LARGE_REPS=${MOE_LARGE_REPS:-3} MOE_TORCH=${MOE_TORCH:-kept index_kept}
  peers_setup "$1" "for the fixed batch and the check"
}

# One timed run of a PyTorch peer per way in WAYS and precision in
# TORCH_PREC. The ways: "default" (GShard's one-hot einsums, malloc as it
# comes), "kept" (the same with kept_env), "index" (dispatch by index,
# malloc as it comes), "index_kept" (by index with kept_env); a line
# "PREFIXtorch_WAY_PREC MS ..." each (whatever ONCE prints), appended to
# FILE. ONCE is the peer's one-run function (DISPATCH PREC [VAR=VALUE ...]
# -> ms/step ...; DISPATCH einsum or index, PREC f32 or bf16); VAR names the
# setting that lists the ways, WHAT the peer, for messages.
torch_ways() {  # WAYS ONCE FILE PREFIX VAR WHAT
  for way in $1; do
    for prec in $TORCH_PREC; do
      case $way in
        default) t=$($2 einsum $prec) ;;
        kept) t=$($2 einsum $prec $kept_env) ;;
        index) t=$($2 index $prec) ;;
        index_kept) t=$($2 index $prec $kept_env) ;;
        *) die "$5: expected default, kept, index and/or index_kept, got '$way'" ;;
      esac
      [ -n "$t" ] || die "$6 failed ($way, $prec)"
      echo "$4torch_${way}_$prec $t" >>"$3"
    done
  done
}
# The options of a peer script for DISPATCH and PREC (torch_ways' ONCE).
torch_opts() {  # DISPATCH PREC
  echo "--way $1"
  [ "$2" = f32 ] || echo --autocast
}

# The table of the PyTorch parts: one row a key of SIZE in FILE (lines
# "SIZE KEY MS [FIRST-LOSS LAST-LOSS]", KEY gsl, gsl_bf16 or a torch_ways
# key): the median ms/step, tokens/s (TOKENS a step), GFLOP/s (FLOP a step:
# the same useful count for every row), the speed relative to the fastest
# PyTorch row (its ms/step over this row's: the ratio the goals are about),
# the first run's losses (LOSS yes) and every run; then the goal line,
# GSL >= GOAL x the fastest peer, for each GSL row. peer_header prints the
# columns' names.
peer_header() {  # LOSS
  printf '%-6s %-42s %9s %10s %8s %9s' size implementation ms/step tokens/s GFLOP/s "x fastest"
  [ "$1" = yes ] && printf '  %-21s' "loss (first→last)"
  printf '  %s\n' "runs (ms/step)"
}
peer_table() {  # FILE SIZE TOKENS FLOP LOSS GOAL WHAT
  awk -v s="$2" -v tok="$3" -v flop="$4" -v loss="$5" -v goal="$6" -v what="$7" '
    function median(k,   n, i, j, x, w) {
      n = cnt[k]; for (i = 1; i <= n; i++) w[i] = v[k, i]
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (w[j] < w[i]) { x = w[i]; w[i] = w[j]; w[j] = x }
      return n % 2 ? w[(n + 1) / 2] : (w[n / 2] + w[n / 2 + 1]) / 2
    }
    function name(k,   p, d) {
      if (k == "gsl") return "GSL f32 (gslc -O2)"
      if (k == "gsl_bf16") return "GSL bf16 (gslc -O2 --precision bf16)"
      p = k; sub(/.*_/, "", p); d = k; sub(/^torch_/, "", d); sub(/_[^_]*$/, "", d)
      return "PyTorch " (d ~ /^index/ ? "index" : "einsum") ", " (p == "bf16" ? "autocast bf16" : "f32") \
        (d ~ /kept$/ ? ", malloc kept" : "")
    }
    $1 == s { k = $2; if (!(k in cnt)) { order[++nk] = k }
      v[k, ++cnt[k]] = $3; runs[k] = runs[k] (cnt[k] > 1 ? " " : "") sprintf("%.1f", $3)
      if (cnt[k] == 1 && NF >= 5) lo[k] = sprintf("%.4f→%.4f", $4, $5) }
    END {
      best = ""
      for (i = 1; i <= nk; i++) if (order[i] ~ /^torch_/) { m = median(order[i])
        if (best == "" || m < best) { best = m; bk = order[i] } }
      for (pass = 1; pass <= 2; pass++) for (i = 1; i <= nk; i++) {
        k = order[i]; if (pass == 1 ? k != "gsl" && k != "gsl_bf16" : k !~ /^torch_/) continue
        m = median(k)
        printf "%-6s %-42s %9.1f %10.0f %8s %9s", s, name(k), m, 1000 * tok / m,
          flop == "" ? "-" : sprintf("%.1f", flop / m / 1e6), best == "" ? "-" : sprintf("%.2f", best / m)
        if (loss == "yes") printf "  %-21s", lo[k]
        printf "  %s\n", runs[k]
      }
      if (best == "") exit
      printf "goal (%s, %s): GSL >= %gx the fastest peer (%s, %.1f ms):", what, s, goal, name(bk), best
      for (i = 1; i <= nk; i++) if (order[i] == "gsl" || order[i] == "gsl_bf16") { r = best / median(order[i])
        printf " %s %.2fx %s;", (order[i] == "gsl" ? "f32" : "bf16"), r, (r >= goal ? "met" : "NOT MET") }
      if (!("gsl_bf16" in cnt)) printf " bf16 not run"
      printf "\n"
    }' "$1"
}

peer_footnote() {
  echo "(x fastest = the fastest PyTorch row's ms/step over this row's: GSL's ratio against the faster peer;" \
       "GFLOP/s = the same useful FLOP a step for every row over its time; einsum: GShard's one-hot" \
       "[G, S, E, C] dispatch and combine; index: index_copy into [E, G*C, M], bmm, index_add back;" \
       "autocast bf16: torch.autocast(\"cpu\", dtype=torch.bfloat16) around the forward pass, the router in" \
       "f32; malloc kept: $kept_env)"
}

moe() {
  echo "GSL moe benchmark: bench/moe.gsl's forward moe layer (top-2, capacity 2.0, no random routing)" \
       "against PyTorch, one core (OPENBLAS_NUM_THREADS=1)"
  moe_setup moe || return 0

  : >"$tmp/moetimes"
  for size in spec large; do
    moe_size $size
    eval "moe_dims_$size='$G $S $M $Hd $E $C'"
    echo "  $size: G=$G S=$S M=$M H=$Hd E=$E (C=$C), $st timed steps after $wu warm-up steps," \
         "median of $rp runs"
    $GSLC -D G=$G -D S=$S -D M=$M -D H=$Hd -D E=$E "$top/bench/moe.gsl" -o "$tmp/moe_$size" ||
      die "gslc failed (bench/moe.gsl, $size size)"
    $GSLC --precision bf16 -D G=$G -D S=$S -D M=$M -D H=$Hd -D E=$E "$top/bench/moe.gsl" \
      -o "$tmp/moe16_$size" || die "gslc --precision bf16 failed (bench/moe.gsl, $size size)"
    [ $size = spec ] && blas_core "$tmp/moe_$size" "GSL and PyTorch"
    $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(1).standard_normal(($G, $S, $M)).astype(np.float32))" \
      "$tmp/moex_$size.npy" || die "could not write moex_$size.npy"

    # GSL: ms/step from the log's tokens/s (tokens = G * S; printed to more
    # digits than the ms/step, which is 0.1 ms), averaged over the steps
    # after the warm-up.
    moe_gsl_once() {  # PROG
      "$1" --steps $((wu + st)) --log-every 1 --input x="$tmp/moex_$size.npy" \
        >"$tmp/moe.log" 2>&1 || { cat "$tmp/moe.log" >&2; return 1; }
      awk -v w=$wu -v tok=$((G * S)) '/^step /{ split($2, a, "/"); if (a[1] + 0 > w) {
          for (i = 3; i < NF; i++) if ($i == "tokens/s") t += 1000 * tok / $(i + 1); n++ } }
        END { if (n) printf "%.3f\n", t / n; else exit 1 }' "$tmp/moe.log"
    }
    moe_torch_once() {  # DISPATCH PREC [VAR=VALUE ...]
      o=$(torch_opts $1 $2); shift 2
      env "$@" $PYTHON "$here/moe_torch.py" --G $G --S $S --M $M --H $Hd --E $E $o \
        --steps $st --warmup $wu --x "$tmp/moex_$size.npy" | sed -n 's/^ms_per_step //p'
    }
    r=1
    while [ $r -le $rp ]; do  # interleaved, so that load on the machine hits all alike
      t=$(moe_gsl_once "$tmp/moe_$size") && [ -n "$t" ] || die "the GSL moe program failed ($size size)"
      echo "$size gsl $t" >>"$tmp/moetimes"
      t=$(moe_gsl_once "$tmp/moe16_$size") && [ -n "$t" ] || die "the GSL bf16 moe program failed ($size size)"
      echo "$size gsl_bf16 $t" >>"$tmp/moetimes"
      [ $have_torch = no ] ||
        torch_ways "$MOE_TORCH" moe_torch_once "$tmp/moetimes" "$size " MOE_TORCH "moe_torch.py ($size size)"
      r=$((r + 1))
    done
  done

  echo
  tv=$($PYTHON -c 'import torch; print(torch.__version__)' 2>/dev/null)
  echo "PyTorch ${tv:-(not run)}; FLOP a step: the gate and the expert FFN's two GEMMs over all E*G*C slots"
  peer_header no
  for size in spec large; do
    eval "set -- \$moe_dims_$size"
    # x @ wg, then t @ wi[e] and h @ wo[e] on [E, G * C] rows
    flop=$(awk -v g=$1 -v s=$2 -v m=$3 -v h=$4 -v e=$5 -v c=$6 'BEGIN { printf "%.0f", 2 * g * s * m * e + 4 * e * g * c * m * h }')
    peer_table "$tmp/moetimes" $size $(($1 * $2)) $flop no 1.5 "moe forward"
  done
  peer_footnote
  # Agreement: GSL's y and aux against PyTorch's from the same x and weights,
  # at both sizes as timed, and at the SPEC size with a sharp gate (wg
  # normal(1.0)) and capacity 1.0, so that many choices are dropped.
  echo
  if [ $have_torch = no ]; then
    echo "agreement check: skipped (needs PyTorch)"
    return 0
  fi
  sed -e 's/^\(param wg:.*\)normal(0\.02)/\1normal(1.0)/' -e 's/capacity = 2\.0/capacity = 1.0/' \
    "$top/bench/moe.gsl" >"$tmp/moedrop.gsl"
  grep -q 'normal(1.0)' "$tmp/moedrop.gsl" && grep -q 'capacity = 1.0' "$tmp/moedrop.gsl" ||
    die "could not make the dropping variant of bench/moe.gsl"
  echo "agreement of PyTorch with GSL (max |a - b| / max |ref|, ref = GSL):"
  : >"$tmp/moecheck"
  for c in spec large drop; do
    case $c in
      drop) eval "set -- \$moe_dims_spec"; src="$tmp/moedrop.gsl" cf=1.0 what="spec size, wg normal(1.0), capacity 1.0" ;;
      *) eval "set -- \$moe_dims_$c"; src="$top/bench/moe.gsl" cf=2.0 what="$c size" ;;
    esac
    d="$tmp/moecheck_$c"
    mkdir -p "$d"
    $GSLC -D G=$1 -D S=$2 -D M=$3 -D H=$4 -D E=$5 "$src" -o "$d/moe" || die "gslc failed (check $c)"
    $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(2).standard_normal(($1, $2, $3)).astype(np.float32))" \
      "$d/x.npy" || die "could not write x.npy"
    "$d/moe" --quiet --steps 1 --input x="$d/x.npy" --output y="$d/y.npy" --output aux="$d/aux.npy" \
      --output wg="$d/wg.npy" --output wi="$d/wi.npy" --output wo="$d/wo.npy" ||
      die "the GSL check program failed ($c)"
    env $kept_env $PYTHON "$here/moe_torch.py" --check "$d" --capacity $cf >"$d/out" ||
      die "moe_torch.py --check failed ($c)"
    echo "  $what: $(sed -n 's/^routing //p' "$d/out")"
    sed -n 's/^check \([a-z_]*\) \(.*\)/    \1: \2/p' "$d/out"
    sed -n 's/^check /check /p' "$d/out" >>"$tmp/moecheck"
  done
  awk '$1 == "check" && !($3 < 1e-4) { bad = 1 } END { exit bad }' "$tmp/moecheck" ||
    die "FAILED: some error is not below 1e-4"
  echo "  all below 1e-4: agree"
}

# ---- moe_a2a: the moe layer's two all-to-alls through libgslrt against raw MPI -
# bench/moe_a2a.c times gslrt_all_to_all exactly as gslc emits it for
# bench/moe.gsl at -D D=2 (dispatch: [E, G/2, C, M] split 0 concat 1;
# combine: [E/2, G, C, M] split 1 concat 0) at both sizes of the moe part,
# against MPI_Alltoall on the same bytes, under mpiexec -n 2.
moe_a2a() {
  MPICC=${MPICC:-mpicc} MPIEXEC=${MPIEXEC:-mpiexec} LIBGSLRT=${LIBGSLRT:-runtime/libgslrt.a}
  BENCH_REPS=${BENCH_REPS:-25} BENCH_WARMUP=${BENCH_WARMUP:-3}
  MOE_SPEC=${MOE_SPEC:-4 256 64 256 8} MOE_LARGE=${MOE_LARGE:-8 1024 256 1024 16}
  export BENCH_REPS BENCH_WARMUP
  [ -f "$LIBGSLRT" ] || die "no $LIBGSLRT (run make first, or set LIBGSLRT)"
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  shapes=
  for dims in "$MOE_SPEC" "$MOE_LARGE"; do
    set -- $dims
    [ $# = 5 ] || die "MOE_SPEC / MOE_LARGE: expected five numbers G S M H E, got '$dims'"
    C=$(awk -v s=$2 -v e=$5 'BEGIN { c = 2.0 * 2 * s / e; print (c == int(c) ? c : int(c) + 1) }')
    shapes="$shapes${shapes:+ }${5}x${1}x${C}x${3}"
    # what the compiler puts between the 2 devices (gslc --explain)
    echo "gslc -D D=2 -D G=$1 -D S=$2 -D M=$3 -D H=$4 -D E=$5 --explain bench/moe.gsl:"
    $GSLC -D D=2 -D G=$1 -D S=$2 -D M=$3 -D H=$4 -D E=$5 --explain "$top/bench/moe.gsl" >"$tmp/moe_explain" ||
      die "gslc --explain failed (bench/moe.gsl, D=2)"
    awk '/^## collectives/ { on = 1; next } on && /^$/ { on = 0 } on && NF { sub(/ *;.*/, ""); print "  " $0 }' \
      "$tmp/moe_explain" | tr -s ' '
  done
  echo
  $MPICC -std=c11 -O2 -I"$top/runtime" "$here/moe_a2a.c" "$LIBGSLRT" $RT_LIBS \
    -o "$tmp/moe_a2a" || die "could not compile bench/moe_a2a.c"
  MOE_A2A_SHAPES=$shapes $MPIEXEC -n 2 "$tmp/moe_a2a" --quiet || die "the moe all-to-all benchmark failed"
}

# ---- moe_train: bench/moe_train.gsl's training step against PyTorch ----------
# The same moe layer trained (SPEC section 1: loss mse(y, tanh(x @ teacher)) +
# 0.01 * aux, teacher frozen, Adam): forward, backward and the update, GSL
# against PyTorch's autograd and torch.optim.Adam (bench/moe_train_torch.py),
# one core each, at both sizes of the moe part, timed like it (GSL from rank
# 0's --metrics, the same fixed x, interleaved runs, medians; PyTorch's ways
# and precisions as in the moe part). Every run's loss must fall over its
# timed steps. Then the weak scaling of the GSL step: mesh [d = 1] with G
# groups under $MPIEXEC -n 1 against [d = 2] with 2G groups under -n 2 (the
# same work per rank; efficiency = t1 / t2). Then GSL and PyTorch must agree
# from the same initial weights: the losses of the first Adam steps, the
# gradients of the first step (through one SGD step), the weights after the
# Adam steps.
moe_train() {
  MPIEXEC=${MPIEXEC:-mpiexec}
  MOE_CHECK_STEPS=${MOE_CHECK_STEPS:-5}
  echo "GSL moe_train benchmark: bench/moe_train.gsl's training step (forward, backward, Adam) against" \
       "PyTorch (autograd, torch.optim.Adam), one core (OPENBLAS_NUM_THREADS=1)"
  moe_setup moe_train || return 0

  # One GSL run: "ms/step first-loss last-loss" over the steps after the
  # warm-up, from rank 0's --metrics (ms/step to 6 digits, the loss exactly).
  mt_gsl_once() {  # NP PROG X
    $MPIEXEC -n $1 "$2" --quiet --steps $((wu + st)) --log-every 1 --input x="$3" \
      --metrics "$tmp/mt.jsonl" >"$tmp/mt.log" 2>&1 || { cat "$tmp/mt.log" >&2; return 1; }
    awk -v w=$wu '{ k = $0; sub(/.*"step": /, "", k); k += 0
        l = $0; sub(/.*"loss": /, "", l); l += 0
        m = $0; sub(/.*"ms_per_step": /, "", m); m += 0
        if (k > w) { t += m; n++; if (n == 1) first = l; last = l } }
      END { if (n) printf "%.3f %.9g %.9g\n", t / n, first, last; else exit 1 }' "$tmp/mt.jsonl"
  }
  mt_torch_once() {  # DISPATCH PREC [VAR=VALUE ...]
    o=$(torch_opts $1 $2); shift 2
    env "$@" $PYTHON "$here/moe_train_torch.py" --G $G --S $S --M $M --H $Hd --E $E $o \
      --steps $st --warmup $wu --x "$tmp/mtx_$size.npy" >"$tmp/mt.out" || return 1
    awk '$1 == "ms_per_step" { t = $2 } $1 == "loss" { f = $2; l = $3 }
      END { if (t != "") print t, f, l; else exit 1 }' "$tmp/mt.out"
  }

  : >"$tmp/mttimes"
  for size in spec large; do
    moe_size $size
    eval "mt_dims_$size='$G $S $M $Hd $E $C'"
    echo "  $size: G=$G S=$S M=$M H=$Hd E=$E (C=$C), $st timed steps after $wu warm-up steps," \
         "median of $rp runs; 2 ranks: G=$((2 * G))"
    $GSLC -D G=$G -D S=$S -D M=$M -D H=$Hd -D E=$E "$top/bench/moe_train.gsl" -o "$tmp/mt1_$size" ||
      die "gslc failed (bench/moe_train.gsl, $size size)"
    $GSLC -D D=2 -D G=$((2 * G)) -D S=$S -D M=$M -D H=$Hd -D E=$E "$top/bench/moe_train.gsl" \
      -o "$tmp/mt2_$size" || die "gslc failed (bench/moe_train.gsl, $size size, D=2)"
    $GSLC --precision bf16 -D G=$G -D S=$S -D M=$M -D H=$Hd -D E=$E "$top/bench/moe_train.gsl" \
      -o "$tmp/mt16_$size" || die "gslc --precision bf16 failed (bench/moe_train.gsl, $size size)"
    [ $size = spec ] && blas_core "$tmp/mt1_$size" "GSL and PyTorch"
    # what the compiler puts between the 2 devices (gslc --explain)
    $GSLC -D D=2 -D G=$((2 * G)) -D S=$S -D M=$M -D H=$Hd -D E=$E --explain "$top/bench/moe_train.gsl" \
      >"$tmp/mt_explain" || die "gslc --explain failed (bench/moe_train.gsl, D=2)"
    echo "    collectives at D=2: $(awk '/^## collectives/ { on = 1; next } on && /^$/ { on = 0 }
        on && NF { sub(/ *;.*/, ""); sub(/ over \(d\)/, ""); sub(/:.*, /, " "); n++
                   printf "%s%s", (n > 1 ? "; " : ""), $0 }' "$tmp/mt_explain" | tr -s ' ')"
    $PYTHON -c "import numpy as np, sys
for f, g in ((sys.argv[1], $G), (sys.argv[2], 2 * $G)):
    np.save(f, np.random.default_rng(1).standard_normal((g, $S, $M)).astype(np.float32))" \
      "$tmp/mtx_$size.npy" "$tmp/mtx2_$size.npy" || die "could not write mtx_$size.npy"

    r=1
    while [ $r -le $rp ]; do  # interleaved, so that load on the machine hits all alike
      t=$(mt_gsl_once 1 "$tmp/mt1_$size" "$tmp/mtx_$size.npy") || die "the GSL train program failed ($size size)"
      echo "$size gsl $t" >>"$tmp/mttimes"
      t=$(mt_gsl_once 2 "$tmp/mt2_$size" "$tmp/mtx2_$size.npy") ||
        die "the GSL train program failed under $MPIEXEC -n 2 ($size size)"
      echo "$size gsl2 $t" >>"$tmp/mttimes"
      t=$(mt_gsl_once 1 "$tmp/mt16_$size" "$tmp/mtx_$size.npy") ||
        die "the GSL bf16 train program failed ($size size)"
      echo "$size gsl_bf16 $t" >>"$tmp/mttimes"
      [ $have_torch = no ] ||
        torch_ways "$MOE_TORCH" mt_torch_once "$tmp/mttimes" "$size " MOE_TORCH "moe_train_torch.py ($size size)"
      r=$((r + 1))
    done
  done

  # the median ms/step of KEY at SIZE
  mt_median() { med "$tmp/mttimes" "$1" "$2"; }  # SIZE KEY
  echo
  tv=$($PYTHON -c 'import torch; print(torch.__version__)' 2>/dev/null)
  echo "PyTorch ${tv:-(not run)}; FLOP a step: the forward's gate, teacher and expert GEMMs (all E*G*C" \
       "slots), the backward's three expert GEMMs and the gate's weight gradient"
  peer_header yes
  for size in spec large; do
    eval "set -- \$mt_dims_$size"
    # forward: x @ wg, x @ teacher, two expert GEMMs; backward: three expert GEMMs and x^T @ dlogits
    flop=$(awk -v g=$1 -v s=$2 -v m=$3 -v h=$4 -v e=$5 -v c=$6 \
      'BEGIN { printf "%.0f", 4 * g * s * m * e + 2 * g * s * m * m + 10 * e * g * c * m * h }')
    # the goals: 2x the fastest peer at the specification's size, 3x at the large one
    goal=2
    [ "$size" = large ] && goal=3
    peer_table "$tmp/mttimes" $size $(($1 * $2)) $flop yes $goal "moe train step"
  done
  peer_footnote
  peaks
  echo
  echo "MFU: the model's FLOP of products a step a device (gslc --stats) over the median step, against this" \
       "machine's peak of the step's precision (f32 $pf, bf16 $pb GFLOP/s, bench/gemm_peak.c, measured now):"
  mfu_header
  for size in spec large; do
    eval "set -- \$mt_dims_$size"
    mf=$(stats_flop 1 -D G=$1 -D S=$2 -D M=$3 -D H=$4 -D E=$5 "$top/bench/moe_train.gsl")
    mfu_row "$size: GSL f32, 1 rank" "$(med "$tmp/mttimes" $size gsl)" $mf $pf
    mfu_row "$size: GSL f32, 2 ranks" "$(med "$tmp/mttimes" $size gsl2)" $mf $pf
    mfu_row "$size: GSL bf16, 1 rank" "$(med "$tmp/mttimes" $size gsl_bf16)" $mf $pb
  done
  echo "(loss: the first and last timed step of the first run)"
  # every run's loss must have fallen over its timed steps
  awk '!($5 < $4) { printf "bench: FAILED: the loss did not fall (%s %s: %s -> %s)\n", $1, $2, $4, $5; bad = 1 }
    END { exit bad }' "$tmp/mttimes" >&2 || exit 1
  echo "the loss fell over the timed steps in every run"

  echo
  echo "weak scaling of the GSL train step (the same work per rank; efficiency = t1 / t2):"
  printf '%-6s %5s %4s %10s %11s %10s   %s\n' size ranks G ms/step tokens/s efficiency "runs (ms/step)"
  for size in spec large; do
    eval "set -- \$mt_dims_$size"
    t1=$(mt_median $size gsl)
    for k in gsl gsl2; do
      case $k in gsl) n=1 ;; gsl2) n=2 ;; esac
      awk -v s=$size -v k=$k -v n=$n -v g=$(($1 * n)) -v tok=$(($1 * n * $2)) -v m="$(mt_median $size $k)" \
        -v t1="$t1" '$1 == s && $2 == k { runs = runs sep sprintf("%.1f", $3); sep = " " }
        END { printf "%-6s %5d %4d %10.1f %11.0f %10.2f   %s\n", s, n, g, m, 1000 * tok / m, t1 / m, runs }' \
        "$tmp/mttimes"
    done
  done
  echo "(1 rank: mesh [d = 1] under $MPIEXEC -n 1; 2 ranks: [d = 2] under -n 2, G doubled; ms/step: rank 0's)"

  # Agreement from the same initial weights: GSL's (a copy with lr 0 writes
  # them after one step) are loaded into PyTorch; both make MOE_CHECK_STEPS
  # Adam steps on the same x; an SGD copy (lr 1000, so that p0 - p1 keeps the
  # gradient's digits) gives GSL's gradients of step 1. At both sizes, and at
  # the spec size with a sharp gate and capacity 1.0 (choices dropped).
  echo
  if [ $have_torch = no ]; then
    echo "agreement check: skipped (needs PyTorch)"
    return 0
  fi
  sed 's/adam(lr = LR)/sgd(lr = 1000.0)/' "$top/bench/moe_train.gsl" >"$tmp/mtsgd.gsl"
  sed -e 's/^\(param wg:.*\)normal(0\.02)/\1normal(1.0)/' -e 's/capacity = 2\.0/capacity = 1.0/' \
    "$top/bench/moe_train.gsl" >"$tmp/mtdrop.gsl"
  sed 's/adam(lr = LR)/sgd(lr = 1000.0)/' "$tmp/mtdrop.gsl" >"$tmp/mtdropsgd.gsl"
  grep -q 'sgd(lr = 1000.0)' "$tmp/mtsgd.gsl" && grep -q 'normal(1.0)' "$tmp/mtdrop.gsl" &&
    grep -q 'capacity = 1.0' "$tmp/mtdrop.gsl" || die "could not make the variants of bench/moe_train.gsl"
  echo "agreement of PyTorch with GSL from the same initial weights (max |a - b| / max |ref|, ref = GSL):"
  : >"$tmp/mtcheck"
  for c in spec large drop; do
    case $c in
      drop) eval "set -- \$mt_dims_spec"; src="$tmp/mtdrop.gsl" sgd="$tmp/mtdropsgd.gsl" cf=1.0
            what="spec size, wg normal(1.0), capacity 1.0" ;;
      *) eval "set -- \$mt_dims_$c"; src="$top/bench/moe_train.gsl" sgd="$tmp/mtsgd.gsl" cf=2.0 what="$c size" ;;
    esac
    d="$tmp/mtcheck_$c"
    mkdir -p "$d"
    dims="-D G=$1 -D S=$2 -D M=$3 -D H=$4 -D E=$5"
    $GSLC $dims -D LR=0 "$src" -o "$d/lr0" && $GSLC $dims "$src" -o "$d/adam" && $GSLC $dims "$sgd" -o "$d/sgd" ||
      die "gslc failed (check $c)"
    $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(2).standard_normal(($1, $2, $3)).astype(np.float32))" \
      "$d/x.npy" || die "could not write x.npy"
    "$d/lr0" --quiet --steps 1 --input x="$d/x.npy" --metrics "$d/lr0.jsonl" --output wg="$d/wg.npy" \
      --output wi="$d/wi.npy" --output wo="$d/wo.npy" --output teacher="$d/teacher.npy" &&
    "$d/adam" --quiet --steps $MOE_CHECK_STEPS --input x="$d/x.npy" --metrics "$d/adam.jsonl" \
      --output wg="$d/gsl_wg.npy" --output wi="$d/gsl_wi.npy" --output wo="$d/gsl_wo.npy" &&
    "$d/sgd" --quiet --steps 1 --input x="$d/x.npy" --metrics "$d/sgd.jsonl" --output wg="$d/sgd_wg.npy" \
      --output wi="$d/sgd_wi.npy" --output wo="$d/sgd_wo.npy" || die "a GSL check program failed ($c)"
    sed 's/.*"loss": \([^,]*\),.*/\1/' "$d/adam.jsonl" >"$d/gsl_loss.txt"
    # the three programs start from the same weights: the same first loss, to the bit
    l0=$(sed 's/.*"loss": \([^,]*\),.*/\1/' "$d/lr0.jsonl") l1=$(sed -n 1p "$d/gsl_loss.txt")
    ls=$(sed 's/.*"loss": \([^,]*\),.*/\1/' "$d/sgd.jsonl")
    [ "$l0" = "$l1" ] && [ "$l0" = "$ls" ] ||
      die "the lr 0, Adam and SGD programs do not start alike ($c: loss $l0, $l1, $ls)"
    env $kept_env $PYTHON "$here/moe_train_torch.py" --check "$d" --steps $MOE_CHECK_STEPS --capacity $cf \
      --sgd-lr 1000 >"$d/out" || die "moe_train_torch.py --check failed ($c)"
    echo "  $what: $(sed -n 's/^routing //p' "$d/out")"
    awk '$1 == "loss" { printf "%s%s %s", (n++ ? ", " : "    loss GSL/PyTorch by step: "), $3, $4 }
      END { if (n) print "" }' "$d/out"
    awk '$1 == "check" || $1 == "info" { printf "%s%s %s", (n++ ? ", " : "    "), $2, $3 }
      END { if (n) print "" }' "$d/out"
    sed -n 's/^check /check /p' "$d/out" >>"$tmp/mtcheck"
  done
  echo "  (loss: the $MOE_CHECK_STEPS Adam steps' losses and grad_*: the first step's gradients, max |a - b| /" \
       "max |ref|; upd_*: the $MOE_CHECK_STEPS steps' updates p_N - p_0, ||a - b|| / ||ref||; maxupd_*: their" \
       "largest difference in one element, in units of lr, not checked: see bench/moe_train_torch.py)"
  awk '$1 == "check" && !($3 < ($2 ~ /upd_/ ? 1e-3 : 1e-4)) { bad = 1 } END { exit bad }' "$tmp/mtcheck" ||
    die "FAILED: some error is not below its bound (1e-4; 1e-3 for upd_*)"
  echo "  all below 1e-4 (upd_*: 1e-3): agree"
}

# ---- lm: examples/lm.gsl's training step against PyTorch ---------------------
# The decoder-only byte-level MoE Transformer of examples/lm.gsl (4 layers,
# the FFN of layers 1 and 3 a top-2 moe block with random routing), trained on
# scripts/lm_data.py's fortunes windows: GSL at -O2 on one rank (-D DATA=1
# -D EXPERT=1 under $MPIEXEC -n 1) against the same model in PyTorch
# (bench/lm_torch.py: autograd, torch.optim.Adam, the moe layer of
# bench/moe_torch.py by index or by einsum, f32 or autocast bf16), one core
# each, the same batches in the same order; timed like moe_train (GSL from
# rank 0's --metrics, interleaved runs, medians, PyTorch's ways as in the
# moe parts), the goal GSL >= 3x the fastest peer's tokens/s (issue 34). Every run's
# loss must fall over
# its timed steps. Then the two must agree from the same initial weights with
# random routing off (the one difference left between them: GSL's draws
# against torch.rand): the losses of LM_CHECK_STEPS Adam steps and the
# updates of every param.
lm() {
  MPIEXEC=${MPIEXEC:-mpiexec}
  LM_GSL=${LM_GSL:-$top/examples/lm.gsl} LM_DIMS=${LM_DIMS:-8 64 128 4 512 8}
  LM_TORCH=${LM_TORCH:-default kept index index_kept} LM_CHECK_STEPS=${LM_CHECK_STEPS:-5}
  echo "GSL lm benchmark: examples/lm.gsl's training step (byte-level MoE Transformer: forward, backward," \
       "Adam) against PyTorch (autograd, torch.optim.Adam), one core (OPENBLAS_NUM_THREADS=1)"
  [ -f "$LM_GSL" ] || die "no $LM_GSL (set LM_GSL to the language model's source)"
  peers_setup lm "by the PyTorch peer and the check" || return 0
  set -- $LM_DIMS
  [ $# = 6 ] || die "LM_DIMS: expected six numbers B T M NH H E, got '$LM_DIMS'"
  lB=$1 lT=$2 lM=$3 lNH=$4 lH=$5 lE=$6
  tok=$((lB * (lT + 1)))  # tokens a step: every element of the i32 batch [B, T + 1], as GSL's log counts
  # the moe blocks' capacity factor, for the peer: a number in their one
  # call (in the model or in stdlib/transformer.gsl), or else the model's
  # const CAP, which it passes to moe_block (examples/lm.gsl)
  lcf=$(sed -n 's/.*moe(.*capacity = \([0-9.][0-9.]*\).*/\1/p' "$LM_GSL" "$top/stdlib/transformer.gsl" | sort -u)
  [ -n "$lcf" ] || lcf=$(sed -n 's/^const CAP = \([0-9.][0-9.]*\).*/\1/p' "$LM_GSL")
  case $lcf in
    ''|*[!0-9.]*) die "cannot tell the capacity factor of the moe blocks of $LM_GSL (found '$lcf')" ;;
  esac
  C=$(awk -v f=$lcf -v s=$lT -v e=$lE 'BEGIN { c = f * 2 * s / e; print (c == int(c) ? c : int(c) + 1) }')
  dims="-D DATA=1 -D EXPERT=1 -D B=$lB -D T=$lT -D M=$lM -D NH=$lNH -D H=$lH -D E=$lE"
  pdims="--B $lB --T $lT --M $lM --NH $lNH --H $lH --E $lE --capacity $lcf"
  echo "  B=$lB T=$lT M=$lM NH=$lNH H=$lH E=$lE, capacity factor $lcf (C=$C), $STEPS timed steps after" \
       "$WARMUP warm-up steps, median of $REPS runs; $tok tokens a step (B * (T + 1))"
  $PYTHON "$top/scripts/lm_data.py" --fortunes --out "$tmp/lmdata" --batch $lB --seq $lT >"$tmp/lmdata.log" ||
    die "scripts/lm_data.py failed (the corpus is Debian's fortunes: apt-get install fortunes)"
  echo "  data: $(sed -n 's/^lm_data: train \([0-9]*\) batches.*/\1 training batches/p' "$tmp/lmdata.log")" \
       "of scripts/lm_data.py --fortunes --batch $lB --seq $lT, the same ones in the same order for both"
  data="$tmp/lmdata/train.npy"
  $GSLC $dims -O2 "$LM_GSL" -o "$tmp/lm" || die "gslc failed ($LM_GSL)"
  $GSLC --precision bf16 $dims -O2 "$LM_GSL" -o "$tmp/lm16" || die "gslc --precision bf16 failed ($LM_GSL)"
  blas_core "$tmp/lm" "GSL and PyTorch"

  # One GSL run: "ms/step first-loss last-loss" over the steps after the
  # warm-up, from rank 0's --metrics (ms/step to 6 digits, the loss exactly).
  lm_gsl_once() {  # PROG
    $MPIEXEC -n 1 "$1" --quiet --steps $((WARMUP + STEPS)) --log-every 1 --input tokens="$data" \
      --metrics "$tmp/lm.jsonl" >"$tmp/lm.log" 2>&1 || { cat "$tmp/lm.log" >&2; return 1; }
    awk -v w=$WARMUP '/"loss": / { k = $0; sub(/.*"step": /, "", k); k += 0
        l = $0; sub(/.*"loss": /, "", l); l += 0
        m = $0; sub(/.*"ms_per_step": /, "", m); m += 0
        if (k > w) { t += m; n++; if (n == 1) first = l; last = l } }
      END { if (n) printf "%.3f %.9g %.9g\n", t / n, first, last; else exit 1 }' "$tmp/lm.jsonl"
  }
  lm_torch_once() {  # DISPATCH PREC [VAR=VALUE ...]
    o=$(torch_opts $1 $2); shift 2
    env "$@" $PYTHON "$here/lm_torch.py" $pdims $o --steps $STEPS --warmup $WARMUP --data "$data" \
      >"$tmp/lm.out" || return 1
    awk '$1 == "ms_per_step" { t = $2 } $1 == "loss" { f = $2; l = $3 }
      END { if (t != "") print t, f, l; else exit 1 }' "$tmp/lm.out"
  }
  : >"$tmp/lmtimes"
  r=1
  while [ $r -le $REPS ]; do  # interleaved, so that load on the machine hits all alike
    t=$(lm_gsl_once "$tmp/lm") || die "the GSL lm program failed"
    echo "lm gsl $t" >>"$tmp/lmtimes"
    t=$(lm_gsl_once "$tmp/lm16") || die "the GSL bf16 lm program failed"
    echo "lm gsl_bf16 $t" >>"$tmp/lmtimes"
    [ $have_torch = no ] || torch_ways "$LM_TORCH" lm_torch_once "$tmp/lmtimes" "lm " LM_TORCH lm_torch.py
    r=$((r + 1))
  done

  echo
  tv=$($PYTHON -c 'import torch; print(torch.__version__)' 2>/dev/null)
  # The matrix products of a step: per predicted token forward, each of the
  # 4 layers' four projections (8 M^2) and the scores and weighted sum
  # (4 T M), the 2 dense FFNs (4 M H each), the 2 moe layers' expert FFNs
  # over all E * C slots of a sequence (E C / T slots a token, 4 M H each),
  # the logits (2 M 256); times 3 for the backward pass.
  flop=$(awk -v b=$lB -v t=$lT -v m=$lM -v h=$lH -v e=$lE -v c=$C 'BEGIN {
    printf "%.0f", 3 * b * t * (4 * (8 * m * m + 4 * t * m) + 2 * 4 * m * h + 2 * (e * c / t) * 4 * m * h + 2 * m * 256) }')
  echo "PyTorch ${tv:-(not run)}; FLOP a step: the matrix products, 3x the forward's (see bench/run.sh)"
  peer_header yes
  peer_table "$tmp/lmtimes" lm $tok $flop yes 3 "lm train step"
  peer_footnote
  peaks
  lf=$(stats_flop 1 $dims "$LM_GSL")
  echo
  echo "MFU: the model's FLOP of products a step (gslc --stats) over the median step, against this machine's" \
       "peak of the step's precision (f32 $pf, bf16 $pb GFLOP/s, bench/gemm_peak.c, measured now):"
  mfu_header
  mfu_row "GSL f32 (gslc -O2)" "$(med "$tmp/lmtimes" lm gsl)" $lf $pf
  mfu_row "GSL bf16 (gslc -O2 --precision bf16)" "$(med "$tmp/lmtimes" lm gsl_bf16)" $lf $pb
  echo "(tokens/s: B * (T + 1) tokens a step; loss: the first and last timed step of the first run, on" \
       "different batches)"
  # every run's loss must have fallen over its timed steps
  awk '!($5 < $4) { printf "bench: FAILED: the loss did not fall (lm %s: %s -> %s)\n", $2, $4, $5; bad = 1 }
    END { exit bad }' "$tmp/lmtimes" >&2 || exit 1
  echo "the loss fell over the timed steps in every run"

  # Agreement from the same initial weights, random routing off in both: a
  # copy of the model (and of stdlib/transformer.gsl, found first through -I)
  # with random_routing = false in its moe blocks and every param an output;
  # built with lr 0 it writes the initial weights after one step, built as
  # it is it makes LM_CHECK_STEPS Adam steps on the first batches; PyTorch
  # starts from the first and must follow the second.
  echo
  if [ $have_torch = no ]; then
    echo "agreement check: skipped (needs PyTorch)"
    return 0
  fi
  d="$tmp/lmcheck"
  mkdir -p "$d"
  norandom='s/capacity = \([A-Za-z_0-9.]*\))/capacity = \1, random_routing = false)/'
  sed "$norandom" "$top/stdlib/transformer.gsl" >"$d/transformer.gsl"
  names=$(sed -n 's/^param \([A-Za-z_][A-Za-z_0-9]*\):.*/\1/p' "$LM_GSL")
  { sed "$norandom" "$LM_GSL"; echo "output $(echo $names | sed 's/ /, /g')"; } >"$d/lm.gsl"
  grep -q 'random_routing = false' "$d/transformer.gsl" "$d/lm.gsl" && [ -n "$names" ] &&
    ! grep 'moe(' "$d/transformer.gsl" "$d/lm.gsl" | grep -qv 'random_routing = false' ||
    die "could not make the check copy of $LM_GSL (random routing off, the params as outputs)"
  $GSLC -I "$d" $dims -O2 -D LR=0 "$d/lm.gsl" -o "$d/lr0" && $GSLC -I "$d" $dims -O2 "$d/lm.gsl" -o "$d/adam" ||
    die "gslc failed (the check copies of $LM_GSL)"
  o0= o1=
  for n in $names; do o0="$o0 --output $n=$d/$n.npy" o1="$o1 --output $n=$d/gsl_$n.npy"; done
  $MPIEXEC -n 1 "$d/lr0" --quiet --steps 1 --input tokens="$data" --metrics "$d/lr0.jsonl" $o0 &&
  $MPIEXEC -n 1 "$d/adam" --quiet --steps $LM_CHECK_STEPS --log-every 1 --input tokens="$data" \
    --metrics "$d/adam.jsonl" $o1 || die "a GSL check program failed"
  sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$d/adam.jsonl" >"$d/gsl_loss.txt"
  # the two programs start from the same weights: the same first loss, to the bit
  l0=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$d/lr0.jsonl") l1=$(sed -n 1p "$d/gsl_loss.txt")
  [ "$l0" = "$l1" ] || die "the lr 0 and Adam programs do not start alike (loss $l0, $l1)"
  env $kept_env $PYTHON "$here/lm_torch.py" $pdims --check "$d" --steps $LM_CHECK_STEPS --data "$data" \
    >"$d/out" || die "lm_torch.py --check failed"
  echo "agreement of PyTorch with GSL from the same initial weights, random routing off:"
  echo "  $(sed -n 's/^routing //p' "$d/out")"
  awk '$1 == "loss" { printf "%s%s %s", (n++ ? ", " : "  loss GSL/PyTorch by step: "), $3, $4 }
    END { if (n) print "" }' "$d/out"
  awk '$1 == "check" { printf "%s%s %s", (n++ ? ", " : "  "), $2, $3 } END { if (n) print "" }' "$d/out"
  echo "  (loss: max |a - b| / |ref| over the $LM_CHECK_STEPS Adam steps, ref = GSL; upd_*: the steps'" \
       "updates p_N - p_0 of each param, ||a - b|| / ||ref||)"
  awk '$1 == "check" && !($3 < ($2 ~ /upd_/ ? 1e-3 : 1e-4)) { bad = 1 } END { exit bad }' "$d/out" ||
    die "FAILED: some error is not below its bound (1e-4; 1e-3 for upd_*)"
  echo "  all below 1e-4 (upd_*: 1e-3): agree"
}

# ---- gemm: the FMA peak and the matrix-product libraries, one thread -----------
# bench/gemm_peak.c, compiled against the build's libgslrt.a (for the
# runtime's own gslrt_sgemm and gslrt_gemm_bf16) and the runtime's libraries
# (GEMM_LIBS, by default RT_LIBS, which make bench passes), run as a plain process.
gemm() {
  MPICC=${MPICC:-mpicc} MPIEXEC=${MPIEXEC:-mpiexec} LIBGSLRT=${LIBGSLRT:-runtime/libgslrt.a}
  GEMM_LIBS=${GEMM_LIBS:-$RT_LIBS}
  [ -f "$LIBGSLRT" ] || die "no $LIBGSLRT (run make first, or set LIBGSLRT)"
  [ -x "$tmp/gemm_peak" ] || $MPICC -std=c11 -O2 -I"$top/runtime" "$here/gemm_peak.c" "$LIBGSLRT" $GEMM_LIBS -ldl \
    -o "$tmp/gemm_peak" || die "could not compile bench/gemm_peak.c"
  "$tmp/gemm_peak" | tee "$tmp/gemm_peak.out" || die "the gemm benchmark failed"
  pf=$(sed -n 's/^peaks used: f32 \([0-9.]*\), bf16 \([0-9.]*\).*/\1/p' "$tmp/gemm_peak.out")
  pb=$(sed -n 's/^peaks used: f32 \([0-9.]*\), bf16 \([0-9.]*\).*/\2/p' "$tmp/gemm_peak.out")
  [ -n "$pf" ] && [ -n "$pb" ] || die "bench/gemm_peak.c printed no peaks"

  # Every product of the examples, timed in the programs themselves
  # (GSL_GEMM_PROFILE, gslrun(7)): examples/lm.gsl on one rank and
  # bench/moe_train.gsl at the specification's size, each in f32 and with
  # --precision bf16, GEMM_STEPS steps (default 30) on fixed inputs
  echo
  echo "the examples' matrix products, timed in the programs (GSL_GEMM_PROFILE), against the peaks above:"
  steps=${GEMM_STEPS:-30}
  $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(1).integers(0, 256, (8, 65)).astype(np.int32))" "$tmp/tok.npy" ||
    die "could not write the lm's tokens (numpy)"
  for prog in lm lm16 mt mt16; do
    case $prog in
      lm) src=$top/examples/lm.gsl opts="-D DATA=1 -D EXPERT=1" args="--input tokens=$tmp/tok.npy" ;;
      lm16) src=$top/examples/lm.gsl opts="-D DATA=1 -D EXPERT=1 --precision bf16" args="--input tokens=$tmp/tok.npy" ;;
      mt) src=$top/bench/moe_train.gsl opts="" args="" ;;
      mt16) src=$top/bench/moe_train.gsl opts="--precision bf16" args="" ;;
    esac
    # shellcheck disable=SC2086
    $GSLC $opts "$src" -o "$tmp/g_$prog" || die "gslc failed ($src $opts)"
    # shellcheck disable=SC2086
    (cd "$tmp" && GSL_GEMM_PROFILE="$tmp/g_$prog.prof" $MPIEXEC -n 1 "./g_$prog" --steps "$steps" --quiet \
      --log-every 1 --metrics "$tmp/g_$prog.jsonl" $args) || die "g_$prog failed"
    # shellcheck disable=SC2086
    gf=$(stats_flop 1 $opts "$src")
    # the mean step after the first (which sets up), as the products' time counts calls after the first
    gms=$(awk '/"ms_per_step": / { k = $0; sub(/.*"step": /, "", k); m = $0; sub(/.*"ms_per_step": /, "", m)
        if (k + 0 > 1) { t += m; n++ } } END { if (n) printf "%.3f", t / n }' "$tmp/g_$prog.jsonl")
    echo "  $(basename "$src") $opts:"
    awk -v pf="$pf" -v pb="$pb" '
      { n = split($0, kv, /[{}:,]+/); delete f
        for (i = 2; i < n; i += 2) { k = kv[i]; gsub(/[" ]/, "", k); v = kv[i + 1]; gsub(/[" ]/, "", v); f[k] = v }
        if (f["calls"] == 0) next
        peak = f["type"] == "bf16" ? pb : pf
        flop = 2 * f["batch"] * f["m"] * f["n"] * f["k"] * f["calls"]
        tf += flop; ts += f["seconds"]; tp += flop / (peak * 1e9)
        rows[++nr] = sprintf("%012.6f    %-5s %4s x [%5d,%5d]%sx[%5d,%5d]%s %6d calls %8.1f GFLOP/s %5.0f%%", f["seconds"], f["type"],
          f["batch"], f["m"], f["k"], f["trans_a"] + 0 ? "T" : " ", f["k"], f["n"], f["trans_b"] + 0 ? "T" : " ", f["calls"],
          f["gflops"], 100 * f["gflops"] / peak) }
      END { for (i = 1; i <= nr; i++) print rows[i] >"/dev/stderr"
        if (ts > 0) printf "    all %d shapes: %.1f GFLOP/s over %.1f ms a step in products, %.0f%% of the peak time-weighted\n",
          nr, tf / ts / 1e9, 1000 * ts / '"$steps"', 100 * tp / ts
        if (ts > 0 && ms > 0) printf "    the step: %.2f ms, of which the products %.0f%%; MFU %.1f%% (the model'"'"'s %.0f FLOP of products a step, gslc --stats, at %.1f GFLOP/s)\n",
          ms, 100 * (1000 * ts / '"$steps"') / ms, 100 * mf / (ms * 1e6) / (prec == "bf16" ? pb : pf), mf, mf / (ms * 1e6) }' \
      ms="$gms" mf="$gf" prec="$(case $opts in *bf16*) echo bf16 ;; *) echo f32 ;; esac)" "$tmp/g_$prog.prof" 2>"$tmp/g_rows"
    sort -r "$tmp/g_rows" | head -n 8 | cut -c13-
  done
  echo "(the 8 shapes that took longest; each: its calls after the first, which is not timed; GFLOP/s of peak: against f32 $pf or bf16 $pb;" \
       "all: the products' FLOP over their time, and the share of the peak: the time they would take at the peak" \
       "over the time they took)"
}

# ---- machine: the rates of gslc --auto-shard's cost model -----------------------
# bench/machine.c under $MPIEXEC -n 2 (one rank a core): GEMM rates through
# libgslrt's kernels, the memory rate, the link's rate and latency, printed
# as a machine file (gslc --machine FILE; gslc(1), MACHINE FILES), which
# MACHINE_OUT (if set) also receives.
machine() {
  MPICC=${MPICC:-mpicc} MPIEXEC=${MPIEXEC:-mpiexec} LIBGSLRT=${LIBGSLRT:-runtime/libgslrt.a}
  [ -f "$LIBGSLRT" ] || die "no $LIBGSLRT (run make first, or set LIBGSLRT)"
  $MPICC -std=c11 -O2 -I"$top/runtime" "$here/machine.c" "$LIBGSLRT" $RT_LIBS -o "$tmp/machine" ||
    die "could not compile bench/machine.c"
  $MPIEXEC -n 2 "$tmp/machine" >"$tmp/machine.out" || die "the machine benchmark failed"
  cat "$tmp/machine.out"
  [ -z "${MACHINE_OUT:-}" ] || cp "$tmp/machine.out" "$MACHINE_OUT" || die "could not write $MACHINE_OUT"
}

# ---- auto: gslc --auto-shard against the hand-annotated examples ---------------
# Each example on two devices, annotated by hand (examples/; moe's mesh
# cut to [d = 2]) and with its mesh alone, sharded by gslc --auto-shard
# (tests/auto/): the cost model's estimate of each program built
# (--explain's summary), the search's time and problem size, and the step
# measured at $MPIEXEC -n 2 from rank 0's --metrics (AUTO_STEPS timed
# steps after WARMUP, median of REPS runs, hand and auto interleaved).
# Then the search alone, on 4 and on 64 devices for every example: its
# time, the whole compile's, and its problem's size.
# The mean ms/step of PROG's timed steps at $MPIEXEC -n RANKS: STEPS after
# WARMUP, from rank 0's --metrics (used by auto and samebits).
mean_ms() {  # RANKS PROG STEPS [OPTIONS]
  np=$1 prog=$2 n=$3; shift 3
  $MPIEXEC -n "$np" "$prog" --quiet --steps $((WARMUP + n)) --log-every 1 --metrics "$tmp/mean_ms.jsonl" "$@" \
    </dev/null >"$tmp/mean_ms.log" 2>&1 || { cat "$tmp/mean_ms.log" >&2; return 1; }
  awk -v w=$WARMUP '/"ms_per_step": / { k = $0; sub(/.*"step": /, "", k); k += 0
      m = $0; sub(/.*"ms_per_step": /, "", m); m += 0; if (k > w) { t += m; c++ } }
    END { if (c) printf "%.4f\n", t / c; else exit 1 }' "$tmp/mean_ms.jsonl"
}

auto() {
  MPIEXEC=${MPIEXEC:-mpiexec}
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  set -- ${AUTO_STEPS:-300 150 80}
  [ $# = 3 ] || die "AUTO_STEPS: expected three numbers (mlp moe lm), got '${AUTO_STEPS:-}'"
  asteps_mlp=$1 asteps_moe=$2 asteps_lm=$3
  echo "gslc --auto-shard against the hand-annotated examples: two devices ($MPIEXEC -n 2, one rank a core)," \
       "timed steps after $WARMUP warm-up steps, median of $REPS runs, hand and auto interleaved"
  sed 's/^mesh \[d = 4\]/mesh [d = 2]/' "$top/examples/moe.gsl" >"$tmp/moe_hand.gsl"
  grep -q '^mesh \[d = 2\]' "$tmp/moe_hand.gsl" || die "examples/moe.gsl: no 'mesh [d = 4]' line to cut to two devices"
  cp "$top/examples/mlp.gsl" "$tmp/mlp_hand.gsl"
  cp "$top/examples/lm.gsl" "$tmp/lm_hand.gsl"
  lmdata=
  if $PYTHON "$top/scripts/lm_data.py" --out "$tmp/lmdata" --batch 8 --seq 64 >"$tmp/lmdata.log" 2>&1; then
    lmdata="--input tokens=$tmp/lmdata/train.npy"
  else
    echo "  lm: skipped (scripts/lm_data.py failed: it needs Debian's fortunes and numpy)"
  fi
  # name, -D flags on two devices, timed steps
  set -- "mlp|-D DP=2 -D MP=1|$asteps_mlp" "mlp|-D DP=1 -D MP=2|$asteps_mlp" "moe|-D D=2|$asteps_moe"
  [ -z "$lmdata" ] || set -- "$@" "lm|-D DATA=1 -D EXPERT=2|$asteps_lm"
  : >"$tmp/auto.rows"
  k=0
  for c in "$@"; do
    k=$((k + 1))
    name=${c%%|*} rest=${c#*|}; flags=${rest%|*} n=${rest#*|}
    hsrc=$tmp/${name}_hand.gsl
    [ $name = moe ] && hflags= || hflags=$flags
    $GSLC $hflags -O2 "$hsrc" -o "$tmp/h$k" || die "gslc failed ($name, hand)"
    $GSLC $flags -O2 --auto-shard "$top/tests/auto/$name.gsl" -o "$tmp/a$k" || die "gslc --auto-shard failed ($name)"
    $GSLC $hflags --explain "$hsrc" >"$tmp/h$k.explain" || die "gslc --explain failed ($name, hand)"
    $GSLC $flags --explain --auto-shard "$top/tests/auto/$name.gsl" >"$tmp/a$k.explain" ||
      die "gslc --explain --auto-shard failed ($name)"
    echo "$k|$name|$flags|$n" >>"$tmp/auto.rows"
  done
  blas_core "$tmp/h1" "both"
  : >"$tmp/auto.times"
  r=1
  while [ $r -le $REPS ]; do
    while IFS='|' read -r k name flags n; do
      opt=; [ $name = lm ] && opt=$lmdata
      # shellcheck disable=SC2086
      t=$(mean_ms 2 "$tmp/h$k" $n $opt) || die "the hand-annotated $name program failed"
      echo "$k hand $t" >>"$tmp/auto.times"
      # shellcheck disable=SC2086
      t=$(mean_ms 2 "$tmp/a$k" $n $opt) || die "the auto-sharded $name program failed"
      echo "$k auto $t" >>"$tmp/auto.times"
    done <"$tmp/auto.rows"
    r=$((r + 1))
  done
  est() { sed -n 's/^estimated step per device: \([0-9.]*\) ms.*/\1/p' "$1"; }
  printf "  %-5s %-22s %6s  %-29s %-29s %9s\n" example "mesh (-D)" steps "hand: model, measured ms" \
    "auto: model, measured ms" "auto/hand"
  while IFS='|' read -r k name flags n; do
    awk -v k=$k -v name=$name -v flags="$flags" -v n=$n -v eh="$(est "$tmp/h$k.explain")" -v ea="$(est "$tmp/a$k.explain")" '
      function median(w,   c, i, j, x, t) { c = 0; for (i = 1; i <= nt; i++) if (tw[i] == w) x[++c] = tv[i]
        for (i = 2; i <= c; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
        return c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2 }
      $1 == k { tw[++nt] = $2; tv[nt] = $3 }
      END { h = median("hand"); a = median("auto")
        printf "  %-5s %-22s %6d  %8.3f %8.3f %11s %8.3f %8.3f %11s %8.3f\n", name, flags, n, eh, h, "", ea, a, "", a / h }' \
      "$tmp/auto.times"
  done <"$tmp/auto.rows"
  echo "(model: the estimate of --explain's summary, the program built, no overlap; measured: the mean ms/step of" \
       "the timed steps from rank 0's --metrics, the median over the runs; auto/hand: measured)"
  echo
  echo "  the search on 4 and on 64 devices (gslc --auto-shard --emit-ir; sizes summed over its solves):"
  printf "  %-5s %-42s %8s %9s %8s %8s %9s\n" example "mesh (-D)" "search s" "compile s" columns rows integers
  for c in "mlp|-D DP=2 -D MP=2" "mlp|-D DP=8 -D MP=8" "moe|-D D=4" "moe|-D D=64 -D G=64 -D E=64" \
           "lm|-D DATA=2 -D EXPERT=2" "lm|-D DATA=8 -D EXPERT=8 -D B=64"; do
    name=${c%%|*} flags=${c#*|}
    s0=$(date +%s.%N)
    # shellcheck disable=SC2086
    $GSLC $flags --auto-shard --emit-ir "$top/tests/auto/$name.gsl" -o /dev/null || die "gslc --auto-shard failed ($name $flags)"
    s1=$(date +%s.%N)
    # shellcheck disable=SC2086
    $GSLC $flags --auto-shard --explain "$top/tests/auto/$name.gsl" >"$tmp/s.explain" || die "gslc --explain failed ($name $flags)"
    sed -n '/^## --auto-shard/{n;p;}' "$tmp/s.explain" | awk -v name=$name -v flags="$flags" -v c="$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')" '{
        cols = $0; sub(/ columns.*/, "", cols); sub(/.* /, "", cols)
        ints = $0; sub(/ integer\).*/, "", ints); sub(/.*\(/, "", ints)
        rows = $0; sub(/ rows.*/, "", rows); sub(/.* /, "", rows)
        t = $0; sub(/ s; estimated.*/, "", t); sub(/.* in /, "", t)
        printf "  %-5s %-42s %8.3f %9.3f %8d %8d %9d\n", name, flags, t, c, cols, rows, ints }'
  done
  echo "(search s: the search's wall time as --explain reports it; compile s: the whole gslc run, parsing to" \
       "the IR written, one sample)"
}

# Compile time against depth: examples/lm.gsl at -O2 for each L of
# DEPTHS, by this gslc and, with BASE_GSLC set (a build of another
# revision), by that one beside it, interleaved, the median of DEPTH_REPS
# runs of each (wall and user seconds, /usr/bin/time); then the L = 4
# binaries' training step at -np 1 (DEPTH_STEPS timed steps after WARMUP,
# median of REPS, from --metrics), this build's over the base's.
depth() {
  DEPTHS=${DEPTHS:-4 12 24 48} DEPTH_REPS=${DEPTH_REPS:-3} DEPTH_STEPS=${DEPTH_STEPS:-40}
  MPIEXEC=${MPIEXEC:-mpiexec}
  echo "GSL depth benchmark: gslc -O2 examples/lm.gsl against its depth L (seconds, median of $DEPTH_REPS)" \
       "${BASE_GSLC:+beside BASE_GSLC=$BASE_GSLC}"
  printf '  %-4s %10s %10s %8s' L "wall s" "user s" kernels
  [ -n "${BASE_GSLC:-}" ] && printf ' %12s %12s %8s' "base wall" "base user" "ratio"
  echo
  once() {  # GSLC L: "wall user" of one compile
    /usr/bin/time -f '%e %U' -o "$tmp/time" "$1" -O2 -D L=$2 "$top/examples/lm.gsl" -o "$tmp/lm_d$2" ||
      die "$1 failed at L = $2"
    cat "$tmp/time"
  }
  med() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  for L in $DEPTHS; do
    : >"$tmp/new"; : >"$tmp/base"
    for r in $(seq "$DEPTH_REPS"); do
      once "$GSLC" $L >>"$tmp/new"
      [ -n "${BASE_GSLC:-}" ] && once "$BASE_GSLC" $L >>"$tmp/base"
    done
    $GSLC -O0 --emit-llvm -D L=$L "$top/examples/lm.gsl" -o "$tmp/k.ll" || die "gslc --emit-llvm failed at L = $L"
    k=$(grep -c '^define internal void @k' "$tmp/k.ll")
    w=$(cut -d' ' -f1 "$tmp/new" | med) u=$(cut -d' ' -f2 "$tmp/new" | med)
    printf '  %-4s %10s %10s %8s' $L $w $u $k
    if [ -n "${BASE_GSLC:-}" ]; then
      bw=$(cut -d' ' -f1 "$tmp/base" | med) bu=$(cut -d' ' -f2 "$tmp/base" | med)
      printf ' %12s %12s %8s' $bw $bu "$(awk -v a=$w -v b=$bw 'BEGIN { printf "%.2f", a / b }')"
    fi
    echo
  done
  [ -n "${BASE_GSLC:-}" ] || return 0
  # the L = 4 step of each build, interleaved
  $GSLC -O2 -D L=4 -D DATA=1 -D EXPERT=1 "$top/examples/lm.gsl" -o "$tmp/lm_new" &&
    $BASE_GSLC -O2 -D L=4 -D DATA=1 -D EXPERT=1 "$top/examples/lm.gsl" -o "$tmp/lm_base" ||
    die "the L = 4 builds failed"
  # byte windows drawn at random, 16 batches of the example's [8, 65]
  $PYTHON -c 'import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).integers(0, 256, (16, 8, 65), dtype=np.int32))' \
    "$tmp/d_tokens.npy" || die "numpy is needed for the step's tokens (apt-get install python3-numpy)"
  step() {  # PROG: mean ms a step after the warm-up
    $MPIEXEC -n 1 "$1" --quiet --steps $((WARMUP + DEPTH_STEPS)) --log-every 1 --input tokens="$tmp/d_tokens.npy" \
      --metrics "$tmp/d.jsonl" >/dev/null || die "$1 failed"
    awk -v w=$WARMUP '/"ms_per_step": / { k = $0; sub(/.*"step": /, "", k); k += 0
        m = $0; sub(/.*"ms_per_step": /, "", m); if (k > w) { t += m; n++ } } END { printf "%.3f\n", t / n }' "$tmp/d.jsonl"
  }
  : >"$tmp/sn"; : >"$tmp/sb"
  for r in $(seq "$REPS"); do
    step "$tmp/lm_new" >>"$tmp/sn"
    step "$tmp/lm_base" >>"$tmp/sb"
  done
  sn=$(med <"$tmp/sn") sb=$(med <"$tmp/sb")
  echo "  the L = 4 step at -np 1: $sn ms (this build), $sb ms (base), ratio" \
       "$(awk -v a=$sn -v b=$sb 'BEGIN { printf "%.3f", a / b }') (median of $REPS runs of $DEPTH_STEPS steps each)"
}

# Recomputation: examples/lm.gsl at L, B, T = REMAT_DIMS (default "48 32
# 128") on its 2-device mesh, kept (as written), with every layer pair
# recomputed (`remat for`), and under --mem-budget at half the kept plan's
# total: --stats' planned intermediates and total, the peak RSS of the
# largest rank (/usr/bin/time -v), and the step (REMAT_STEPS timed steps
# after WARMUP, mean from --metrics, median of REPS runs), each over the
# kept run's.
remat() {
  set -- ${REMAT_DIMS:-48 32 128}
  RL=$1 RB=$2 RT=$3 REMAT_STEPS=${REMAT_STEPS:-5}
  MPIEXEC=${MPIEXEC:-mpiexec}
  dims="-O2 -D L=$RL -D B=$RB -D T=$RT"
  echo "GSL recomputation benchmark: examples/lm.gsl at L = $RL, B = $RB, T = $RT on 2 devices" \
       "(step: mean of $REMAT_STEPS after $WARMUP, median of $REPS runs)"
  cp "$top/examples/lm.gsl" "$tmp/r_kept.gsl"
  sed 's/^for p in/remat for p in/' "$top/examples/lm.gsl" >"$tmp/r_remat.gsl"
  grep -q '^remat for' "$tmp/r_remat.gsl" || die "examples/lm.gsl's layer loop not found"
  cp "$top/examples/lm.gsl" "$tmp/r_budget.gsl"
  $GSLC $dims --stats "$tmp/r_kept.gsl" >"$tmp/r_kept.stats" || die "gslc --stats failed"
  kept_total=$(sed -n 's/^total  *\([0-9]*\).*/\1/p' "$tmp/r_kept.stats")
  half=$((kept_total / 2))
  $PYTHON -c 'import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).integers(0, 256, (4, int(sys.argv[2]), int(sys.argv[3]) + 1), dtype=np.int32))' \
    "$tmp/r_tokens.npy" $RB $RT || die "numpy is needed for the tokens (apt-get install python3-numpy)"
  printf '  %-22s %14s %14s %14s %10s %8s %10s\n' run "planned B" "total B" "peak RSS B" "step ms" "x kept" "compile s"
  for v in kept remat budget; do
    extra=; [ $v = budget ] && extra="--mem-budget $half"
    $GSLC $dims $extra --stats "$tmp/r_$v.gsl" >"$tmp/r_$v.stats" || die "gslc --stats $v failed"
    /usr/bin/time -f '%e' -o "$tmp/r_ct" $GSLC $dims $extra "$tmp/r_$v.gsl" -o "$tmp/r_$v" || die "gslc $v failed"
    planned=$(sed -n 's/^intermediates, planned  *\([0-9]*\).*/\1/p' "$tmp/r_$v.stats")
    total=$(sed -n 's/^total  *\([0-9]*\).*/\1/p' "$tmp/r_$v.stats")
    : >"$tmp/r_ms"; rss=0
    for r in $(seq "$REPS"); do
      /usr/bin/time -v -o "$tmp/r_time" $MPIEXEC -n 2 "$tmp/r_$v" --quiet --steps $((WARMUP + REMAT_STEPS)) \
        --log-every 1 --input tokens="$tmp/r_tokens.npy" --metrics "$tmp/r.jsonl" >/dev/null || die "the $v run failed"
      k=$(( $(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$tmp/r_time") * 1024 ))
      [ $k -gt $rss ] && rss=$k
      awk -v w=$WARMUP '/"ms_per_step": / { k = $0; sub(/.*"step": /, "", k); k += 0
          m = $0; sub(/.*"ms_per_step": /, "", m); if (k > w) { t += m; n++ } } END { printf "%.1f\n", t / n }' \
        "$tmp/r.jsonl" >>"$tmp/r_ms"
    done
    ms=$(sort -n "$tmp/r_ms" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    [ $v = kept ] && kept_ms=$ms
    label=$v; [ $v = budget ] && label="--mem-budget $half"
    [ $v = remat ] && label="remat for (every layer)"
    printf '  %-22s %14s %14s %14s %10s %8s %10s\n' "$label" $planned $total $rss $ms \
      "$(awk -v a=$ms -v b=$kept_ms 'BEGIN { printf "%.2f", a / b }')" "$(cat "$tmp/r_ct")"
  done
}

# ---- profile: the steady state of a step, and where the LM's step goes --------
# First the events of the steady state, per step, at the bench's sizes:
# examples/lm.gsl (LM_DIMS) with --precision bf16 at $MPIEXEC -n 1, and
# bench/moe_train.gsl (MOE_SPEC) in f32 and bf16 at -n 1 and, G doubled,
# at -n 2. Each program runs three times, for WARMUP, WARMUP + STEPS and
# WARMUP + STEPS + PROFILE_LONG (default 200) steps, each rank under perf
# stat (page faults, context switches, sched_yield calls) and
# /usr/bin/time (voluntary and involuntary switches), summed over the
# ranks; a window's count a step is the difference of two runs over the
# difference of their steps: the bench's timed steps (WARMUP, WARMUP +
# STEPS], then the later ones. Then the LM's bf16 step at -n 1 under perf
# record (cpu-clock every PROFILE_PERIOD ns, default 1000000; DWARF call
# graphs; DNNL_JIT_PROFILE=2 names oneDNN's JIT code) for WARMUP +
# PROFILE_STEPS (default 100) steps, the samples between the program's
# WARMUP-th --metrics line and its last (perf's syscalls:sys_enter_write
# on that file) sorted into kinds (prof_kinds, below) and tabled; then
# the same of moe_train's bf16 step at -n 2, both ranks' samples
# together, and that step's page faults (every one) sorted alike. Needs
# perf (linux-perf) allowed to read tracepoints and kernel symbols (root,
# or kernel.perf_event_paranoid <= 1) and GNU time; without them the part
# says so and is skipped.
profile() {
  MPIEXEC=${MPIEXEC:-mpiexec} PROFILE_LONG=${PROFILE_LONG:-200} PROFILE_PERIOD=${PROFILE_PERIOD:-1000000}
  PROFILE_STEPS=${PROFILE_STEPS:-100}
  LM_DIMS=${LM_DIMS:-8 64 128 4 512 8} MOE_SPEC=${MOE_SPEC:-4 256 64 256 8}
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  if ! command -v perf >/dev/null 2>&1 || ! [ -x /usr/bin/time ]; then
    echo "profile: skipped (needs perf and GNU time: apt-get install linux-perf time)"
    return 0
  fi
  if ! perf stat -e page-faults,syscalls:sys_enter_sched_yield,syscalls:sys_enter_write true >/dev/null 2>&1; then
    echo "profile: skipped (perf cannot count page faults and syscall tracepoints here: run as root, or lower" \
         "kernel.perf_event_paranoid)"
    return 0
  fi
  set -- $LM_DIMS
  [ $# = 6 ] || die "LM_DIMS: expected six numbers B T M NH H E, got '$LM_DIMS'"
  $PYTHON "$top/scripts/lm_data.py" --out "$tmp/lmdata" --batch $1 --seq $2 >"$tmp/lmdata.log" ||
    die "scripts/lm_data.py failed (the corpus is Debian's fortunes: apt-get install fortunes)"
  $GSLC --precision bf16 -O2 -D DATA=1 -D EXPERT=1 -D B=$1 -D T=$2 -D M=$3 -D NH=$4 -D H=$5 -D E=$6 \
    "$top/examples/lm.gsl" -o "$tmp/p_lm16" || die "gslc --precision bf16 failed (examples/lm.gsl)"
  set -- $MOE_SPEC
  [ $# = 5 ] || die "MOE_SPEC: expected five numbers G S M H E, got '$MOE_SPEC'"
  md="-D S=$2 -D M=$3 -D H=$4 -D E=$5"
  for p in "|1|$1" "--precision bf16|1|$1" "|2|$(($1 * 2))" "--precision bf16|2|$(($1 * 2))"; do
    prec=${p%%|*} rest=${p#*|}; np=${rest%|*} g=${rest#*|}
    # shellcheck disable=SC2086
    $GSLC $prec -D D=$np -D G=$g $md "$top/bench/moe_train.gsl" -o "$tmp/p_mt${np}${prec:+_bf16}" ||
      die "gslc failed (bench/moe_train.gsl, D=$np $prec)"
    $PYTHON -c "import numpy as np, sys
np.save(sys.argv[1], np.random.default_rng(1).standard_normal(($g, $2, $3)).astype(np.float32))" \
      "$tmp/p_x$np.npy" || die "numpy is needed for the moe batch (apt-get install python3-numpy)"
  done
  blas_core "$tmp/p_lm16" "GSL"

  # the counts of one run, summed over its ranks: "faults switches yields
  # voluntary involuntary"; each rank runs under its own perf stat and
  # time, so that mpiexec's own events stay out
  pcount() {  # NP PROG STEPS INPUT
    rm -f "$tmp"/p_stat.* "$tmp"/p_time.*
    $MPIEXEC -n $1 sh -c 'exec /usr/bin/time -f "%w %c" -o "$0/p_time.${PMI_RANK:-$$}" perf stat -x, \
        -o "$0/p_stat.${PMI_RANK:-$$}" -e page-faults,context-switches,syscalls:sys_enter_sched_yield "$@"' "$tmp" \
      "$2" --quiet --steps $3 --log-every 1 --input "$4" --metrics "$tmp/p.jsonl" >"$tmp/p.log" 2>&1 ||
      { cat "$tmp/p.log" >&2; return 1; }
    awk -F, '$3 == "page-faults" { f += $1 } $3 == "context-switches" { c += $1 } $3 ~ /sched_yield/ { y += $1 }
      END { printf "%d %d %d", f, c, y }' "$tmp"/p_stat.*
    awk '{ v += $1; i += $2 } END { printf " %d %d\n", v, i }' "$tmp"/p_time.*
  }
  n0=$WARMUP n1=$((WARMUP + STEPS)) n2=$((WARMUP + STEPS + PROFILE_LONG))
  echo "GSL profile: the steady state, events a step summed over the ranks (perf stat and /usr/bin/time on each rank)"
  printf '  %-34s %-12s %8s %8s %8s %8s %8s\n' program steps faults switches yields vol invol
  for c in "lm bf16 -n 1|1|$tmp/p_lm16|tokens=$tmp/lmdata/train.npy" \
           "moe_train f32 -n 1|1|$tmp/p_mt1|x=$tmp/p_x1.npy" "moe_train bf16 -n 1|1|$tmp/p_mt1_bf16|x=$tmp/p_x1.npy" \
           "moe_train f32 -n 2|2|$tmp/p_mt2|x=$tmp/p_x2.npy" "moe_train bf16 -n 2|2|$tmp/p_mt2_bf16|x=$tmp/p_x2.npy"; do
    name=${c%%|*} rest=${c#*|}; np=${rest%%|*} rest=${rest#*|}; prog=${rest%|*} in=${rest#*|}
    a=$(pcount $np "$prog" $n0 "$in") && b=$(pcount $np "$prog" $n1 "$in") && z=$(pcount $np "$prog" $n2 "$in") ||
      die "the $name run failed"
    echo "$a|$b|$z" | awk -F'|' -v name="$name" -v n0=$n0 -v n1=$n1 -v n2=$n2 '
      function row(w, x, y, d,   i) { printf "  %-34s %-12s", name, w; split(x, p, " "); split(y, q, " ")
        for (i = 1; i <= 5; i++) printf " %8.2f", (q[i] - p[i]) / d; print "" }
      { row(sprintf("%d-%d", n0 + 1, n1), $1, $2, n1 - n0); row(sprintf("%d-%d", n1 + 1, n2), $2, $3, n2 - n1) }'
  done
  echo "(a step's count: the difference of two runs' counts over the difference of their steps, so start-up" \
       "and the end cancel; vol/invol: voluntary and involuntary context switches)"

  # the samples of one program's steady state, sorted into kinds
  pbreak() {  # NAME NP PROG INPUT EVENT (cpu-clock or page-faults)
    case $5 in cpu-clock) ev=cpu-clock/period=$PROFILE_PERIOD/ scale=$PROFILE_PERIOD ;; *) ev=$5/period=1/ scale=0 ;; esac
    DNNL_JIT_PROFILE=2 perf record -q -m 1024 -o "$tmp/p.data" -e $ev \
      --call-graph dwarf,8192 -e syscalls:sys_enter_write -- \
      $MPIEXEC -n $2 "$3" --quiet --steps $nr --log-every 1 --input "$4" --metrics "$tmp/p.jsonl" \
      >"$tmp/p.log" 2>&1 || { cat "$tmp/p.log" >&2; die "perf record failed ($1)"; }
    perf script -i "$tmp/p.data" -F comm,tid,time,event,trace,ip,sym,dso >"$tmp/p.script" 2>/dev/null ||
      die "perf script failed ($1)"
    # the perf maps oneDNN wrote for the ranks (DNNL_JIT_PROFILE=2)
    for pid in $(awk -v c="$(basename "$3")" '$1 == c && !s[$2]++ { print $2 }' "$tmp/p.script"); do
      rm -f "/tmp/perf-$pid.map"
    done
    awk -v prog="$(basename "$3")" -v warm=$n0 -v steps=$nr -v ev=$5 -v period=$scale -f "$tmp/p.awk" \
      "$tmp/p.script" || die "the profile's samples could not be sorted ($1)"
  }
  prof_kinds >"$tmp/p.awk"
  nr=$((n0 + PROFILE_STEPS))
  set -- $LM_DIMS
  echo
  echo "where the steady state of the lm's bf16 step goes: examples/lm.gsl at B=$1 T=$2 M=$3 NH=$4 H=$5 E=$6," \
       "--precision bf16, $MPIEXEC -n 1, steps $((n0 + 1))-$nr (perf record, cpu-clock every $PROFILE_PERIOD ns)"
  pbreak lm 1 "$tmp/p_lm16" tokens="$tmp/lmdata/train.npy" cpu-clock
  set -- $MOE_SPEC
  echo
  echo "the same of bench/moe_train.gsl's bf16 step at G=$(($1 * 2)) S=$2 M=$3 H=$4 E=$5, $MPIEXEC -n 2, both" \
       "ranks' samples (ms a step: their sum)"
  pbreak moe_train 2 "$tmp/p_mt2_bf16" x="$tmp/p_x2.npy" cpu-clock
  echo
  echo "and where its page faults come from (perf record -e page-faults, every one), steps $((n0 + 1))-$nr"
  pbreak moe_train 2 "$tmp/p_mt2_bf16" x="$tmp/p_x2.npy" page-faults
}

# The awk program that sorts the samples of `perf script -F
# comm,tid,time,event,trace,ip,sym,dso` (cpu-clock with call graphs, and
# syscalls:sys_enter_write) into the kinds of work of a GSL step. The
# window: the program's --metrics file is the file descriptor that a
# process `prog` wrote `steps` times, or one or two more (rank 0 tries
# the file with a byte before step 1), its last `steps` writes one line a
# step; the samples of `prog` after the `warm`-th of those and up to the
# last are the steady state. Each sample's kind comes from its call
# chain: a page fault, a sched_yield or oneDNN making a primitive
# anywhere in it first; then other kernel time (system calls, MPI's
# counted with the collectives, or interrupts and preemption); then,
# from the leaf up, the first frame that tells: a compiled kernel
# (gslc names each kN.KIND, KIND its op's kind: binary, cast, reduce,
# ...), a matrix product (oneDNN's JIT code, named in perf's map through
# DNNL_JIT_PROFILE=2, oneDNN, OpenBLAS, the runtime's product calls), the
# moe routing, a collective (MPI, UCX, the runtime's calls), gsl_step's
# own code, the rest of the runtime; frames of libc and such are passed
# over to their caller (a chain that ends in libc is tabled as such: perf
# could not unwind it). `ev` is the sampled event, cpu-clock (`period`
# ns a sample) or page-faults (`period` 0: every fault, sorted by the
# user frames of its chain alone).
prof_kinds() {
  cat <<'AWK'
BEGIN { RS = ""; prim = "\\|dnnl_primitive_create|\\|dnnl_[a-z_]*primitive_desc_create" }
{
  n = split($0, line, "\n")
  split(line[1], h, " ")
  if (h[1] != prog)
    next
  if (line[1] ~ /sys_enter_write/) {
    fd = line[1]; sub(/.*fd: /, "", fd); sub(/,.*/, "", fd)
    key = h[2] " " fd
    w[key]++
    wt[key, w[key]] = h[3] + 0
    next
  }
  if (line[1] !~ ev)
    next
  ns++
  st[ns] = h[3] + 0
  sk[ns] = kind(line, n)
}
function kind(line, n,   i, s, d, all, j) {
  all = ""
  j = 2
  for (i = 2; i <= n; i++) {
    s = line[i]; sub(/^[ \t]*[0-9a-f]+ /, "", s)
    d = s; sub(/.* \(/, "", d); sub(/\)$/, "", d)
    sub(/ \([^()]*\)$/, "", s)
    sy[i] = s; so[i] = d
    all = all "|" s
    if (ev == "page-faults" && d ~ /kallsyms/)
      j = i + 1
  }
  if (ev == "page-faults") {
    all = ""
    for (i = j; i <= n; i++)
      all = all "|" sy[i]
    return user(j, n, all)
  }
  if (all ~ /\|(asm_)?exc_page_fault|\|handle_mm_fault/)
    return "page faults"
  if (all ~ /sched_yield/)
    return "sched_yield"
  if (all ~ prim)
    return "oneDNN: making primitives"
  if (so[2] ~ /kallsyms/) {
    if (all ~ /\|do_syscall_64|\|entry_SYSCALL/) {
      for (i = 2; i <= n; i++)
        if (so[i] ~ /libmpi|libuc[pstm]/)
          return "collectives (MPI)"
      return "kernel: system calls (inputs, --metrics)"
    }
    return "kernel: interrupts, preemption"
  }
  return user(2, n, all)
}
function user(j, n, all,   i, s, d) {
  if (all ~ prim)
    return "oneDNN: making primitives"
  for (i = j; i <= n; i++) {
    s = sy[i]; d = so[i]
    if (s ~ /^k[0-9]+\./) {
      sub(/^k[0-9]+\./, "", s); sub(/[^a-z_].*/, "", s)
      return "compiled loops: " s
    }
    if (d ~ /perf-[0-9]+\.map|libdnnl|libopenblas/ ||
        s ~ /^(gslrt_sgemm|gslrt_gemm_bf16|onednn_gemm|fill_product|bf16_run|sgemm_run|blas_sgemm|primitive_for|cache_slot)/)
      return "products (oneDNN, OpenBLAS)"
    if (s ~ /^(gslrt_dispatch|gslrt_combine|route)$/)
      return "moe routing"
    if (d ~ /libmpi|libuc[pstm]/ || s ~ /^gslrt_(all_|reduce_scatter|collective_permute|watch_|agree)/)
      return "collectives (MPI)"
    if (s == "gsl_step")
      return "gsl_step's own code"
    if (s ~ /^gslrt_|^read_run$|^first_out_of_range$|^run_steps$/)
      return "runtime: inputs, checks, log"
  }
  return "libc, its caller not unwound (memcpy, memset, malloc)"
}
END {
  for (key in w)
    if (w[key] >= steps && w[key] <= steps + 2 && (found == "" || w[key] < w[found]))
      found = key
  if (found == "") {
    print "bench: profile: no file written " steps " times by " prog " (its --metrics)" >"/dev/stderr"
    exit 1
  }
  t0 = wt[found, w[found] - steps + warm]; t1 = wt[found, w[found]]
  for (i = 1; i <= ns; i++)
    if (st[i] > t0 && st[i] <= t1) {
      c[sk[i]]++
      tot++
    }
  ms = (period ? period / 1e6 : 1) / (steps - warm)
  printf "  %-52s %8s %10s %7s\n", "kind", "samples", period ? "ms a step" : "a step", "share"
  for (k in c)
    printf "  %-52s %8d %10.2f %6.1f%%\n", k, c[k], c[k] * ms, 100 * c[k] / tot | "sort"
  close("sort")
  printf "  %-52s %8d %10.2f %6.1f%%\n", "all", tot, tot * ms, tot ? 100 : 0
  printf "  (%s of steps %d-%d, %.1f s between the --metrics lines; wall ms a step %.2f)\n",
    period ? "the CPU time" : "the page faults", warm + 1, steps, t1 - t0, 1000 * (t1 - t0) / (steps - warm)
}
AWK
}

# gslc --same-bits against the plain build, interleaved (see the header)
samebits() {
  MPIEXEC=${MPIEXEC:-mpiexec}
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  set -- ${SAME_STEPS:-300 150 40}
  [ $# = 3 ] || die "SAME_STEPS: expected three numbers (mlp moe lm), got '${SAME_STEPS:-}'"
  ssteps_mlp=$1 ssteps_moe=$2 ssteps_lm=$3
  recipe=${LM_RECIPE:--D T=128 -D B=8 -D M=128 -D NH=4 -D H=512 -D L=4 -D E=16 -D HE=256 -D CLIP=1.0}
  echo "gslc --same-bits against the same program without it: timed steps after $WARMUP warm-up steps," \
       "median of $REPS runs, the two interleaved"
  for d in 1 2; do
    sed "s/^mesh \[d = 4\]/mesh [d = $d]/" "$top/examples/moe.gsl" >"$tmp/moe_d$d.gsl"
    grep -q "^mesh \[d = $d\]" "$tmp/moe_d$d.gsl" || die "examples/moe.gsl: no 'mesh [d = 4]' line"
  done
  lmdata=
  if $PYTHON "$top/scripts/lm_data.py" --out "$tmp/lmsame" --batch 8 --seq 128 >"$tmp/lmsame.log" 2>&1; then
    lmdata="--input tokens=$tmp/lmsame/train.npy"
  else
    echo "  lm: skipped (scripts/lm_data.py failed: it needs Debian's fortunes)"
  fi
  # name|source|-D and other flags|ranks|steps
  set -- "mlp|$top/examples/mlp.gsl||1|$ssteps_mlp" "mlp|$top/examples/mlp.gsl|-D DP=2|2|$ssteps_mlp" \
    "moe|$tmp/moe_d1.gsl||1|$ssteps_moe" "moe|$tmp/moe_d2.gsl||2|$ssteps_moe"
  [ -z "$lmdata" ] || set -- "$@" "lm|$top/examples/lm.gsl|--precision bf16 $recipe -D DATA=1 -D EXPERT=1|1|$ssteps_lm" \
    "lm|$top/examples/lm.gsl|--precision bf16 $recipe -D DATA=1 -D EXPERT=2|2|$ssteps_lm"
  : >"$tmp/same.rows"
  k=0
  for c in "$@"; do
    k=$((k + 1))
    IFS='|' read -r name src flags np n <<EOF2
$c
EOF2
    # shellcheck disable=SC2086
    $GSLC $flags -O2 "$src" -o "$tmp/p$k" && $GSLC $flags -O2 --same-bits "$src" -o "$tmp/s$k" &&
      $GSLC $flags --same-bits --explain "$src" >"$tmp/s$k.explain" || die "gslc failed ($name $flags)"
    echo "$k|$name|$flags|$np|$n" >>"$tmp/same.rows"
  done
  blas_core "$tmp/p1" "both"
  : >"$tmp/same.times"
  r=1
  while [ $r -le $REPS ]; do
    while IFS='|' read -r k name flags np n; do
      opt=; [ $name = lm ] && opt=$lmdata
      # shellcheck disable=SC2086
      t=$(mean_ms $np "$tmp/p$k" $n $opt) || die "the plain $name program failed"
      echo "$k plain $t" >>"$tmp/same.times"
      # shellcheck disable=SC2086
      t=$(mean_ms $np "$tmp/s$k" $n $opt) || die "the --same-bits $name program failed"
      echo "$k same $t" >>"$tmp/same.times"
    done <"$tmp/same.rows"
    r=$((r + 1))
  done
  printf "  %-5s %-5s %-40s %6s  %-24s %-24s %9s\n" example ranks flags steps "plain: model, measured ms" \
    "same-bits: model, measured" "cost"
  while IFS='|' read -r k name flags np n; do
    ep=$(sed -n 's/^without --same-bits: \([0-9.]*\) ms.*/\1/p' "$tmp/s$k.explain")
    es=$(sed -n 's/^estimated step per device: \([0-9.]*\) ms.*/\1/p' "$tmp/s$k.explain")
    awk -v k=$k -v name=$name -v flags="$(echo "$flags" | sed 's/-D T=128 .* -D CLIP=1.0/(lm.sh recipe)/')" -v np=$np -v n=$n \
      -v ep="$ep" -v es="$es" '
      function median(w,   c, i, j, x, t) { c = 0; for (i = 1; i <= nt; i++) if (tw[i] == w) x[++c] = tv[i]
        for (i = 2; i <= c; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
        return c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2 }
      $1 == k { tw[++nt] = $2; tv[nt] = $3 }
      END { p = median("plain"); s = median("same")
        printf "  %-5s %-5d %-40s %6d  %9.3f %9.3f %5s %9.3f %9.3f %5s %+8.1f%%\n", name, np, flags, n, ep, p, "", es, s, "",
          100 * (s / p - 1) }' "$tmp/same.times"
  done <"$tmp/same.rows"
  echo "(model: --explain's estimates with and without --same-bits; measured: the mean ms/step of the timed steps" \
       "from rank 0's --metrics, the median over the runs; cost: measured, same-bits against plain)"
}

# ---- hosts: 2 hosts simulated on this machine against 1 (tests/sim_hosts.sh) --
# Network namespaces joined by veth links and a bridge, hydra's ssh launcher
# through them, UCX over TCP between them (UCX_TLS=tcp,self
# UCX_NET_DEVICES=eth0); needs root (skipped, with a note, without). Three
# placements of 2 ranks: 1 host (UCX's shared memory), 1 host over TCP (the
# host's own address), 2 hosts x 1 (TCP across the bridge); for each,
# bench/collectives.c's raw MPI_Allreduce and MPI_Alltoall, 64 KiB to
# 16 MiB a rank (BENCH_REPS calls, their median), and examples/moe.gsl's
# training step on [d = 2] (HOSTS_STEPS timed steps after WARMUP, the mean
# ms/step of rank 0's --metrics); then its step on [d = 4], 1 host x 4 against
# 2 hosts x 2. Each is run REPS times, the placements interleaved; the
# tables show the medians, and the bandwidth of a collective as the bytes
# a rank puts in over its time.
hosts() {
  MPICC=${MPICC:-mpicc} MPIEXEC=${MPIEXEC:-mpiexec} LIBGSLRT=${LIBGSLRT:-runtime/libgslrt.a}
  BENCH_REPS=${BENCH_REPS:-25} BENCH_WARMUP=${BENCH_WARMUP:-3}
  export BENCH_REPS BENCH_WARMUP
  n=${HOSTS_STEPS:-30}
  . "$top/tests/sim_hosts.sh"
  why=$(sim_check)
  [ -n "$why" ] || $MPIEXEC --version 2>/dev/null | grep -q HYDRA || why="$MPIEXEC is not MPICH's hydra"
  [ -z "$why" ] || { echo "hosts: skipped: $why"; return 0; }
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"
  [ -f "$LIBGSLRT" ] || die "no $LIBGSLRT (run make first, or set LIBGSLRT)"
  trap 'sim_down; rm -rf "$tmp"' EXIT
  sim_up 2 "$tmp/net" || { echo "hosts: skipped: $sim_why"; return 0; }
  $MPICC -std=c11 -O2 -I"$top/runtime" "$here/collectives.c" "$LIBGSLRT" $RT_LIBS \
    -o "$tmp/collectives" || die "could not compile bench/collectives.c"
  for d in 2 4; do
    sed "s/^mesh \[d = 4\]/mesh [d = $d]/" "$top/examples/moe.gsl" >"$tmp/moe$d.gsl"
    $GSLC "$tmp/moe$d.gsl" -o "$tmp/moe$d" || die "could not compile examples/moe.gsl on [d = $d]"
  done
  printf 'h1:4\n' >"$tmp/hf1"
  printf 'h1:1\nh2:1\n' >"$tmp/hf11"
  printf 'h1:2\nh2:2\n' >"$tmp/hf22"
  echo "GSL on simulated hosts: 2 ranks on 1 host (shared memory), on 1 host over TCP, on 2 hosts over TCP"
  echo "  (veth links and a bridge); median of $REPS runs, placements interleaved; load average" \
       "$(cut -d' ' -f1-3 /proc/loadavg) at the start"
  : >"$tmp/hosts.times"
  # on PLACE NP HOSTFILE ENV PROG ARGS...: PROG under mpiexec on h1
  on() {
    np=$2 hf=$3 env=$4
    shift 4
    (cd "$tmp" && sim_in h1 env $sim_hydra $env $MPIEXEC -f "$hf" -n "$np" "$@" </dev/null)
  }
  # step PLACE NP HOSTFILE ENV D: moe's mean ms/step on [d = D], appended as "step-D PLACE ms"
  step() {
    on "$1" "$2" "$3" "$4" "$tmp/moe$5" --quiet --steps $((WARMUP + n)) --log-every 1 --collective-timeout 30 \
      --metrics "$tmp/m.jsonl" >/dev/null 2>&1
    awk -v w=$WARMUP -v k="step-$5 $1" '/"ms_per_step": / { s = $0; sub(/.*"step": /, "", s)
        m = $0; sub(/.*"ms_per_step": /, "", m); if (s + 0 > w) { t += m; c++ } }
      END { if (c) printf "%s %.3f\n", k, t / c }' "$tmp/m.jsonl" >>"$tmp/hosts.times"
  }
  r=1
  while [ $r -le "$REPS" ]; do
    for p in shm tcp1 tcp2; do
      case $p in shm) hf=hf1 env="" ;; tcp1) hf=hf1 env=$sim_tcp ;; tcp2) hf=hf11 env=$sim_tcp ;; esac
      on $p 2 $hf "$env" "$tmp/collectives" --quiet --collective-timeout 30 2>/dev/null |
        awk -v p=$p '$1 == "all-reduce" || $1 == "all-to-all" { print $1 "-" $2 $3, p, $4 }' >>"$tmp/hosts.times"
      step $p 2 $hf "$env" 2
    done
    step shm 4 hf1 "" 4
    step tcp2 4 hf22 "$sim_tcp" 4
    r=$((r + 1))
  done
  awk '
    function sorted(k, p,   i, j, t) { c = 0; for (i = 1; i <= n; i++) if (tk[i] == k && tp[i] == p) x[++c] = tv[i]
      for (i = 2; i <= c; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t } }
    function median(k, p) { sorted(k, p); return !c ? -1 : c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2 }
    function best(k, p) { sorted(k, p); return c ? x[1] : -1 }
    function bytes(k,   s) { s = k; sub(/^[a-z-]*-/, "", s); return (s ~ /MiB/ ? 1048576 : 1024) * (s + 0) }
    function cell(k, p,   m, b) { m = median(k, p); b = best(k, p); if (m < 0) return sprintf("%24s", "-")
      return sprintf("%8.3f %7.3f %7.0f", m, b, bytes(k) / b / 1000) }
    function steps(k, p,   m) { m = median(k, p); return m < 0 ? sprintf("%24s", "-") : sprintf("%8.1f %7.1f %7s", m, best(k, p), "") }
    { tk[++n] = $1; tp[n] = $2; tv[n] = $3; if (!($1 in seen)) { seen[$1] = 1; order[++nk] = $1 } }
    END {
      printf "%-20s %-25s  %-25s  %-25s\n", "2 ranks", "1 host, shared memory", "1 host, TCP", "2 hosts, TCP"
      printf "%-20s", ""; for (i = 0; i < 3; i++) printf " %8s %7s %7s ", "median", "best", "MB/s"; printf "\n"
      for (i = 1; i <= nk; i++) if (order[i] !~ /^step/) {
        k = order[i]; name = k; sub(/-[0-9]+[KM]iB$/, "", name); size = k; sub(/^[a-z-]*-/, "", size)
        sub(/[KM]iB$/, " &", size)
        printf "%-20s %s  %s  %s\n", name " " size, cell(k, "shm"), cell(k, "tcp1"), cell(k, "tcp2") }
      printf "%-20s %s  %s  %s\n", "moe step, [d = 2]", steps("step-2", "shm"), steps("step-2", "tcp1"), steps("step-2", "tcp2")
      printf "%-20s %s  %24s  %s  (4 ranks: 1 host x 4, 2 hosts x 2)\n", "moe step, [d = 4]", steps("step-4", "shm"), "-",
        steps("step-4", "tcp2") }' "$tmp/hosts.times"
  echo "(ms: a collective's median call, slowest rank, in each run: the median and the best over the runs; MB/s: the" \
       "bytes a rank puts in over the best run's time; a moe step: the mean ms/step of $n steps after $WARMUP in each run)"
}

case $ONLY in
  "") mlp; echo; collectives; echo; scaling; echo; moe; echo; moe_a2a; echo; moe_train; echo; lm; echo; gemm; echo; machine; echo; auto; echo; samebits; echo; depth; echo; remat; echo; profile; echo; hosts ;;
  depth) depth ;;
  remat) remat ;;
  profile) profile ;;
  gemm) gemm ;;
  machine) machine ;;
  mlp) mlp ;;
  collectives) collectives ;;
  scaling) scaling ;;
  moe) moe; echo; moe_a2a ;;
  moe_a2a) moe_a2a ;;
  moe_train) moe_train ;;
  lm) lm ;;
  auto) auto ;;
  samebits) samebits ;;
  hosts) hosts ;;
  *) die "ONLY=$ONLY: expected mlp, collectives, scaling, moe, moe_a2a, moe_train, lm, gemm, machine, auto, samebits, depth, remat, profile or hosts" ;;
esac
