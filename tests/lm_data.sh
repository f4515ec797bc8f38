#!/bin/sh
# tests/lm_data.sh — scripts/lm_data.py, the language model's data, checked
# from outside. The fortunes-only method (--input, --fortunes): the .npy
# headers as text, the int32 values through npytool and od (never the
# script's own code) against the bytes of files written here, the layout
# of windows in batches, the held-out split (every 20th batch: disjoint
# from training, the two covering every window of a full batch), the
# counts it prints, identical files from a second run, its errors, the
# real fortunes when installed, and the same files and lines as the
# script of the base commit f8ce876 when the git history is at hand.
# The corpus (the default): a missing package named; on a small tree laid
# out as the packages install (a few of their real files, gcide's real
# dictzip file with an index written here naming a few entries, and
# planted duplicates, a translation, a fortune's .dat and .u8 link), the
# counts it prints, the two files' byte streams against streams built
# here from the tree by the method of its header (numpy reads the files),
# no held-out window among the training windows, and identical files
# from a second run.
set -u
. "$top_srcdir/tests/lib.sh"
command -v python3 >/dev/null 2>&1 || skip "lm_data: no python3"
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
  >"$work/out1" 2>&1 || { cat "$work/out1"; fatal "lm_data.py --batch 2 --seq 3 failed"; }
for want in \
    "lm_data: 2 files, 166 bytes: 41 windows of 4 bytes (seq 3 + 1), 20 batches of 2" \
    "lm_data: train 19 batches (38 windows, 152 bytes) -> $work/o1/train.npy [19, 2, 4]" \
    "lm_data: eval 1 batches (2 windows, 8 bytes; every 20th batch) -> $work/o1/eval.npy [1, 2, 4]" \
    "lm_data: dropped the last 6 bytes: 1 whole windows (fewer than a batch) and 2 bytes"; do
  grep -qxF "$want" "$work/out1" || { cat "$work/out1"; fatal "the output lacks the line: $want"; }
done

# The header, as text: magic, version 1.0, the dict padded with spaces and a
# newline to 64 bytes; then exactly the data the shape needs.
# header FILE SHAPE
header() {
  magic=$(head -c 8 "$1" | od -An -c | tr -s ' ')
  [ "$magic" = " 223 N U M P Y 001 \\0" ] || fatal "$1: magic and version are '$magic'"
  hlen=$(od -An -tu2 --endian=little -j 8 -N 2 "$1" | tr -d ' ')
  [ $(((10 + hlen) % 64)) -eq 0 ] || fatal "$1: header of $hlen + 10 bytes is not 64-byte aligned"
  dict="{'descr': '<i4', 'fortran_order': False, 'shape': ($2), }"
  text=$(dd if="$1" bs=1 skip=10 count="$hlen" 2>/dev/null)
  padded=$(printf "%-$((hlen - 1))s" "$dict")
  [ "$text" = "$padded" ] || fatal "$1: header is '$text', not '$dict' padded"
  [ "$(dd if="$1" bs=1 skip=$((10 + hlen - 1)) count=1 2>/dev/null | od -An -c | tr -d ' ')" = '\n' ] ||
    fatal "$1: the header does not end in a newline"
  n=1
  for d in $(echo "$2" | tr ',' ' '); do n=$((n * d)); done
  size=$(wc -c <"$1")
  [ "$size" -eq $((10 + hlen + 4 * n)) ] || fatal "$1: $size bytes, not $((10 + hlen)) + 4 * $n"
}
header "$work/o1/train.npy" "19, 2, 4"
header "$work/o1/eval.npy" "1, 2, 4"

