#!/bin/sh
# tests/relocate.sh — gslc finds its runtime (libgslrt.a) and stdlib from
# where the gslc binary is (issue 30, item 10), as clang finds its resource
# directory: a build tree copied elsewhere, and an install laid out as
# `make install DESTDIR=...` lays it (bindir, libdir and the stdlib dir of
# this configuration) then moved to another prefix, each compile and run a
# program. Each copy's stdlib gains a function the source tree's lacks, so
# a program calling it compiles only with that copy's stdlib; each copy's
# runtime is the only one with the right name there (the original is
# never used: a copy whose libgslrt.a is taken away is an error naming
# where gslc looked, unless an install under the configured prefix exists).
set -u
. "$top_srcdir/tests/lib.sh"
built=$(dirname "$GSLC")

cat >"$work/prog.gsl" <<'GSL'
import "nn"
input x: f32[3] = ones()
let y = relocated_marker(x)
output y
GSL
marker='
# only in the relocated copies (tests/relocate.sh)
fn relocated_marker(a) {
  return a * 2.0 + 1.0
}'

# layout BIN LIB STDLIB: gslc into BIN, libgslrt.a into LIB, the stdlib
# (with the marker) into STDLIB
layout() {
  mkdir -p "$1" "$2" "$3"
  cp "$GSLC" "$1/gslc"
  cp "$built/runtime/libgslrt.a" "$2/"
  cp "$top_srcdir"/stdlib/*.gsl "$3/"
  printf '%s\n' "$marker" >>"$3/nn.gsl"
}

# try GSLC NAME: compiles and runs prog.gsl; y = x * 2 + 1 = 3 everywhere
try() {
  (cd "$work" && "$1" prog.gsl -o "$2") || { fail "$2: $1 did not compile the program"; return 1; }
  (cd "$work" && "./$2" --output y="$2.npy" --quiet) || { fail "$2 did not run"; return 1; }
  "$NPYTOOL" compare "$work/$2.npy" f32 3 --rtol 0 --atol 0 3 3 3 || fail "$2: y is not [3, 3, 3]"
}

# the source tree's gslc lacks the marker: the test means something
(cd "$work" && "$GSLC" prog.gsl -o never) 2>/dev/null && fail "the build tree's gslc found relocated_marker"

# a build tree, copied
layout "$work/tree" "$work/tree/runtime" "$work/tree/stdlib"
try "$work/tree/gslc" copied
# ... moved
mv "$work/tree" "$work/moved"
try "$work/moved/gslc" moved_tree
# ... through a symbolic link to the binary: found from the link's target
ln -s "$work/moved/gslc" "$work/gslc-link"
try "$work/gslc-link" linked

# an install under this configuration's prefix, in a DESTDIR, then moved
layout "$work/root$gsl_bindir" "$work/root$gsl_libdir" "$work/root$gsl_stdlibdir"
try "$work/root$gsl_bindir/gslc" installed
mv "$work/root" "$work/elsewhere"
try "$work/elsewhere$gsl_bindir/gslc" installed_moved

# without its runtime: an error naming where gslc looked
if [ ! -e "$gsl_libdir/libgslrt.a" ]; then
  rm "$work/moved/runtime/libgslrt.a"
  (cd "$work" && "$work/moved/gslc" prog.gsl -o none) 2>"$work/err" && fail "gslc without a runtime compiled"
  grep -q "^gslc: error: cannot find the runtime library (libgslrt.a): not beside this gslc" "$work/err" ||
    fail "gslc without a runtime said: $(cat "$work/err")"
fi

[ $status -eq 0 ] && echo "gslc finds its runtime and stdlib from where it is: copied, moved, linked and installed trees"
exit $status
