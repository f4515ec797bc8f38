#!/bin/sh
# tests/machine_file.sh — gslc --machine FILE reads any file safely
# (issue 30, items 2, 3, 8 and 9):
#   - every rate has a range (gslc.1, MACHINE FILES); a value outside it is
#     a located error naming the key, the value and the range, and the
#     tiny rates that once aborted gslc inside CBC (SIGABRT) or ended the
#     search after 0.2 s with "no plan in 60 s" are among them;
#   - a machine file at the ends of every range still gets a plan, the
#     search's prices scaled for the solver: the slowest machine, where a
#     step of tests/auto/mlp.gsl is priced at hours, and the fastest;
#   - lines of any length: a comment of 511 bytes and more is a comment
#     (it was read in 511-byte pieces, its tail taken as a setting), and
#     an error past a long line names the right line;
#   - /dev/zero is refused at once (it was read forever), and what a
#     message quotes of a binary file is escaped, never echoed raw.
set -u
. "$top_srcdir/tests/lib.sh"
prog=$top_srcdir/tests/auto/mlp.gsl
mesh="-D DP=2 -D MP=2"

# Runs gslc --auto-shard with machine file $1 (more options after it);
# its stdout in $work/out, stderr in $work/err, exit status in $rc.
search() {
  m=$1; shift
  # shellcheck disable=SC2086
  timeout 60 "$GSLC" $mesh --auto-shard --machine "$m" "$@" "$prog" >"$work/out" 2>"$work/err"
  rc=$?
}

# out of range: the error, exactly, and exit 1
refused() { # setting, expected message
  printf '# a machine file\n%s\n' "$1" >"$work/m"
  search "$work/m" --emit-annotations
  want="gslc: error: --machine $work/m:2: $2"
  [ $rc -eq 1 ] && [ "$(cat "$work/err")" = "$want" ] ||
    fail "'$1': exit $rc, said '$(cat "$work/err")', not '$want'"
}
refused "memory_gbs = 1e-30" "memory_gbs = 1e-30 is out of range: it takes 1e-06 to 1e+06 (GB/s)"
refused "link_gbs = 1e-30" "link_gbs = 1e-30 is out of range: it takes 1e-06 to 1e+06 (GB/s)"
refused "rng_gbs = 1e-300" "rng_gbs = 1e-300 is out of range: it takes 1e-06 to 1e+06 (GB/s)"
refused "gemm_f32_gflops = 1e-300" "gemm_f32_gflops = 1e-300 is out of range: it takes 0.001 to 1e+07 (GFLOP/s)"
refused "gemm_f32_gflops = 1e-20" "gemm_f32_gflops = 1e-20 is out of range: it takes 0.001 to 1e+07 (GFLOP/s)"
refused "gemm_bf16_gflops = 2e7" "gemm_bf16_gflops = 2e7 is out of range: it takes 0.001 to 1e+07 (GFLOP/s)"
refused "latency_us = 1e9" "latency_us = 1e9 is out of range: it takes 1e-06 to 1e+06 (microseconds)"
refused "link_gbs.data = 1e-7" "link_gbs.data = 1e-7 is out of range: it takes 1e-06 to 1e+06 (GB/s)"
refused "memory_gbs = inf" "memory_gbs takes a positive number (GB/s), got 'inf'"
refused "memory_gbs = nan" "memory_gbs takes a positive number (GB/s), got 'nan'"
refused "memory_gbs = 0" "memory_gbs takes a positive number (GB/s), got '0'"

# the ends of every range: a plan, found and priced
printf 'gemm_f32_gflops = 1e-3\ngemm_bf16_gflops = 1e-3\nmemory_gbs = 1e-6\nrng_gbs = 1e-6\nlink_gbs = 1e-6\nlatency_us = 1e6\n' >"$work/slowest"
printf 'gemm_f32_gflops = 1e7\ngemm_bf16_gflops = 1e7\nmemory_gbs = 1e6\nrng_gbs = 1e6\nlink_gbs = 1e6\nlatency_us = 1e-6\n' >"$work/fastest"
for m in slowest fastest; do
  search "$work/$m" --explain
  [ $rc -eq 0 ] || { cat "$work/err"; fail "the $m machine: exit $rc"; continue; }
  grep -q "solved to optimality" "$work/out" || fail "the $m machine: the search was not solved to optimality"