# The values through npytool: dtype and shape, then the first windows by
# hand ("000\n" "020\n", "001\n" "021\n") and the held-out batch ("019\n" "039\n").
"$NPYTOOL" print "$work/o1/train.npy" >"$work/train.txt" || fatal "npytool print train.npy failed"
"$NPYTOOL" print "$work/o1/eval.npy" >"$work/eval.txt" || fatal "npytool print eval.npy failed"
[ "$(head -n 1 "$work/train.txt")" = "i32 [19, 2, 4]" ] || fatal "train.npy is $(head -n 1 "$work/train.txt")"
[ "$(head -n 1 "$work/eval.txt")" = "i32 [1, 2, 4]" ] || fatal "eval.npy is $(head -n 1 "$work/eval.txt")"
got=$(sed -n '2,17p' "$work/train.txt" | tr '\n' ' ')
[ "$got" = "48 48 48 10 48 50 48 10 48 48 49 10 48 50 49 10 " ] || fatal "train batches 0 and 1 are: $got"
got=$(sed -n '2,$p' "$work/eval.txt" | tr '\n' ' ')
[ "$got" = "48 49 57 10 48 51 57 10 " ] || fatal "the eval batch is: $got"
# the same bytes raw: little-endian int32, '0' then three zero bytes
hlen=$(od -An -tu2 --endian=little -j 8 -N 2 "$work/o1/train.npy" | tr -d ' ')
got=$(od -An -tu1 -j $((10 + hlen)) -N 16 "$work/o1/train.npy" | tr -s ' ')
[ "$got" = " 48 0 0 0 48 0 0 0 48 0 0 0 10 0 0 0" ] || fatal "train.npy's first bytes are:$got"

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
windows "$work/train.txt" >"$work/train.ids" || fatal "train.npy: $(tail -n 1 "$work/train.ids")"
windows "$work/eval.txt" >"$work/eval.ids" || fatal "eval.npy: $(tail -n 1 "$work/eval.ids")"
want=
j=0
while [ $j -lt 19 ]; do want="$want$j $((20 + j)) "; j=$((j + 1)); done
[ "$(tr '\n' ' ' <"$work/train.ids")" = "$want" ] || fatal "training windows are: $(tr '\n' ' ' <"$work/train.ids")"
[ "$(tr '\n' ' ' <"$work/eval.ids")" = "19 39 " ] || fatal "eval windows are: $(tr '\n' ' ' <"$work/eval.ids")"
LC_ALL=C sort "$work/train.ids" >"$work/train.sorted"
LC_ALL=C sort "$work/eval.ids" >"$work/eval.sorted"
both=$(comm -12 "$work/train.sorted" "$work/eval.sorted" | tr '\n' ' ')
[ -z "$both" ] || fatal "windows in both train and eval: $both"
[ -z "$(sort -n "$work/train.ids" | uniq -d)" ] || fatal "a training window appears twice"
cat "$work/train.ids" "$work/eval.ids" | sort -n | tr '\n' ' ' >"$work/all"
[ "$(cat "$work/all")" = "$(seq 0 39 | tr '\n' ' ')" ] || fatal "train and eval hold windows: $(cat "$work/all")"

# Deterministic: a second run (the files named the other way) gives the
# same bytes, into a new directory and over the first one.
python3 "$lm_data" --out "$work/o2" --batch 2 --seq 3 --input "$work/a.txt" --input "$work/b.txt" \
  >/dev/null 2>"$work/err" || { cat "$work/err"; fatal "the second run failed"; }
python3 "$lm_data" --out "$work/o1" --batch 2 --seq 3 --input "$work/a.txt" "$work/b.txt" \
  >/dev/null 2>"$work/err" || { cat "$work/err"; fatal "the run over o1 failed"; }
for f in train.npy eval.npy; do
  cmp "$work/o1/$f" "$work/o2/$f" || fatal "a second run wrote another $f"
done
[ "$(ls "$work/o1" | tr '\n' ' ')" = "eval.npy train.npy " ] || fatal "o1 holds: $(ls -a "$work/o1")"

# Bytes above 127 stay 0..255, and files are read in the order given: one
# stream of 21 windows, the last "\377\200\000\n"; window 19 is held out.
printf '\377\200\000\n' >"$work/c.bin"
python3 "$lm_data" --out "$work/o3" --batch 1 --seq 3 --input "$work/a.txt" "$work/c.bin" \
  >"$work/out3" 2>&1 || { cat "$work/out3"; fatal "lm_data.py --batch 1 failed"; }
