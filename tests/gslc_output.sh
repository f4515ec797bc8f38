#!/bin/sh
# tests/gslc_output.sh — gslc never writes over a source (compiler/main.c):
# -o naming the input (by its path, another path, a hard link or a
# symlink) or an imported module is refused with one "gslc: error:" line
# and status 1, in every output mode, and the file is left as it was. A
# failed link prints gslc's own error line first, the linker's after it.
# A directory given as the input or as a module is named as a directory
# (compiler/diag.c).
set -u
. "$top_srcdir/tests/lib.sh"
cd "$work" || exit 1
mkdir lib
cat >x.gsl <<'GSL'
import "m"
input x: f32[4] = ones()
let y = twice(x)
output y
GSL
cat >lib/m.gsl <<'GSL'
fn twice(a) {
  return a + a
}
GSL
ln x.gsl hard.gsl
ln -s x.gsl link.gsl
cp x.gsl x.orig
cp lib/m.gsl m.orig

# refused FILE TEXT ARGS...: gslc ARGS exits 1, its stderr's first line is
# "gslc: error: ..." holding TEXT, and FILE is unchanged
refused() {
  file=$1 text=$2; shift 2
  "$GSLC" "$@" >out 2>err
  rc=$?
  first=$(sed 1q err)
  if [ $rc -ne 1 ]; then
    fail "gslc $*: exit status $rc, expected 1"; cat err
  elif ! cmp -s "$file" "$(basename "$file" .gsl | sed 's/^hard$/x/; s/^link$/x/').orig"; then
    fail "gslc $*: $file was changed"
  else
    case $first in
    "gslc: error: "*"$text"*) pass "gslc $*" ;;
    *) fail "gslc $*: stderr does not begin with the error '$text':"; cat err ;;
    esac
  fi
  cp x.orig x.gsl; cp m.orig lib/m.gsl  # the next case starts clean even if this one failed
}
for mode in "" -c -S --emit-llvm --emit-ir --emit-spmd --explain --stats --emit-annotations --mesh-axes; do
  # shellcheck disable=SC2086
  refused x.gsl "the output file x.gsl is the input file x.gsl" -I lib $mode x.gsl -o x.gsl
  # shellcheck disable=SC2086
  refused lib/m.gsl "is the module lib/m.gsl that x.gsl imports" -I lib $mode x.gsl -o lib/m.gsl
done
refused x.gsl "is the input file" -I lib x.gsl -o ./x.gsl
refused x.gsl "is the input file" -I lib x.gsl -o hard.gsl
refused x.gsl "is the input file" -I lib --emit-spmd x.gsl -o link.gsl
refused x.gsl "is the input file" -I lib -c link.gsl -o "$work/x.gsl"
[ -L link.gsl ] || fail "link.gsl replaced"
# an output beside the sources is still written
if "$GSLC" -I lib --emit-spmd x.gsl -o x.spmd 2>err && [ -s x.spmd ]; then
  pass "--emit-spmd -o x.spmd"
else
  fail "--emit-spmd -o x.spmd"; cat err
fi

# a failed link: our line first, then the linker's
"$GSLC" -I lib x.gsl -o nodir/prog >out 2>err
rc=$?
if [ $rc -eq 1 ] && sed 1q err | grep -q "^gslc: error: linking failed" && [ "$(wc -l <err)" -gt 1 ]; then
  pass "linker output after gslc's error"
else
  fail "a failed link (status $rc) must print gslc's error first:"; cat err
fi

# a directory as the input or as a module
mkdir d.gsl lib/dm.gsl
echo 'import "dm"' >imp.gsl
"$GSLC" d.gsl -o prog >out 2>err
if grep -q "^gslc: error: cannot read d.gsl: Is a directory" err; then
  pass "a directory as the input"
else
  fail "a directory as the input:"; cat err
fi
"$GSLC" -I lib imp.gsl -o prog >out 2>err
if grep -q "^imp.gsl:1:1: error: cannot read module \"dm\" at lib/dm.gsl: Is a directory" err; then
  pass "a directory as a module"
else
  fail "a directory as a module:"; cat err
fi
exit $status
