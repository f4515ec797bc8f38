#!/bin/sh
# tests/lm_data.sh — scripts/lm_data.py, the language model's data, checked
# from outside: the .npy headers as text, the int32 values through npytool
# and od (never the script's own code) against the bytes of files written
# here, the layout of windows in batches, the held-out split (every 20th
# batch: disjoint from training, the two covering every window of a full
# batch), the counts it prints, identical files from a second run, its
# errors, and, when Debian's fortunes package is installed, the real corpus.
set -u
work=$(mktemp -d "${TMPDIR:-/tmp}/gsltest.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: lm_data: $*"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: lm_data: no python3"; exit 77; }
lm_data="$top_srcdir/scripts/lm_data.py"

# Window k of the known text is "kkk\n" (three digits), so a window's
# values say which window it is. a.txt holds windows 0..19, b.txt 20..40
# and two more bytes: 166 bytes in all.
i=0
while [ $i -le 40 ]; do
  if [ $i -lt 20 ]; then printf '%03d\n' $i >>"$work/a.txt"; else printf '%03d\n' $i >>"$work/b.txt"; fi
  i=$((i + 1))
done
printf 'xy' >>"$work/b.txt"

# With --batch 2 --seq 3: 41 windows of 4 bytes, 20 batches of 2 (window 40
# and "xy" dropped); the streams are windows 0..19 and 20..39, batch j is
# windows j and 20 + j, and batch 19 (windows 19 and 39) is held out.
python3 "$lm_data" --out "$work/o1" --batch 2 --seq 3 --input "$work/a.txt" "$work/b.txt" \
  >"$work/out1" 2>&1 || { cat "$work/out1"; fail "lm_data.py --batch 2 --seq 3 failed"; }
for want in \
    "lm_data: 2 files, 166 bytes: 41 windows of 4 bytes (seq 3 + 1), 20 batches of 2" \
    "lm_data: train 19 batches (38 windows, 152 bytes) -> $work/o1/train.npy [19, 2, 4]" \
    "lm_data: eval 1 batches (2 windows, 8 bytes; every 20th batch) -> $work/o1/eval.npy [1, 2, 4]" \
    "lm_data: dropped the last 6 bytes: 1 whole windows (fewer than a batch) and 2 bytes"; do
  grep -qxF "$want" "$work/out1" || { cat "$work/out1"; fail "the output lacks the line: $want"; }
done

# The header, as text: magic, version 1.0, the dict padded with spaces and a
# newline to 64 bytes; then exactly the data the shape needs.
# header FILE SHAPE
header() {
  magic=$(head -c 8 "$1" | od -An -c | tr -s ' ')
  [ "$magic" = " 223 N U M P Y 001 \\0" ] || fail "$1: magic and version are '$magic'"
  hlen=$(od -An -tu2 --endian=little -j 8 -N 2 "$1" | tr -d ' ')
  [ $(((10 + hlen) % 64)) -eq 0 ] || fail "$1: header of $hlen + 10 bytes is not 64-byte aligned"
  dict="{'descr': '<i4', 'fortran_order': False, 'shape': ($2), }"
  text=$(dd if="$1" bs=1 skip=10 count="$hlen" 2>/dev/null)
  padded=$(printf "%-$((hlen - 1))s" "$dict")
  [ "$text" = "$padded" ] || fail "$1: header is '$text', not '$dict' padded"
  [ "$(dd if="$1" bs=1 skip=$((10 + hlen - 1)) count=1 2>/dev/null | od -An -c | tr -d ' ')" = '\n' ] ||
    fail "$1: the header does not end in a newline"
  n=1
  for d in $(echo "$2" | tr ',' ' '); do n=$((n * d)); done
  size=$(wc -c <"$1")
  [ "$size" -eq $((10 + hlen + 4 * n)) ] || fail "$1: $size bytes, not $((10 + hlen)) + 4 * $n"
}
header "$work/o1/train.npy" "19, 2, 4"
header "$work/o1/eval.npy" "1, 2, 4"

# The values through npytool: dtype and shape, then the first windows by
# hand ("000\n" "020\n", "001\n" "021\n") and the held-out batch ("019\n" "039\n").
"$NPYTOOL" print "$work/o1/train.npy" >"$work/train.txt" || fail "npytool print train.npy failed"
"$NPYTOOL" print "$work/o1/eval.npy" >"$work/eval.txt" || fail "npytool print eval.npy failed"
[ "$(head -n 1 "$work/train.txt")" = "i32 [19, 2, 4]" ] || fail "train.npy is $(head -n 1 "$work/train.txt")"
[ "$(head -n 1 "$work/eval.txt")" = "i32 [1, 2, 4]" ] || fail "eval.npy is $(head -n 1 "$work/eval.txt")"
got=$(sed -n '2,17p' "$work/train.txt" | tr '\n' ' ')
[ "$got" = "48 48 48 10 48 50 48 10 48 48 49 10 48 50 49 10 " ] || fail "train batches 0 and 1 are: $got"
got=$(sed -n '2,$p' "$work/eval.txt" | tr '\n' ' ')
[ "$got" = "48 49 57 10 48 51 57 10 " ] || fail "the eval batch is: $got"
# the same bytes raw: little-endian int32, '0' then three zero bytes
hlen=$(od -An -tu2 --endian=little -j 8 -N 2 "$work/o1/train.npy" | tr -d ' ')
got=$(od -An -tu1 -j $((10 + hlen)) -N 16 "$work/o1/train.npy" | tr -s ' ')
[ "$got" = " 48 0 0 0 48 0 0 0 48 0 0 0 10 0 0 0" ] || fail "train.npy's first bytes are:$got"

# Every window, decoded from its digits, in file order: training is batch
# 0..18 (j, 20 + j each), eval batch 19; disjoint, and together 0..39.
# windows TXT: the window numbers of an npytool print, one per line
windows() {
  sed 1d "$1" | awk '{ v[NR % 4] = $1 }
    NR % 4 == 0 {
      if (v[1] < 48 || v[1] > 57 || v[2] < 48 || v[2] > 57 || v[3] < 48 || v[3] > 57 || v[0] != 10)
        { print "bad window " v[1] " " v[2] " " v[3] " " v[0]; exit 1 }
      print (v[1] - 48) * 100 + (v[2] - 48) * 10 + v[3] - 48 }'
}
windows "$work/train.txt" >"$work/train.ids" || fail "train.npy: $(tail -n 1 "$work/train.ids")"
windows "$work/eval.txt" >"$work/eval.ids" || fail "eval.npy: $(tail -n 1 "$work/eval.ids")"
want=
j=0
while [ $j -lt 19 ]; do want="$want$j $((20 + j)) "; j=$((j + 1)); done
[ "$(tr '\n' ' ' <"$work/train.ids")" = "$want" ] || fail "training windows are: $(tr '\n' ' ' <"$work/train.ids")"
[ "$(tr '\n' ' ' <"$work/eval.ids")" = "19 39 " ] || fail "eval windows are: $(tr '\n' ' ' <"$work/eval.ids")"
LC_ALL=C sort "$work/train.ids" >"$work/train.sorted"
LC_ALL=C sort "$work/eval.ids" >"$work/eval.sorted"
both=$(comm -12 "$work/train.sorted" "$work/eval.sorted" | tr '\n' ' ')
[ -z "$both" ] || fail "windows in both train and eval: $both"
[ -z "$(sort -n "$work/train.ids" | uniq -d)" ] || fail "a training window appears twice"
cat "$work/train.ids" "$work/eval.ids" | sort -n | tr '\n' ' ' >"$work/all"
[ "$(cat "$work/all")" = "$(seq 0 39 | tr '\n' ' ')" ] || fail "train and eval hold windows: $(cat "$work/all")"

# Deterministic: a second run (the files named the other way) gives the
# same bytes, into a new directory and over the first one.
python3 "$lm_data" --out "$work/o2" --batch 2 --seq 3 --input "$work/a.txt" --input "$work/b.txt" \
  >/dev/null 2>"$work/err" || { cat "$work/err"; fail "the second run failed"; }
python3 "$lm_data" --out "$work/o1" --batch 2 --seq 3 --input "$work/a.txt" "$work/b.txt" \
  >/dev/null 2>"$work/err" || { cat "$work/err"; fail "the run over o1 failed"; }
for f in train.npy eval.npy; do
  cmp "$work/o1/$f" "$work/o2/$f" || fail "a second run wrote another $f"
done
[ "$(ls "$work/o1" | tr '\n' ' ')" = "eval.npy train.npy " ] || fail "o1 holds: $(ls -a "$work/o1")"

# Bytes above 127 stay 0..255, and files are read in the order given: one
# stream of 21 windows, the last "\377\200\000\n"; window 19 is held out.
printf '\377\200\000\n' >"$work/c.bin"
python3 "$lm_data" --out "$work/o3" --batch 1 --seq 3 --input "$work/a.txt" "$work/c.bin" \
  >"$work/out3" 2>&1 || { cat "$work/out3"; fail "lm_data.py --batch 1 failed"; }
"$NPYTOOL" print "$work/o3/train.npy" >"$work/train3.txt" || fail "npytool print o3/train.npy failed"
[ "$(head -n 1 "$work/train3.txt")" = "i32 [20, 1, 4]" ] || fail "o3/train.npy is $(head -n 1 "$work/train3.txt")"
got=$(tail -n 8 "$work/train3.txt" | tr '\n' ' ')
[ "$got" = "48 49 56 10 255 128 0 10 " ] || fail "o3's last training batches are: $got"
got=$("$NPYTOOL" print "$work/o3/eval.npy" | tr '\n' ' ')
[ "$got" = "i32 [1, 1, 4] 48 49 57 10 " ] || fail "o3/eval.npy is: $got"

# Errors: too little text for one held-out batch, bad options, a missing
# file; no output written.
python3 "$lm_data" --out "$work/small" --batch 2 --seq 3 --input "$work/a.txt" >"$work/out" 2>&1
[ $? -eq 1 ] || { cat "$work/out"; fail "a corpus of 10 batches did not exit 1"; }
grep -qF "lm_data: error: 80 bytes make 10 batches of 2 windows of 4 bytes; at least 20 are needed" "$work/out" ||
  { cat "$work/out"; fail "the error for a small corpus is wrong"; }
[ ! -e "$work/small" ] || fail "a failed run created its output directory"
for bad in "--batch 0" "--seq -1" "--batch x" "--input"; do
  python3 "$lm_data" --out "$work/bad" $bad >"$work/out" 2>&1
  [ $? -eq 2 ] || { cat "$work/out"; fail "$bad did not exit 2"; }
done
python3 "$lm_data" --out "$work/bad" --input "$work/missing" >"$work/out" 2>&1
[ $? -eq 1 ] || { cat "$work/out"; fail "a missing file did not exit 1"; }
grep -qF "lm_data: error: $work/missing: No such file or directory" "$work/out" ||
  { cat "$work/out"; fail "the error for a missing file is wrong"; }
[ ! -e "$work/bad" ] || fail "a failed run created its output directory"

# The real corpus with the defaults (batch 8, seq 64), when installed: the
# counts from the files' sizes, and the first window equals the first 65
# bytes of the text files concatenated in sorted order.
if dpkg-query -W -f='${Status}' fortunes 2>/dev/null | grep -q "ok installed"; then
  dir=/usr/share/games/fortunes
  dpkg-query -L fortunes fortunes-min | LC_ALL=C sort -u | while read -r f; do
    [ "${f%/*}" = "$dir" ] && [ -f "$f" ] && [ ! -L "$f" ] && [ "${f%.dat}" = "$f" ] && cat "$f"
  done >"$work/corpus"
  bytes=$(wc -c <"$work/corpus")
  steps=$((bytes / 65 / 8))
  held=$((steps / 20))
  (cd "$work" && python3 "$lm_data") >"$work/out" 2>&1 || { cat "$work/out"; fail "lm_data.py on the corpus failed"; }
  grep -qF " $bytes bytes: $((bytes / 65)) windows of 65 bytes (seq 64 + 1), $steps batches of 8" "$work/out" ||
    { cat "$work/out"; fail "the corpus counts are wrong (it has $bytes bytes)"; }
  header "$work/data/fortunes/train.npy" "$((steps - held)), 8, 65"
  header "$work/data/fortunes/eval.npy" "$held, 8, 65"
  got=$("$NPYTOOL" print "$work/data/fortunes/train.npy" | sed -n '2,66p;66q' | tr '\n' ' ')
  want=$(od -An -tu1 -v -N 65 "$work/corpus" | tr -s ' \n' '  ' | sed 's/^ //')
  [ "$got" = "$want" ] || fail "the corpus' first window is: $got, not: $want"
else
  echo "lm_data: Debian's fortunes package is not installed: the real corpus is not checked"
fi
echo "PASS: lm_data"
