# tests/hand_prog.sh — sourced after tests/lib.sh by the tests that drive
# libgslrt (or gslrun) through a program of their own (tests/train_log.sh,
# tests/eval.sh, tests/faults.sh, ...):
#   hand_prog NAME PATH   bin: the program (PATH, made absolute; NAME for the
#                         message when make check has not built it); then
#                         lib.sh's work made the current directory
#   run NP ARGS...        the program under $MPIEXEC on NP ranks: stdout in
#                         out, stderr in err, the exit status in rc (under
#                         a guard of 120 s scaled for a busy machine)
#   pace_json NP, rss_json NP, pace_log NP, rss_log NP
#                         the patterns (grep's basic regular expressions) of
#                         what the log line and a --metrics record add on NP
#                         ranks (runtime/health.c): with several ranks the
#                         slowest rank and its score, in every line; each
#                         rank's peak RSS, in the last step's only
: "${work:?source tests/lib.sh before tests/hand_prog.sh}"

hand_prog() {
  bin=$2
  case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
  [ -x "$bin" ] || fatal "no $bin (make check builds $1)"
  cd "$work" || exit 1
}

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
