#!/bin/sh
# tests/layers.sh — the files of gslc and of libgslrt call downward only,
# read from the object files the build made (nm: each file's undefined
# symbols against every other file's definitions).
#
# gslc: the front end's files (the lexer, the parser, ast.c and sema's
# six files, which parse imports and evaluate expressions within
# builtins' arguments) count as one node, and codegen's (codegen.c and
# cg_*.c) as another; the graph of the nodes must have no cycle (tsort),
# and every node has its place in `order`, top first, where a node may
# call only those after it: the driver (main.c); the passes in the order
# the pipeline runs them (front end, autodiff, slots, autoshard,
# propagate, update, samebits, partition, combine), the reports placed
# above what they read (explain after partition; stats, --stats, and
# remat, --mem-budget's measure, above the plan), the plan, its staging
# rules and its allocator, codegen; then the modules every pass may call:
# lower.c (the lowering decisions the plan and codegen both read), vmap,
# verify, rule, sharding, machine, ir, diag, arena. An object not in the
# list fails the test: a new file must be given its place. Only the
# driver calls codegen (the plan reads lower.c, not cg_*.c). Within
# codegen, codegen.h's stack: codegen.c on top; the op emitters cg_ops.c,
# cg_einsum.c and cg_collectives.c, none calling another; cg_fuse.c;
# cg_math.c; cg_loops.c at the base: each file calls only those below it.
# libgslrt: no cycle, fail.c calls no other runtime file, and no runtime
# file calls main.c.
set -eu
. "$top_srcdir/tests/lib.sh"

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

[ -f compiler/sema.o ] && [ -f runtime/fail.o ] || fatal "run from the build directory after make"
edges compiler grammar >"$work/cc"
edges runtime >"$work/rt"
[ -s "$work/cc" ] && [ -s "$work/rt" ] || fatal "no calls found (nm missing?)"

# gslc: the front end and codegen as one node each
node() {
  case $1 in
  lexer | parser | ast | sema | builtins | contract | inline | loop | moe) echo front ;;
  codegen | cg_*) echo codegen ;;
  *) echo "$1" ;;
  esac
}
order="main
  front autodiff slots autoshard propagate update samebits partition combine explain
  stats remat plan plan_staging plan_arena codegen
  lower vmap verify rule sharding machine ir diag arena"
pos() { i=0; for p in $order; do [ "$p" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
for o in compiler/*.o grammar/*.o; do
  b=$(basename "$o" .o); b=${b#*_a-}
  [ "$(pos "$(node "$b")")" -ge 0 ] || fatal "$o is not in layers.sh's order: give it its place in the pipeline"
done
while read -r from to; do
  a=$(node "$from"); b=$(node "$to")
  [ "$a" = "$b" ] || echo "$a $b"
done <"$work/cc" | sort -u >"$work/cc1"
tsort "$work/cc1" >/dev/null 2>"$work/loop" || { cat "$work/loop"; fatal "gslc's files call each other in a circle"; }
while read -r from to; do
  a=$(pos "$from"); b=$(pos "$to")
  [ "$b" -gt "$a" ] || fatal "$from calls $to, which sits above it in layers.sh's order (a pass that runs before it)"
  [ "$to" != codegen ] || [ "$from" = main ] || fatal "$from calls into codegen: only the driver does"
done <"$work/cc1"

# codegen's stack (codegen.h): each file calls only the levels below its own
level() {
  case $1 in
  codegen) echo 0 ;;
  cg_ops | cg_einsum | cg_collectives) echo 1 ;;
  cg_fuse) echo 2 ;;
  cg_math) echo 3 ;;
  cg_loops) echo 4 ;;
  *) echo -1 ;;
  esac
}
for o in compiler/codegen.o compiler/cg_*.o; do
  b=$(basename "$o" .o); b=${b#*_a-}
  [ "$(level "$b")" -ge 0 ] || fatal "$o is not in codegen.h's stack (nor in layers.sh's level)"
done
ncg=0
while read -r from to; do
  [ "$(node "$from")" = codegen ] && [ "$(node "$to")" = codegen ] || continue
  a=$(level "$from"); b=$(level "$to")
  [ "$b" -gt "$a" ] || fatal "$from.c calls $to.c, which is not below it in codegen.h's stack"
  ncg=$((ncg + 1))
done <"$work/cc"

# libgslrt
tsort "$work/rt" >/dev/null 2>"$work/loop" || { cat "$work/loop"; fatal "libgslrt's files call each other in a circle"; }
grep '^fail ' "$work/rt" && fatal "fail.c calls another runtime file"
grep ' main$' "$work/rt" && fatal "a runtime file calls main.c"

echo "gslc:    $(wc -l <"$work/cc") calls between files, $(wc -l <"$work/cc1") between layers, all downward; $ncg within codegen's stack"
echo "libgslrt: $(wc -l <"$work/rt") calls between files, no circle"
pass "layers"
