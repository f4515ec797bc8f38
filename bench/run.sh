#!/bin/sh
# bench/run.sh — examples/mlp.gsl's forward pass, compiled by gslc, against
# the same computation in numpy and PyTorch (CPU), all on one core; then a
# check that the three compute the same numbers; then libgslrt's collectives
# against the raw MPI calls at mpiexec -n 2 (bench/collectives.c). `make
# bench` runs it from the build directory after building gslc and the
# runtime. See bench/README.md.
#
# Settings (environment): B D H O (sizes, default 256 1024 4096 1024),
# STEPS (timed steps, default 20), WARMUP (default 3), REPS (default 5),
# PYTHON (default /usr/bin/python3), GSLC (default ./gslc), OPENBLAS_CORETYPE
# (see below); for the collectives MPICC (default mpicc), MPIEXEC (default
# mpiexec), LIBGSLRT (default runtime/libgslrt.a), BENCH_REPS (default 25),
# BENCH_WARMUP (default 3); ONLY=mlp or ONLY=collectives runs one part.
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

mlp() {
  [ -x "$GSLC" ] || die "no $GSLC (run make first, or set GSLC)"

  sizes="-D B=$B -D D=$D -D H=$H -D O=$O"
  echo "GSL mlp benchmark: examples/mlp.gsl forward pass, B=$B D=$D H=$H O=$O, float32"
  echo "  $STEPS timed steps after $WARMUP warm-up steps, median of $REPS runs, one core" \
       "(OPENBLAS_NUM_THREADS=1)"
  $GSLC $sizes "$top/examples/mlp.gsl" -o "$tmp/mlp" || die "gslc failed"

  # All three multiply through the same OpenBLAS (numpy and Debian's torch via
  # libblas.so.3). OpenBLAS 0.3.21 does not know recent Xeons (e.g. family 6
  # model 207) and falls back to its SSE3 "Prescott" kernels, 3-4x slower than
  # its AVX-512 ones; then pick SkylakeX (Haswell without AVX-512) for all three,
  # unless OPENBLAS_CORETYPE is set already.
  core=$(OPENBLAS_VERBOSE=2 "$tmp/mlp" --version 2>&1 | sed -n 's/^Core: //p' | tail -n 1)
  if [ -z "${OPENBLAS_CORETYPE+set}" ] && [ "$core" = Prescott ]; then
    if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then OPENBLAS_CORETYPE=Haswell; fi
    if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
      export OPENBLAS_CORETYPE
      echo "  OpenBLAS detected core Prescott (CPU unknown to it): using OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE" \
           "for all three (set OPENBLAS_CORETYPE=Prescott to keep its choice)"
      core=$OPENBLAS_CORETYPE
    fi
  fi
  echo "  OpenBLAS core: ${core:-unknown}"

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

case $ONLY in
  "") mlp; echo; collectives ;;
  mlp) mlp ;;
  collectives) collectives ;;
  *) die "ONLY=$ONLY: expected mlp or collectives" ;;
esac