"$NPYTOOL" print "$work/o3/train.npy" >"$work/train3.txt" || fatal "npytool print o3/train.npy failed"
[ "$(head -n 1 "$work/train3.txt")" = "i32 [20, 1, 4]" ] || fatal "o3/train.npy is $(head -n 1 "$work/train3.txt")"
got=$(tail -n 8 "$work/train3.txt" | tr '\n' ' ')
[ "$got" = "48 49 56 10 255 128 0 10 " ] || fatal "o3's last training batches are: $got"
got=$("$NPYTOOL" print "$work/o3/eval.npy" | tr '\n' ' ')
[ "$got" = "i32 [1, 1, 4] 48 49 57 10 " ] || fatal "o3/eval.npy is: $got"

# Errors: too little text for one held-out batch, bad options, a missing
# file; no output written.
python3 "$lm_data" --out "$work/small" --batch 2 --seq 3 --input "$work/a.txt" >"$work/out" 2>&1
[ $? -eq 1 ] || { cat "$work/out"; fatal "a corpus of 10 batches did not exit 1"; }
grep -qF "lm_data: error: 80 bytes make 10 batches of 2 windows of 4 bytes; at least 20 are needed" "$work/out" ||
  { cat "$work/out"; fatal "the error for a small corpus is wrong"; }
[ ! -e "$work/small" ] || fatal "a failed run created its output directory"
for bad in "--batch 0" "--seq -1" "--batch x" "--input"; do
  python3 "$lm_data" --out "$work/bad" $bad >"$work/out" 2>&1
  [ $? -eq 2 ] || { cat "$work/out"; fatal "$bad did not exit 2"; }
done
python3 "$lm_data" --out "$work/bad" --input "$work/missing" >"$work/out" 2>&1
[ $? -eq 1 ] || { cat "$work/out"; fatal "a missing file did not exit 1"; }
grep -qF "lm_data: error: $work/missing: No such file or directory" "$work/out" ||
  { cat "$work/out"; fatal "the error for a missing file is wrong"; }
[ ! -e "$work/bad" ] || fatal "a failed run created its output directory"

# The real fortunes with the defaults (batch 8, seq 64), when installed: the
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
  (cd "$work" && python3 "$lm_data" --fortunes) >"$work/out" 2>&1 ||
    { cat "$work/out"; fatal "lm_data.py --fortunes on the corpus failed"; }
  grep -qF " $bytes bytes: $((bytes / 65)) windows of 65 bytes (seq 64 + 1), $steps batches of 8" "$work/out" ||
    { cat "$work/out"; fatal "the corpus counts are wrong (it has $bytes bytes)"; }
  header "$work/data/fortunes/train.npy" "$((steps - held)), 8, 65"
  header "$work/data/fortunes/eval.npy" "$held, 8, 65"
  got=$("$NPYTOOL" print "$work/data/fortunes/train.npy" | sed -n '2,66p;66q' | tr '\n' ' ')
  want=$(od -An -tu1 -v -N 65 "$work/corpus" | tr -s ' \n' '  ' | sed 's/^ //')
  [ "$got" = "$want" ] || fatal "the corpus' first window is: $got, not: $want"
else
  echo "lm_data: Debian's fortunes package is not installed: the real corpus is not checked"
fi

# --fortunes and --input are the script of the base commit f8ce876 (before
# the corpus): the same files byte for byte and the same lines, on the
# known files and on the real fortunes, when the git history is at hand.
if git -C "$top_srcdir" show f8ce876:scripts/lm_data.py >"$work/base.py" 2>/dev/null; then
  # same NAME FLAG ARGS...: the base script with ARGS and this one with
  # FLAG (if not empty) and ARGS, into base.NAME and new.NAME
  same() {
    name=$1 flag=$2
    shift 2
    python3 "$work/base.py" --out "$work/base.$name" "$@" >"$work/base.$name.out" 2>&1 ||
      { cat "$work/base.$name.out"; fatal "the base script failed ($name)"; }
    python3 "$lm_data" --out "$work/new.$name" ${flag:+"$flag"} "$@" >"$work/new.$name.out" 2>&1 ||
      { cat "$work/new.$name.out"; fatal "lm_data.py failed ($name)"; }
    for f in train.npy eval.npy; do
      cmp "$work/base.$name/$f" "$work/new.$name/$f" || fatal "$name: $f differs from the base commit's"
    done
    sed "s|$work/base.$name|DIR|" "$work/base.$name.out" >"$work/base.$name.txt"
    sed "s|$work/new.$name|DIR|" "$work/new.$name.out" >"$work/new.$name.txt"
    cmp "$work/base.$name.txt" "$work/new.$name.txt" || fatal "$name: the lines differ from the base commit's"
  }
  same input "" --batch 2 --seq 3 --input "$work/a.txt" "$work/b.txt"
  if dpkg-query -W -f='${Status}' fortunes 2>/dev/null | grep -q "ok installed"; then
    same fortunes --fortunes
  fi
