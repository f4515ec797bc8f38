#!/bin/sh
# scripts/fuzz.sh — fuzz gslc for a while: scripts/fuzz.sh [SECONDS] (default 1800).
#
# Builds gslc with AddressSanitizer and UndefinedBehaviorSanitizer in a
# separate out-of-tree build directory ($FUZZ_DIR, default ./fuzz), then
# runs scripts/fuzz.py, a self-contained mutation fuzzer in Python (the
# standard library only: no AFL++ or other package), for SECONDS. Its seed
# corpus is the .gsl files of tests/e2e, tests/errors, tests/spmd,
# tests/ir, examples and stdlib. Each run is `gslc --emit-spmd` (sometimes
# --explain or -c) on a mutant, with a per-run timeout ($FUZZ_TIMEOUT,
# default 10 s). Findings (sanitizer reports, signals, exit statuses other
# than 0 and 1, timeouts, exit 1 without a located error) are saved in
# $FUZZ_DIR/findings; at the end it prints execs, execs/s and the findings.
# Exit status: 0 without findings, 1 with some, 2 if the build failed.
# `make fuzz` runs this (FUZZ_SECONDS=...); it is never part of make check.
#
# The source tree is copied (its files under git, or all if it is no git
# checkout) into $FUZZ_DIR/src and regenerated there, since autoconf
# refuses an out-of-tree build of a tree configured in place. Set
# FUZZ_SEED for a repeatable run, FUZZ_JOBS for make -j (default 2).
set -eu
seconds=${1:-1800}
here=$(cd "$(dirname "$0")/.." && pwd)
fuzz=${FUZZ_DIR:-$PWD/fuzz}
mkdir -p "$fuzz"
fuzz=$(cd "$fuzz" && pwd)
jobs=${FUZZ_JOBS:-2}
san='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer'

build() {
  src=$here
  if [ -f "$here/config.status" ]; then
    # configured in place: build from a clean copy of the sources
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
  make -j"$jobs" gslc runtime/libgslrt.a >build.log 2>&1 || { tail -20 build.log; return 1; }
  cd - >/dev/null
}

echo "fuzz.sh: building the sanitized gslc in $fuzz/build"
build || { echo "fuzz.sh: the build failed" >&2; exit 2; }
corpus=
for d in tests/e2e tests/errors tests/spmd tests/ir examples stdlib; do
  [ -d "$here/$d" ] && corpus="$corpus $here/$d"
done
set +e
# shellcheck disable=SC2086
/usr/bin/python3 "$here/scripts/fuzz.py" --gslc "$fuzz/build/gslc" --seconds "$seconds" \
  --findings "$fuzz/findings" --timeout "${FUZZ_TIMEOUT:-10}" ${FUZZ_SEED:+--seed "$FUZZ_SEED"} $corpus
