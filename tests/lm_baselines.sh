#!/bin/sh
# tests/lm_baselines.sh — scripts/lm_baselines.py's models against values
# worked out by hand, and its compressors against what they must find.
#
# Models: training and held-out data are one window [0, 1, 0, 1, 0] each.
#   unigram: counts over the training bytes n(0) = 3, n(1) = 2, N = 5, so
#     p(0) = 4/261 and p(1) = 3/261; the targets are 1, 0, 1, 0:
#     -(ln(3/261) + ln(4/261)) / 2 = 4.322067 nats/byte.
#   bigram: pairs n(0, 1) = n(1, 0) = 2, n(0) = n(1) = 2, t(0) = t(1) = 1:
#     p(1 | 0) = (2 + 3/261) / 3, p(0 | 1) = (2 + 4/261) / 3, and the
#     targets 1, 0, 1, 0 follow 0, 1, 0, 1:
#     -(ln(p(1 | 0)) + ln(p(0 | 1))) / 2 = 0.398783 nats/byte.
# Compressors: 200 windows of 65 random bytes to train on; held-out text
# that repeats 20 of them costs xz little (under 1 nat a byte: its window
# holds the whole text) and bzip2 less than fresh bytes (under 4: its
# block sorting sees each context twice), and 20 windows of fresh random
# bytes cost both at least 5 (8 ln 2 = 5.545 is incompressible bytes'
# cost).
set -u
. "$top_srcdir/tests/lib.sh"
script="$top_srcdir/scripts/lm_baselines.py"

mkdir "$work/hand" "$work/same" "$work/fresh"
echo 0 1 0 1 0 | "$NPYTOOL" write "$work/hand/train.npy" i32 1,1,5 - &&
  echo 0 1 0 1 0 | "$NPYTOOL" write "$work/hand/eval.npy" i32 1,1,5 - || exit 1
out=$(/usr/bin/python3 "$script" --data "$work/hand") || fail "lm_baselines.py on the hand data"
echo "$out"
echo "$out" | awk '
  /^unigram/ { u = $2 } /^bigram/ { b = $2 }
  END { d = u - 4.322067; e = b - 0.398783; if (d < 0) d = -d; if (e < 0) e = -e
        exit !(d < 1e-4 && e < 1e-4) }' || fail "the models' nats are not the hand-worked 4.322067 and 0.398783"

awk 'BEGIN { srand(7); for (i = 0; i < 200 * 65; i++) print int(rand() * 256) }' >"$work/rand.txt"
"$NPYTOOL" write "$work/same/train.npy" i32 200,1,65 - <"$work/rand.txt" &&
  cp "$work/same/train.npy" "$work/fresh/train.npy" &&
  head -n 1300 "$work/rand.txt" | "$NPYTOOL" write "$work/same/eval.npy" i32 20,1,65 - &&
  awk 'BEGIN { srand(8); for (i = 0; i < 20 * 65; i++) print int(rand() * 256) }' |
  "$NPYTOOL" write "$work/fresh/eval.npy" i32 20,1,65 - || exit 1
same=$(/usr/bin/python3 "$script" --data "$work/same" --json) &&
  fresh=$(/usr/bin/python3 "$script" --data "$work/fresh" --json) || fail "lm_baselines.py on random data"
echo "repeated: $same"
echo "fresh:    $fresh"
for c in "bzip2 -9" "xz -9e"; do
  s=$(echo "$same" | sed "s/.*\"$c\": \([0-9.e+-]*\).*/\1/")
  f=$(echo "$fresh" | sed "s/.*\"$c\": \([0-9.e+-]*\).*/\1/")
  want=$([ "$c" = "xz -9e" ] && echo 1 || echo 4)
  awk -v s="$s" -v f="$f" -v w="$want" 'BEGIN { exit !(s < w && f > 5) }' ||
    fail "$c: repeated text costs $s nats/byte (want < $want), fresh random bytes $f (want > 5)"
done

/usr/bin/python3 "$script" --data "$work/none" 2>"$work/err" && fail "a missing directory was accepted"
grep -q "lm_baselines: error: cannot read" "$work/err" || fail "missing data: $(cat "$work/err")"
[ $status -eq 0 ] && pass "lm_baselines"
exit $status
