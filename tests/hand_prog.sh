# tests/hand_prog.sh — sourced by the tests that drive libgslrt through a
# hand-written program (tests/train_log.sh, tests/eval.sh, tests/faults.sh):
#   hand_prog NAME PATH   bin: the program (PATH, made absolute; NAME for the
#                         message when make check has not built it); work: a
#                         temporary directory, removed at exit, made the
#                         current one
#   fail MSG, pass MSG    a FAIL (status 1) or PASS line
#   run NP ARGS...        the program under $MPIEXEC on NP ranks: stdout in
#                         out, stderr in err, the exit status in rc (under
#                         a guard of 120 s scaled for a busy machine)
#   pace_json NP, rss_json NP, pace_log NP, rss_log NP
#                         the patterns (grep's basic regular expressions) of
#                         what the log line and a --metrics record add on NP
#                         ranks (runtime/health.c): with several ranks the
#                         slowest rank and its score, in every line; each
#                         rank's peak RSS, in the last step's only
# and what tests/lib.sh defines (now, secs, slow, scaled, poll_until).
. "$top_srcdir/tests/lib.sh"
status=0

hand_prog() {
  bin=$2
  case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
  [ -x "$bin" ] || { echo "FAIL: no $bin (make check builds $1)"; exit 1; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/gsl$1.XXXXXX")
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  cd "$work" || exit 1
}

fail() { echo "FAIL: $*"; status=1; }
pass() { echo "PASS: $*"; }

run() {
  np=$1; shift
  timeout "$(scaled 120)" $MPIEXEC -n "$np" "$bin" "$@" >out 2>err
  rc=$?
}

num='[0-9][0-9.e+-]*'
pace_json() {
  [ "$1" -gt 1 ] || return 0
  printf '%s' ", \"slowest_rank\": [0-9]*, \"slowest_score\": [01]\.[0-9]\{3\}, \"compute_ms\": $num, \"wait_ms\": $num"
}
rss_json() {
  printf '%s' ", \"peak_rss_kib\": \[[1-9][0-9]*\(, [1-9][0-9]*\)\{$(($1 - 1))\}\]"
}
pace_log() {
  [ "$1" -gt 1 ] || return 0
  printf '%s' "; slowest rank [0-9]*, score [01]\.[0-9][0-9]"
}
rss_log() {
  if [ "$1" -gt 1 ]; then
    printf '%s' "; peak RSS [0-9]*\.[0-9] MiB on rank [0-9]*"
  else
    printf '%s' "; peak RSS [0-9]*\.[0-9] MiB"
  fi
}