else
  echo "lm_data: no git history (f8ce876): --fortunes is not compared with the base commit's script"
fi

# The corpus: a missing package is one error naming it (every one missing),
# exit 1, no output.
mkdir "$work/empty"
python3 "$lm_data" --root "$work/empty" --out "$work/bad" >"$work/out" 2>&1
[ $? -eq 1 ] || { cat "$work/out"; fatal "an empty root did not exit 1"; }
grep -qF "lm_data: error: the corpus needs Debian's python3.11-doc, linux-doc-6.1, dict-gcide, fortunes, fortunes-min, not installed" \
  "$work/out" || { cat "$work/out"; fatal "the error for an empty root is wrong"; }
[ "$(wc -l <"$work/out")" -eq 1 ] || { cat "$work/out"; fatal "an empty root gave more than one line"; }
[ ! -e "$work/bad" ] || fatal "a failed run created its output directory"

# The corpus on a small tree laid out as the packages install, when they
# are (and numpy reads .npy files for the checks).
PY=${PYTHON:-/usr/bin/python3}
installed=yes
for p in python3.11-doc linux-doc-6.1 dict-gcide fortunes fortunes-min; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || installed=$p
done
if [ "$installed" != yes ]; then
  echo "lm_data: Debian's $installed is not installed: the corpus is not checked"
elif ! "$PY" -c 'import numpy' 2>/dev/null; then
  echo "lm_data: no numpy for $PY: the corpus is not checked"
else
  # The tree: for python and linux, the first 2 .rst.txt files under 12 kB
  # whose key is held out and the first 3 that are not, a copy of the
  # first training file at zz-dup/copy.rst.txt (a duplicate) and a file
  # not .rst.txt; for linux a translation (left out). For gcide, the real
  # dictzip file and an index naming 2 held-out entries, 4 training ones,
  # the first two entries of one headword (ordinals 0 and 1), the first
  # pair of entries whose bytes are equal, and a second headword of the
  # first training entry. For fortunes, the smallest files that hold a
  # held-out fortune (2 files at least), a planted file repeating the
  # first fortune (a duplicate) after an empty one, a .dat and a .u8 link.
  # Then the streams the method gives (expect.train, expect.eval) and the
  # counts (expect.counts), computed here from the tree.
  "$PY" - "$work/root" "$work" <<'EOF' || fatal "building the tree failed"
import gzip, hashlib, os, shutil, sys
root, work = sys.argv[1], sys.argv[2]
def held(source, key):
    return int.from_bytes(hashlib.sha256(("%s:%s" % (source, key)).encode()).digest(), "big") % 50 == 0
def rank(source, key):
    return hashlib.sha256(("%s:%s" % (source, key)).encode()).digest()