done
# On the slowest machine (1 MFLOP/s, 1 KB/s) the plan chosen costs less than
# pure data parallel, which costs less than replicating everything, as on
# the default machine (doc/auto_shard.md): the scaled prices still rank plans.
search "$work/slowest" --explain
awk '/^the plan chosen/ { c = $(NF-1) } /^pure data parallel/ { d = $(NF-1) } /^replicated/ { r = $(NF-1) }
     END { exit !(c > 1e6 && c < d && d < r) }' "$work/out" ||
  fail "the slowest machine's plans are not ranked: $(grep -E '^(the plan|pure|replicated)' "$work/out")"

# a comment of any length is a comment: the plan of the defaults
"$GSLC" $mesh --auto-shard --emit-annotations "$prog" >"$work/default" || fail "no default plan"
{ printf '#'; printf '%510s' ''; printf 'link_gbs = 0.00001\n'; printf '# %3000s link_gbs = 0.00001\n' ''; } >"$work/long"
search "$work/long" --emit-annotations
[ $rc -eq 0 ] && cmp -s "$work/out" "$work/default" || { cat "$work/err"; fail "a long comment changed the plan"; }
# ... and a setting after a long line is found on its own line
{ printf 'memory_gbs = 5 # %600s\n' ''; printf '%700s\n' ''; printf 'link_gbz = 1\n'; } >"$work/long2"
search "$work/long2" --emit-annotations
grep -q "^gslc: error: --machine $work/long2:3: unknown key 'link_gbz'" "$work/err" ||
  fail "an unknown key after long lines: $(cat "$work/err")"
# a long setting line is read whole: its value is the whole number
printf 'link_gbs = 0.001\n' >"$work/short3"
search "$work/short3" --explain
sed 1d "$work/out" | grep -v "solved to optimality" >"$work/want3"
printf 'link_gbs = 0.001%s\n' "$(printf '%0600d' 0)" >"$work/long3"
search "$work/long3" --explain
sed 1d "$work/out" | grep -v "solved to optimality" >"$work/got3"
[ $rc -eq 0 ] && cmp -s "$work/got3" "$work/want3" || { cat "$work/err"; fail "link_gbs = 0.001000...0 (a 600-byte line) not read as 0.001"; }

# endless and binary files
search /dev/zero --emit-annotations
[ $rc -eq 1 ] && grep -q "^gslc: error: --machine /dev/zero: longer than 1048576 bytes" "$work/err" ||
  fail "/dev/zero: exit $rc, $(head -c 300 "$work/err")"
printf '\033[2J\033]0;owned\007gemm\001 = 1\n' >"$work/bin"
search "$work/bin" --emit-annotations
want="gslc: error: --machine $work/bin:1: unknown key '\\x1b[2J\\x1b]0;owned\\x07gemm\\x01' (gemm_f32_gflops, gemm_bf16_gflops, gemm_pinned_gflops, memory_gbs, rng_gbs, link_gbs, link_gbs.AXIS for an axis of the mesh, latency_us)"
[ $rc -eq 1 ] && [ "$(cat "$work/err")" = "$want" ] || fail "a binary key: exit $rc, $(od -c "$work/err" | head -5)"
printf 'memory_gbs = 1\0\n' >"$work/nul"
search "$work/nul" --emit-annotations
[ $rc -eq 1 ] && grep -q "^gslc: error: --machine $work/nul:1: a NUL byte: a machine file is text" "$work/err" ||
  fail "a NUL byte: exit $rc, $(od -c "$work/err" | head -5)"
# every byte of the errors above is printable
LC_ALL=C grep -q '[^[:print:]]' "$work/err" && fail "an error line holds unprintable bytes"

[ $status -eq 0 ] && echo "machine files: ranges, scaled prices, long lines, endless and binary files"
exit $status
