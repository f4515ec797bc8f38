#!/bin/sh
# scripts/fuzz.sh — fuzz gslc, or the files a compiled program reads, for a
# while: scripts/fuzz.sh [--runtime] [SECONDS] (default 1800).
#
# Builds gslc and libgslrt with AddressSanitizer and
# UndefinedBehaviorSanitizer in a separate out-of-tree build directory
# ($FUZZ_DIR, default ./fuzz), then runs scripts/fuzz.py, a self-contained
# mutation fuzzer in Python (the standard library only: no AFL++ or other
# package), for SECONDS, with a per-run timeout ($FUZZ_TIMEOUT, default
# 10 s).
#
# By default it fuzzes gslc: its seed corpus is every .gsl file under
# tests, examples, stdlib and bench (the training, MoE and checkpoint
# programs among them), and each run is `gslc --emit-spmd` (sometimes
# --explain, -c, or --auto-shard --machine FILE with a mutated machine
# file) on a mutant, through a fork server (scripts/gslc_server, made from
# scripts/fuzz_server.c and gslc's objects: gslc loaded once, forked per
# run) and one run in 64 by exec. With --runtime it fuzzes libgslrt's
# readers instead: the sanitized gslc compiles a small training program,
# linked with the sanitized libgslrt.a by the compiler driver configure
# found (mpicc), in $FUZZ_DIR/runtime, which writes a valid checkpoint;
# each run mutates its manifest.json, one of its .npy files or an --input
# or --eval-input .npy file, and resumes, evaluates or trains on it; or
# a generating program, trained to a checkpoint of its own, writes text
# with mutated --generate, --prompt, --prompt-file, --temperature, --top-k
# and --seed values (and sometimes from a mutated checkpoint). These runs
# are exec'd: a compiled program calls MPI_Init before anything else, and
# MPICH's singleton start is most of a run, which a fork server cannot
# share (its parent must not initialize MPI).
# Findings (sanitizer reports, signals, exit statuses other than 0 and 1,
# timeouts, exit 1 without a located error or one clean runtime error
# line, exit 0 on a manifest that is not JSON) are saved in
# $FUZZ_DIR/findings (or $FUZZ_DIR/findings-runtime); at the end it prints
# execs, execs/s and the findings. Exit status: 0 without findings, 1 with
# some, 2 if the build failed. `make fuzz` and `make fuzz-runtime` run
# this (FUZZ_SECONDS=...); it is never part of make check.
#
# The source tree is copied (its files under git, or all if it is no git
# checkout) into $FUZZ_DIR/src and regenerated there when it is configured
# in place (autoconf refuses an out-of-tree build of such a tree) or has
# no configure script yet. Set FUZZ_SEED for a repeatable run, FUZZ_JOBS
# for make -j (default 2).
set -eu
mode=compile
if [ "${1:-}" = --runtime ]; then
  mode=runtime
  shift
fi
seconds=${1:-1800}
here=$(cd "$(dirname "$0")/.." && pwd)
fuzz=${FUZZ_DIR:-$PWD/fuzz}
mkdir -p "$fuzz"
fuzz=$(cd "$fuzz" && pwd)
jobs=${FUZZ_JOBS:-2}
san='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer'

build() {
  src=$here
  if [ -f "$here/config.status" ] || [ ! -f "$here/configure" ]; then
    # configured in place, or never bootstrapped: build from a clean copy of the sources
    src=$fuzz/src
    rm -rf "$src"; mkdir -p "$src"
    if git -C "$here" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      (cd "$here" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf -) |
        (cd "$src" && tar xf -)
    else
      (cd "$here" && tar cf - --exclude=./fuzz --exclude='*.o' --exclude='*.a' .) | (cd "$src" && tar xf -)
      rm -f "$src/config.status" "$src/config.h" "$src/Makefile"
    fi
    (cd "$src" && autoreconf -fi >/dev/null 2>&1)
  fi
  mkdir -p "$fuzz/build"
  cd "$fuzz/build"
  if [ ! -f Makefile ] || [ "$src/configure" -nt Makefile ]; then
    "$src/configure" --quiet CFLAGS="$san" LDFLAGS="-fsanitize=address,undefined"
  fi
  make -j"$jobs" gslc runtime/libgslrt.a scripts/gslc_server >build.log 2>&1 || { tail -20 build.log; return 1; }
  cd - >/dev/null
}

# the value of a string #define in the build's config.h
config() {
  sed -n "s/^#define $1 \"\\(.*\\)\"\$/\\1/p" "$fuzz/build/config.h"
}

echo "fuzz.sh: building the sanitized gslc and libgslrt in $fuzz/build"
build || { echo "fuzz.sh: the build failed" >&2; exit 2; }
set +e
if [ $mode = runtime ]; then
  /usr/bin/python3 "$here/scripts/fuzz.py" --runtime --gslc "$fuzz/build/gslc" \
    --libgslrt "$fuzz/build/runtime/libgslrt.a" --cc="$(config GSL_LINKER)" \
    --ldflags="-fsanitize=address,undefined" --libs="$(config GSL_LINK_LIBS)" \
    --work "$fuzz/runtime" --seconds "$seconds" --findings "$fuzz/findings-runtime" \
    --timeout "${FUZZ_TIMEOUT:-10}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"}
  exit
fi
corpus=
for d in tests examples stdlib bench; do
  [ -d "$here/$d" ] && corpus="$corpus $here/$d"
done
# shellcheck disable=SC2086
/usr/bin/python3 "$here/scripts/fuzz.py" --gslc "$fuzz/build/gslc" --server "$fuzz/build/scripts/gslc_server" \
  --seconds "$seconds" \
  --findings "$fuzz/findings" --timeout "${FUZZ_TIMEOUT:-10}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} $corpus