docs = []  # (source, key, bytes) in the corpus' order
for source, base in (("python", "usr/share/doc/python3.11/html/_sources"),
                     ("linux", "usr/share/doc/linux-doc-6.1/html/_sources")):
    real, tree = "/" + base, os.path.join(root, base)
    files = []
    for d, _, names in os.walk(real):
        files += [os.path.relpath(os.path.join(d, n), real) for n in names if n.endswith(".rst.txt")]
    files = sorted(f for f in files if os.path.getsize(os.path.join(real, f)) < 12000)
    english = [f for f in files if not f.startswith("translations/")]
    pick = [f for f in english if held(source, f)][:2] + [f for f in english if not held(source, f)][:3]
    pick.sort()
    extra = {"zz-dup/copy.rst.txt": [f for f in pick if not held(source, f)][0]}
    if source == "linux":
        extra["translations/" + [f for f in files if f.startswith("translations/")][0][13:]] = None
    for rel in pick + list(extra):
        os.makedirs(os.path.dirname(os.path.join(tree, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(real, extra.get(rel) or rel), os.path.join(tree, rel))
    open(os.path.join(tree, "notes.txt"), "w").write("not a source\n")
    for rel in sorted(pick + ["zz-dup/copy.rst.txt"]):
        docs.append((source, rel, open(os.path.join(tree, rel), "rb").read()))

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
def num(s):
    v = 0
    for c in s:
        v = v * 64 + B64.index(c)
    return v
def b64(v):
    s = ""
    while True:
        s = B64[v % 64] + s
        v //= 64
        if not v:
            return s
text = gzip.open("/usr/share/dictd/gcide.dict.dz").read()
heads = {}  # block -> headwords, in the real index's order
for line in open("/usr/share/dictd/gcide.index", encoding="utf-8"):
    h, o, l = line.rstrip("\n").split("\t")
    heads.setdefault((num(o), num(l)), []).append(h)
blocks = sorted(heads)
by_head = {}
for b in blocks:
    by_head.setdefault(heads[b][0], []).append(b)
single = [b for b in blocks if len(by_head[heads[b][0]]) == 1 and b[1] < 2000 and heads[b][0][0].isalpha()]
pick = ([b for b in single if held("gcide", heads[b][0] + "#0")][:2]
        + [b for b in single if not held("gcide", heads[b][0] + "#0")][:4])
two = next(h for h, bs in by_head.items() if len(bs) > 1 and h[0].isalpha() and max(b[1] for b in bs[:2]) < 2000)
pick += by_head[two][:2]
seen = {}
for b in blocks:
    seen.setdefault(text[b[0]:b[0] + b[1]], []).append(b)
pick += next(bs for bs in seen.values() if len(bs) > 1)[:2]
pick = sorted(set(pick))
index = [(heads[b][0], b) for b in pick] + [("zzsyn", pick[0])]
dictd = os.path.join(root, "usr/share/dictd")
os.makedirs(dictd)
os.symlink("/usr/share/dictd/gcide.dict.dz", os.path.join(dictd, "gcide.dict.dz"))
with open(os.path.join(dictd, "gcide.index"), "w", encoding="utf-8") as f:
    for h, (o, l) in index:
        f.write("%s\t%s\t%s\n" % (h, b64(o), b64(l)))
ordinal = {}
for b in pick:
    h = heads[b][0]
    docs.append(("gcide", "%s#%d" % (h, ordinal.get(h, 0)), text[b[0]:b[0] + b[1]]))
    ordinal[h] = ordinal.get(h, 0) + 1

real = "/usr/share/games/fortunes"
tree = os.path.join(root, "usr/share/games/fortunes")
os.makedirs(tree)
def fortunes(data):
    out, lines = [], []
    for line in data.splitlines(keepends=True) + [b"%"]:
        if line in (b"%\n", b"%"):
            if lines:
                out.append(b"".join(lines))
            lines = []
        else:
            lines.append(line)
    return out
names = [n for n in os.listdir(real) if not n.endswith(".dat") and not os.path.islink(os.path.join(real, n))]
names.sort(key=lambda n: (os.path.getsize(os.path.join(real, n)), n))
pick = []
for n in names:
    fs = fortunes(open(os.path.join(real, n), "rb").read())
    if any(held("fortunes", "%s#%d" % (n, i)) for i in range(len(fs))):
        pick.append(n)
        if len(pick) == 2:
            break
for n in pick:
    shutil.copyfile(os.path.join(real, n), os.path.join(tree, n))
first = fortunes(open(os.path.join(tree, min(pick)), "rb").read())[0]
open(os.path.join(tree, "zz-planted"), "wb").write(b"%\n" + first + b"%\nA planted fortune.\n%\n")
open(os.path.join(tree, "zz-planted.dat"), "wb").write(b"\0\0\0\2binary")
os.symlink("zz-planted", os.path.join(tree, "zz-planted.u8"))
for n in sorted(pick + ["zz-planted"]):
    for i, f in enumerate(fortunes(open(os.path.join(tree, n), "rb").read())):
        docs.append(("fortunes", "%s#%d" % (n, i), f))

kept, counts, sides = set(), {}, ([], [])
for source, key, d in docs:
    c = counts.setdefault(source, [0] * 8)
    c[0] += 1
    c[1] += len(d)
    if d in kept:
        c[2] += 1
        c[3] += len(d)
        continue
    kept.add(d)
    h = held(source, key)
    sides[h].append((rank(source, key), d))
    c[4 if h else 6] += 1
    c[5 if h else 7] += len(d)
with open(os.path.join(work, "expect.counts"), "w") as f:
    for source in ("python", "linux", "gcide", "fortunes"):
        assert counts[source][4] > 0 and counts[source][2] > 0, (source, counts[source])
        f.write("%s %s\n" % (source, " ".join(str(v) for v in counts[source])))
    f.write("total %s\n" % " ".join(str(sum(c[i] for c in counts.values())) for i in range(8)))
for name, side in (("train", sides[0]), ("eval", sides[1])):
    open(os.path.join(work, "expect." + name), "wb").write(b"".join(d + b"\0" for _, d in sorted(side)))
EOF
  python3 "$lm_data" --root "$work/root" --out "$work/c1" --batch 2 --seq 64 >"$work/cout" 2>&1 ||
    { cat "$work/cout"; fatal "lm_data.py --root failed"; }
  # the counts: per source documents and bytes read, duplicates, held out, training
  sed -n 's/^lm_data: \(python\|linux\|gcide\|fortunes\|total\) /\1 /p' "$work/cout" | tr -s ' ' >"$work/got.counts"
  cmp "$work/expect.counts" "$work/got.counts" ||
    { cat "$work/cout"; cat "$work/expect.counts"; fatal "the counts are not the tree's"; }
  # the streams: row b of batch j is window b*T + j, so the rows taken
  # stream by stream are the text; each file is the start of its stream,
  # whole windows of whole batches; no held-out window is a training window
  "$PY" - "$work" <<'EOF' || { cat "$work/cout"; fatal "the corpus' files are not the tree's streams"; }
import os, sys, numpy as np
work = sys.argv[1]
windows = {}
for name in ("train", "eval"):
    path = "%s/c1/%s.npy" % (work, name)
    if name == "eval" and os.path.exists("%s/c1/eval_all.npy" % work):
        path = "%s/c1/eval_all.npy" % work  # more than --eval-batches' 200: every batch there
    a = np.load(path)
    want = open("%s/expect.%s" % (work, name), "rb").read()
    assert a.dtype == np.dtype("<i4") and a.ndim == 3 and a.shape[1:] == (2, 65), (name, a.dtype, a.shape)
    assert a.shape[0] == len(want) // 65 // 2 > 0, (name, a.shape, len(want))
    assert a.min() >= 0 and a.max() <= 255, name
    got = a.astype(np.uint8).transpose(1, 0, 2).tobytes()
    assert got == want[:len(got)], "%s: the stream differs at byte %d" % (
        name, next(i for i in range(len(got)) if got[i] != want[i]))
    w = np.ascontiguousarray(a.reshape(-1, 65).astype(np.uint8))
    windows[name] = w.view(np.dtype((np.void, 65))).ravel()
both = np.isin(windows["eval"], windows["train"]).sum()
assert both == 0, "%d held-out windows are training windows" % both
print("lm_data: the corpus' sample: %d training and %d held-out windows, none in both"
      % (len(windows["train"]), len(windows["eval"])))
EOF
  # a second run, into a new directory and over the first
  python3 "$lm_data" --root "$work/root" --out "$work/c2" --batch 2 --seq 64 >/dev/null 2>&1 ||
    fatal "the second run on the tree failed"
  python3 "$lm_data" --root "$work/root" --out "$work/c1" --batch 2 --seq 64 >/dev/null 2>&1 ||
    fatal "the run over c1 failed"
  for f in train.npy eval.npy; do
    cmp "$work/c1/$f" "$work/c2/$f" || fatal "a second run on the tree wrote another $f"
  done
  [ ! -e "$work/c1/eval_all.npy" ] || cmp "$work/c1/eval_all.npy" "$work/c2/eval_all.npy" ||
    fatal "a second run on the tree wrote another eval_all.npy"
  ls "$work/c1" | grep -qvx 'eval.npy\|train.npy\|eval_all.npy' && fatal "c1 holds: $(ls -a "$work/c1")"
  # --eval-batches N: eval.npy holds N of the held-out batches, evenly
  # spaced (batch i * n // N of n), and eval_all.npy every one, as c1's
  # eval.npy (or eval_all.npy) holds them; fewer than N: eval.npy alone
  python3 "$lm_data" --root "$work/root" --out "$work/c3" --batch 2 --seq 64 --eval-batches 7 >"$work/c3out" 2>&1 ||
    { cat "$work/c3out"; fatal "lm_data.py --eval-batches 7 failed"; }
  python3 "$lm_data" --root "$work/root" --out "$work/c4" --batch 2 --seq 64 --eval-batches 100000 >/dev/null 2>&1 ||
    fatal "lm_data.py --eval-batches 100000 failed"
  "$PY" - "$work" <<'EOF' || { cat "$work/c3out"; fatal "--eval-batches: the subset is not the evenly spaced batches"; }
import os, sys, numpy as np
work = sys.argv[1]
every = np.load("%s/c3/eval_all.npy" % work)
first = "%s/c1/eval_all.npy" % work
first = first if os.path.exists(first) else "%s/c1/eval.npy" % work
assert np.array_equal(every, np.load(first)), "eval_all.npy is not c1's held-out batches"
n = len(every)
assert n > 7, "the tree's held-out text makes %d batches, too few to check a subset of 7" % n
sub = np.load("%s/c3/eval.npy" % work)
assert np.array_equal(sub, every[[i * n // 7 for i in range(7)]]), "eval.npy is not batches i * %d // 7" % n
assert np.array_equal(np.load("%s/c3/train.npy" % work), np.load("%s/c1/train.npy" % work))
assert sorted(os.listdir("%s/c4" % work)) == ["eval.npy", "train.npy"], os.listdir("%s/c4" % work)
assert np.array_equal(np.load("%s/c4/eval.npy" % work), every), "eval.npy of --eval-batches 100000 is not every batch"
print("lm_data: --eval-batches 7 of %d held-out batches: batches %s" % (n, [i * n // 7 for i in range(7)]))
EOF
  # without gcide's index, the error names dict-gcide alone
  mv "$work/root/usr/share/dictd/gcide.index" "$work/gcide.index"
  python3 "$lm_data" --root "$work/root" --out "$work/bad" >"$work/out" 2>&1
  [ $? -eq 1 ] || { cat "$work/out"; fatal "a missing gcide.index did not exit 1"; }
  grep -qF "lm_data: error: the corpus needs Debian's dict-gcide, not installed (no $work/root/usr/share/dictd/gcide.dict.dz)" \
    "$work/out" || { cat "$work/out"; fatal "the error for a missing gcide.index is wrong"; }
  [ ! -e "$work/bad" ] || fatal "a failed run created its output directory"
  # --fortunes under a root: the directory's text files, not the .dat nor the link
  python3 "$lm_data" --fortunes --root "$work/root" --out "$work/f1" --batch 1 --seq 3 >"$work/out" 2>&1 ||
    { cat "$work/out"; fatal "lm_data.py --fortunes --root failed"; }
  n=0
  for f in "$work/root/usr/share/games/fortunes/"*; do
    case $f in *.dat|*.u8) ;; *) cat "$f"; n=$((n + 1)) ;; esac
  done >"$work/ftext"
  bytes=$(wc -c <"$work/ftext")
  grep -qF "lm_data: $n files, $bytes bytes:" "$work/out" || { cat "$work/out"; fatal "--fortunes --root read other files"; }
fi
pass "lm_data"
