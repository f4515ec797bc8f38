# tests/hand_prog.sh — sourced by the tests that drive libgslrt through a
# hand-written program (tests/train_log.sh, tests/eval.sh, tests/faults.sh):
#   hand_prog NAME PATH   bin: the program (PATH, made absolute; NAME for the
#                         message when make check has not built it); work: a
#                         temporary directory, removed at exit, made the
#                         current one
#   fail MSG, pass MSG    a FAIL (status 1) or PASS line
#   run NP ARGS...        the program under $MPIEXEC on NP ranks: stdout in
#                         out, stderr in err, the exit status in rc
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
  timeout 120 $MPIEXEC -n "$np" "$bin" "$@" >out 2>err
  rc=$?
}
