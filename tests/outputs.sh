#!/bin/sh
# tests/outputs.sh — a compiled program's --output targets are checked
# before step 1 and written all or none (runtime/tensors.c), a directory
# given as --input is named as one (runtime/npy.c), every error line is
# one write(2) (runtime/fail.c), and --steps 0 is refused as man/gslrun.7
# says, as is a value past an option's range, naming the range. Each
# case on 1 rank and on 2 ranks (a split output).
set -u
. "$top_srcdir/tests/lib.sh"
cat >"$work/p.gsl" <<'GSL'
const D = 1
mesh [d = D]
param w: f32[4, 2] split(0) = ones()
let y = w * 2.0
let z = w + 1.0
output y
output z
GSL
"$GSLC" "$work/p.gsl" -o "$work/p1" || fatal "gslc p.gsl (D=1)"
"$GSLC" -D D=2 "$work/p.gsl" -o "$work/p2" || fatal "gslc p.gsl (D=2)"
cd "$work" || exit 1

# expect NAME NP STATUS TEXT ARGS...: the program exits STATUS, its stderr
# holds TEXT, and no step ran (stdout is empty)
expect() {
  what=$1 np=$2 want=$3 text=$4; shift 4
  timeout 120 $MPIEXEC -n "$np" "./p$np" "$@" >out 2>err
  rc=$?
  if [ $rc -ne "$want" ]; then
    fail "$what (np $np): exit status $rc, expected $want"; cat err
  elif ! grep -qF -- "$text" err; then
    fail "$what (np $np): stderr lacks '$text':"; cat err
  elif [ -s out ]; then
    fail "$what (np $np): a step ran before the error:"; cat out
  else
    pass "$what (np $np)"
  fi
}
# unchanged FILE CONTENT: FILE still holds CONTENT
unchanged() {
  [ "$(cat "$1" 2>/dev/null)" = "$2" ] || fail "$1 was changed"
}

for np in 1 2; do
  rm -rf ./*.npy ./*.tmp sub link keep dir
  # one file named twice: a usage error naming both options
  expect "same path twice" $np 2 "--output y=a.npy and --output z=a.npy name the same file" \
    --output y=a.npy --output z=a.npy
  [ -e a.npy ] && fail "a.npy written (np $np)"
  mkdir sub
  echo keep >keep
  ln keep hard
  expect "two names of one file" $np 2 "name the same file" --output y=keep --output z=hard
  unchanged keep keep
  rm -f hard
  # a special file (a FIFO of our own: never a node of the system, which a
  # broken runtime would replace) or a symlink is refused, not replaced
  mkfifo fifo
  expect "FIFO" $np 1 "--output y=fifo: fifo is a FIFO, not a regular file" --output y=fifo
  [ -p fifo ] || fail "fifo replaced (np $np)"
  rm -f fifo
  ln -s keep link
  expect "symbolic link" $np 1 "--output z=link: link is a symbolic link" --output z=link
  [ -L link ] || fail "link replaced (np $np)"
  unchanged keep keep
  mkdir dir
  expect "directory target" $np 1 "--output y=dir: dir is a directory" --output y=dir
  # an unwritable place is found before step 1, and nothing is written
  expect "missing directory" $np 1 "--output z=nodir/z.npy: cannot create nodir/z.npy.tmp: No such file or directory" \
    --steps 3 --output y=good.npy --output z=nodir/z.npy
  [ -e good.npy ] && fail "good.npy written though z failed (np $np)"
  expect "file as directory" $np 1 "cannot create keep/z.npy.tmp: Not a directory" \
    --output y=good.npy --output z=keep/z.npy
  ls ./*.tmp sub/* 2>/dev/null | grep . && fail "temporaries left (np $np)"
  # a directory as --input names the cause... (p has no input: see below)
  # --steps 0 is a usage error
  expect "--steps 0" $np 2 "invalid value '0' for --steps" --steps 0
  # a number past an option's range names the range (a checkpoint names
  # its step in at most 18 digits; --keep counts in an int), not ">= 1"
  expect "--steps 2^64-1" $np 2 "invalid value '18446744073709551615' for --steps (expected an integer from 1 to 999999999999999999)" \
    --steps 18446744073709551615
  expect "--keep 10^20" $np 2 "invalid value '99999999999999999999' for --keep (expected an integer from 1 to 2147483647)" \
    --keep 99999999999999999999
  # the good case still writes both, over an existing file
  echo old >y.npy
  if timeout 120 $MPIEXEC -n $np "./p$np" --quiet --output y=y.npy --output z=sub/z.npy >out 2>err &&
     "$NPYTOOL" print y.npy | grep -q "^f32 \[4, 2\]" && "$NPYTOOL" print sub/z.npy | grep -q "^f32 \[4, 2\]"; then
    pass "both outputs written (np $np)"
  else
    fail "both outputs (np $np)"; cat err; "$NPYTOOL" print y.npy
  fi
  ls ./*.tmp sub/*.tmp 2>/dev/null | grep . && fail "temporaries left (np $np)"
done

# a directory given as --input: "is a directory", not an I/O error
cat >q.gsl <<'GSL'
input x: f32[4]
let y = x + 1.0
output y
GSL
"$GSLC" q.gsl -o q || fatal "gslc q.gsl"
./q --input x=dir >out 2>err
rc=$?
if [ $rc -eq 1 ] && grep -qF "input x: cannot read dir: is a directory" err; then
  pass "directory as --input"
else
  fail "directory as --input: status $rc"; cat err
fi

# the man page says what the program does with --steps 0
if grep -q "may be 0" "$top_srcdir/man/gslrun.7"; then
  fail "man/gslrun.7 still says --steps may be 0"
else
  pass "man/gslrun.7 on --steps 0"
fi

# an error line is one write(2): prefix, message and newline together, so
# lines of ranks that fail at once cannot interleave
if strace -f -qq -s 1024 -e trace=write -o trace ./p1 --output y=dir >/dev/null 2>&1; then :; fi
if [ ! -s trace ]; then
  echo "SKIP: strace unavailable: one write per error line not checked"
elif grep -q 'write(2, "p1: rank 0: error: --output y=dir: .*\\n", ' trace; then
  pass "error line in one write"
else
  fail "the error line took several writes:"; grep 'write(2' trace
fi

# an error line stays one line whatever it quotes: a file name with a
# newline and a tab is written with \x0a and \x09 (found by the runtime
# fuzzer: "--prompt-file p<newline>q" split the message in two)
./p1 --output "y=$(printf 'a\nb\tc')/y.npy" >/dev/null 2>err_nl
if [ "$(wc -l <err_nl)" -eq 1 ] && grep -q '^p1: rank 0: error: .*a\\x0ab\\x09c/y.npy' err_nl; then
  pass "a newline and a tab in a file name are escaped in the one error line"
else
  fail "an error quoting a name with a newline:"; cat err_nl
fi
exit $status
