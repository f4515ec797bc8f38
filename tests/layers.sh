#!/bin/sh
# tests/layers.sh — the files of gslc and of libgslrt call downward only,
# read from the object files the build made (nm: each file's undefined
# symbols against every other file's definitions).
#
# gslc: the front end's files (the lexer, the parser, ast.c and sema's
# six files, which parse imports and evaluate expressions within
# builtins' arguments) count as one; the graph of the rest must have no
# cycle (tsort), and no pass may call a pass that runs before it in the
# pipeline: front end, autodiff, slots, autoshard, propagate, update, partition, explain,
# stats (--stats, which reads the plan), plan, the plan's allocator and its
# staging rules (plan_arena.c, plan_staging.c), codegen (its six files as
# one: among them cg_loops.c calls none of the others, and none calls
# codegen.c). libgslrt: no cycle, fail.c calls no other runtime file, and
# no runtime file calls main.c.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# edges DIR...: "caller callee" per call from one file to another, names
# without directory and suffix
edges() {
  : >"$work/defs"
  for d in "$@"; do
    for o in "$d"/*.o; do
      b=$(basename "$o" .o); b=${b#*_a-}
      nm --defined-only "$o" | awk -v f="$b" '$2 ~ /^[TDBRC]$/ {print $3, f}' >>"$work/defs"
    done
  done
  sort -u "$work/defs" >"$work/defs.s"
  for d in "$@"; do
    for o in "$d"/*.o; do
      b=$(basename "$o" .o); b=${b#*_a-}
      nm -u "$o" | awk '{print $2}' | sort -u | join - "$work/defs.s" |
        awk -v f="$b" '$2 != f {print f, $2}'
    done
  done | sort -u
}

[ -f compiler/sema.o ] && [ -f runtime/fail.o ] || fail "run from the build directory after make"
edges compiler grammar >"$work/cc"
edges runtime >"$work/rt"
[ -s "$work/cc" ] && [ -s "$work/rt" ] || fail "no calls found (nm missing?)"

# gslc, the front end as one node
sed -E 's/(^| )(lexer|parser|ast|sema|builtins|contract|inline|loop|moe)( |$)/\1front\3/g;
        s/(^| )(cg_[a-z]+|codegen)( |$)/\1codegen\3/g' "$work/cc" |
  awk '$1 != $2' | sort -u >"$work/cc1"
tsort "$work/cc1" >/dev/null 2>"$work/loop" || { cat "$work/loop"; fail "gslc's files call each other in a circle"; }
order="front autodiff slots autoshard propagate update partition explain stats plan plan_staging plan_arena codegen"
pos() { i=0; for p in $order; do [ "$p" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
while read -r from to; do
  a=$(pos "$from"); b=$(pos "$to")
  if [ "$a" -ge 0 ] && [ "$b" -ge 0 ] && [ "$b" -lt "$a" ]; then
    fail "$from calls $to, a pass that runs before it"
  fi
done <"$work/cc1"
grep -E '^cg_loops (cg_|codegen)' "$work/cc" && fail "cg_loops.c, codegen's base, calls the files above it"
grep -E '^cg_[a-z]+ codegen$' "$work/cc" && fail "a cg_*.c file calls back into codegen.c"

# libgslrt
tsort "$work/rt" >/dev/null 2>"$work/loop" || { cat "$work/loop"; fail "libgslrt's files call each other in a circle"; }
grep '^fail ' "$work/rt" && fail "fail.c calls another runtime file"
grep ' main$' "$work/rt" && fail "a runtime file calls main.c"

echo "gslc:    $(wc -l <"$work/cc") calls between files, $(wc -l <"$work/cc1") between layers, no circle"
echo "libgslrt: $(wc -l <"$work/rt") calls between files, no circle"
echo "PASS: layers"
