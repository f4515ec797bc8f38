#!/bin/sh
# bench/run.sh — examples/mlp.gsl's forward pass, compiled by gslc, against
# the same computation in numpy and PyTorch (CPU), all on one core; then a
# check that the three compute the same numbers; then libgslrt's collectives
# against the raw MPI calls at mpiexec -n 2 (bench/collectives.c); then the
# sharded forward pass at mpiexec -n 1 and -n 2 (data and model parallel). `make
# bench` runs it from the build directory after building gslc and the
# runtime. See bench/README.md.
#
# Settings (environment): B D H O (sizes, default 256 1024 4096 1024),
# STEPS (timed steps, default 20), WARMUP (default 3), REPS (default 5),
# PYTHON (default /usr/bin/python3), GSLC (default ./gslc), OPENBLAS_CORETYPE
# (see below); for the collectives MPICC (default mpicc), MPIEXEC (default
# mpiexec), LIBGSLRT (default runtime/libgslrt.a), BENCH_REPS (default 25),
# BENCH_WARMUP (default 3); ONLY=mlp, ONLY=collectives or ONLY=scaling runs
# one part (scaling: the mlp forward at -np 1 and 2, data and model parallel,
# with B D H O STEPS WARMUP REPS MPIEXEC as above).
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

mlp() {
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"

  sizes="-D B=$B -D D=$D -D H=$H -D O=$O"
  echo "GSL mlp benchmark: examples/mlp.gsl forward pass, B=$B D=$D H=$H O=$O, float32"
  echo "  $STEPS timed steps after $WARMUP warm-up steps, median of $REPS runs, one core" \
       "(OPENBLAS_NUM_THREADS=1)"
  $GSLC $sizes "$top/examples/mlp.gsl" -o "$tmp/mlp" || die "gslc failed"

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
sed 's/= zeros()/= normal(0.5)/' "$top/examples/mlp.gsl" >"$tmp/mlpcheck.gsl"
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
  $MPICC -std=c11 -O2 -I"$top/runtime" "$here/collectives.c" "$LIBGSLRT" -lm \
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
  sed 's/= zeros()/= normal(0.5)/' "$top/examples/mlp.gsl" >"$tmp/mlpscale.gsl"
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

case $ONLY in
  "") mlp; echo; collectives; echo; scaling ;;
  mlp) mlp ;;
  collectives) collectives ;;
  scaling) scaling ;;
  *) die "ONLY=$ONLY: expected mlp, collectives or scaling" ;;
esac
