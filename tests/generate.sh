#!/bin/sh
# tests/generate.sh — text generation, --generate (runtime/generate.c,
# man/gslrun.7 GENERATION), through small programs whose logits are known
# and through examples/lm.gsl:
#
#   - succ.gsl scores byte b + 1 after byte b (8 against 0; after the last
#     token all scores tie, and the lowest token, 0, wins): with --top-k 1
#     (and with --temperature 0) the text is b + 1, b + 2, ... wrapping
#     to 0, on 1 device and on 2 (the windows split by rows);
#   - pos.gsl scores byte t + 1 at position t: the text shows which
#     position is read (the last of the context, left-aligned) and that the
#     window slides once full: from a prompt of L bytes, L, L + 1, ..., T,
#     then T for ever;
#   - bigram.gsl scores w[x[t]] + p[t] (random params drawn with --seed 3
#     and saved in a checkpoint, w split by columns on 2 devices): from the
#     checkpoint, with --temperature 0.8 --top-k 5 --seed 7 (and a prompt
#     longer than the window) the text is the one tests/generate_ref.py
#     computes from the params, on 1 device and on 2; --seed 8 gives
#     another;
#   - two.gsl scores 0.7, 0 and -10 ...: 2000 bytes with --top-k 2 are 0
#     or 1, with 0 within 4.5 binomial standard deviations of 2000 p, p =
#     e^0.7 / (e^0.7 + 1);
#   - a prompt file of 1 MiB, and the same through a pipe (/dev/stdin):
#     read whole, its last byte continued;
#   - a bad prompt (/dev/zero, a directory, a file or pipe past 64 MiB),
#     bad option values, programs without the convention,
#     no checkpoint to load, NaN scores: one message each, the right exit
#     status, nothing on stdout;
#   - examples/lm.gsl at a tiny size, trained 2 steps on 2 devices with a
#     checkpoint: 12 bytes from it, greedy and sampled, are the same on 1
#     device and on 2, and the checkpoint directory is left as it was.
set -u
. "$top_srcdir/tests/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
cd "$work" || exit 1

# run NAME NP PROG ARGS...: stdout in NAME.out, stderr in NAME.err, status in rc
run() {
  name=$1 np=$2; shift 2
  timeout 120 $MPIEXEC -n "$np" "$@" >"$name.out" 2>"$name.err"
  rc=$?
}
# bytes FILE: its bytes in decimal, one line
bytes() { od -An -v -tu1 "$1" | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }
compile() { # NAME [D]: NAME.gsl for a mesh of D devices into NAME$D, or as it is into NAME1
  if [ $# -gt 1 ]; then set -- "$1" "$2" -D D="$2"; else set -- "$1" 1; fi
  n=$1 d=$2; shift 2
  "$GSLC" "$@" "$n.gsl" -o "$n$d" || fatal "gslc $n.gsl ($*)"
}

cat >succ.gsl <<'GSL'
# the next byte after b is b + 1, by a margin of 8
const D = 1
mesh [d = D]
input tokens: i32[2, 9] split(0)
let x = slice(tokens, 1, 0, 8)
let logits = 8.0 * one_hot(x + 1, 16)
output logits
GSL
cat >pos.gsl <<'GSL'
# the next byte after position t is t + 1, whatever the bytes
input tokens: i32[1, 8]
let t = cast(iota([1, 8], 1), i32)
let logits = 8.0 * one_hot(t + 1, 16) + 0.0 * one_hot(tokens, 16)
output logits
GSL
cat >bigram.gsl <<'GSL'
# w[x[t]] + p[t]: the last byte's row of w and the position's of p
const D = 1
mesh [d = D]
input tokens: i32[2, 7] = uniform(0, 12)
param w: f32[12, 12] shard([_, d]) = normal(1.0)
param p: f32[6, 12] = normal(0.5)
let logits = gather(w, slice(tokens, 1, 0, 6)) + p
output logits, w, p
GSL
cat >two.gsl <<'GSL'
# 0.7 for byte 0, 0 for byte 1, -10 for the others
input tokens: i32[1, 4]
let v = iota([1, 4, 8], 2)
let logits = 0.7 * (v == 0) - 10.0 * (v >= 2) + 0.0 * one_hot(tokens, 8)
output logits
GSL
for p in succ bigram; do compile $p 1; compile $p 2; done
compile pos
compile two

# ---- logits known by construction ----
printf '\003' >p3
for np in 1 2; do
  run succ$np $np ./succ$np --generate 20 --top-k 1 --prompt-file p3
  want="4 5 6 7 8 9 10 11 12 13 14 15 0 1 2 3 4 5 6 7"
  [ $rc -eq 0 ] && [ "$(bytes succ$np.out)" = "$want" ] ||
    fail "succ on $np device(s), --top-k 1: status $rc, bytes '$(bytes succ$np.out)', want '$want'; $(cat succ$np.err)"
  run greedy$np $np ./succ$np --generate 20 --temperature 0 --top-k 9 --prompt-file p3
  cmp -s greedy$np.out succ$np.out || fail "succ on $np device(s): --temperature 0 is not the argmax"
done
[ $status -eq 0 ] && pass "succ: 20 bytes b + 1 after b (ties to the lowest token) with --top-k 1 and --temperature 0, 1 and 2 devices"

run pos 1 ./pos1 --generate 10 --top-k 1 --prompt "$(printf '\011\011')"
[ $rc -eq 0 ] && [ "$(bytes pos.out)" = "2 3 4 5 6 7 8 8 8 8" ] ||
  fail "pos: status $rc, bytes '$(bytes pos.out)', want '2 3 4 5 6 7 8 8 8 8' (read at the last of the prompt's 2 bytes, slide at 8); $(cat pos.err)"
printf '\001\001\001\001\001\001\001\001\001\001\001' >p11
run pos11 1 ./pos1 --generate 3 --top-k 1 --prompt-file p11
[ $rc -eq 0 ] && [ "$(bytes pos11.out)" = "8 8 8" ] || fail "pos: a prompt of 11 bytes gives '$(bytes pos11.out)', not '8 8 8'"
[ $status -eq 0 ] && pass "pos: the last position of a left-aligned window is read, and the window slides once full"
# a long prompt is read whole (every byte checked) and its tail used; so
# is a pipe (the program run without mpiexec: hydra's forwarding of stdin
# ends in SIGPIPE past some hundred KiB, whatever the rank reads)
{ head -c 1048576 /dev/zero; printf '\005\003'; } >long
run long 1 ./succ1 --generate 4 --top-k 1 --prompt-file long
[ $rc -eq 0 ] && [ "$(bytes long.out)" = "4 5 6 7" ] || fail "a 1 MiB prompt ending in 3: status $rc, bytes '$(bytes long.out)', want '4 5 6 7'; $(cat long.err)"
rc=0
cat long | timeout 120 ./succ1 --generate 4 --top-k 1 --prompt-file /dev/stdin >pipe.out 2>pipe.err || rc=$?
[ $rc -eq 0 ] && [ "$(bytes pipe.out)" = "4 5 6 7" ] || fail "the same prompt through a pipe: status $rc, bytes '$(bytes pipe.out)'; $(cat pipe.err)"
[ $status -eq 0 ] && pass "a prompt file of 1 MiB, and the same through a pipe: its last byte read"

# ---- sampling: the same text on 1 and 2 devices, and the reference's ----
if "$PY" -c 'import numpy' 2>/dev/null; then
  # params drawn with --seed 3, kept in a checkpoint; the sampling's seeds are 7 and 8
  run params 1 ./bigram1 --seed 3 --output w=w.npy --output p=p.npy --checkpoint ckb
  [ $rc -eq 0 ] || fail "bigram: writing its params: $(cat params.err)"
  printf '\001\002\003\004\005\006\007\010\011\012\013\000\005' >p13
  "$PY" "$top_srcdir/tests/generate_ref.py" w.npy p.npy p13 64 0.8 5 7 >ref7 || fail "generate_ref.py"
  for np in 1 2; do
    run big$np $np ./bigram$np --checkpoint ckb --seed 7 --generate 64 --temperature 0.8 --top-k 5 --prompt-file p13
    [ $rc -eq 0 ] || fail "bigram on $np device(s): status $rc: $(cat big$np.err)"
    cmp -s big$np.out ref7 || fail "bigram on $np device(s): '$(bytes big$np.out)' against the reference's '$(bytes ref7)'"
  done
  run big8 2 ./bigram2 --checkpoint ckb --seed 8 --generate 64 --temperature 0.8 --top-k 5 --prompt-file p13
  cmp -s big8.out big2.out && fail "bigram: seeds 7 and 8 give the same 64 bytes"
  [ "$(wc -c <big1.out)" -eq 64 ] || fail "bigram: $(wc -c <big1.out) bytes, not 64"
  [ $status -eq 0 ] && pass "bigram: temperature 0.8, top-k 5: the reference's text; the same on 1 and 2 devices; another seed, another text"
else
  echo "SKIP: bigram against the reference (no numpy for $PY)"
fi

run two 1 ./two1 --generate 2000 --top-k 2 --prompt "$(printf '\001')" --seed 11
if [ $rc -ne 0 ]; then
  fail "two: status $rc: $(cat two.err)"
else
  od -An -v -tu1 two.out | awk '{ for (i = 1; i <= NF; i++) { n++; if ($i == 0) z++; else if ($i != 1) bad++ } }
    END { p = exp(0.7) / (exp(0.7) + 1); sd = sqrt(n * p * (1 - p))
          d = z - n * p; if (d < 0) d = -d
          printf "two: %d bytes, %d zeros (2000 p = %.1f, sd %.1f), %d neither 0 nor 1\n", n, z, n * p, sd, bad
          exit !(n == 2000 && !bad && d <= 4.5 * sd) }' || fail "two: the counts are not those of the softmax"
  [ $status -eq 0 ] && pass "two: 2000 samples follow the softmax of the top 2"
fi

# ---- errors: one message, the exit status, no text ----
cat >nologits.gsl <<'GSL'
input tokens: i32[2, 5]
let scores = one_hot(tokens, 16)
output scores
GSL
cat >flat.gsl <<'GSL'
input tokens: i32[2, 5]
let logits = sum(one_hot(tokens, 16), 1)
output logits
GSL
cat >twoin.gsl <<'GSL'
input tokens: i32[2, 5]
input other: i32[2, 5] = zeros()
let logits = one_hot(tokens + other, 16)
output logits
GSL
cat >small.gsl <<'GSL'
input tokens: i32[2, 5]
param emb: f32[8, 16] = normal(1.0)
let logits = gather(emb, tokens)
output logits
GSL
cat >nan.gsl <<'GSL'
input tokens: i32[1, 4]
let logits = sqrt(one_hot(tokens, 16) - 2.0)
output logits
GSL
for p in nologits flat twoin small nan; do compile $p; done
: >empty
mkdir nock
expect() { # NAME STATUS TEXT PROG ARGS...: one error naming TEXT, exit STATUS, no stdout
  name=$1 want=$2 text=$3; shift 3
  run "$name" 1 "$@"
  n=$(grep -c 'error:' "$name.err")
  if [ $rc -ne "$want" ] || [ "$n" -ne 1 ] || ! grep -qF -- "$text" "$name.err" || [ -s "$name.out" ]; then
    fail "$name: status $rc (want $want), $n error line(s), stdout $(wc -c <"$name.out") bytes; want '$text' in: $(cat "$name.err")"
  fi
}
expect e_empty 2 "--prompt is empty" ./succ1 --generate 3 --prompt ""
expect e_emptyf 2 "--prompt-file empty is empty" ./succ1 --generate 3 --prompt-file empty
expect e_byte 2 "--prompt: byte 97 ('a', 0x61) at offset 1 is not a token of this program, whose logits score tokens 0 to 15" \
  ./succ1 --generate 3 --prompt "$(printf '\001a')"
expect e_topk0 2 "invalid value '0' for --top-k" ./succ1 --generate 3 --prompt-file p3 --top-k 0
expect e_topk 2 "--top-k 17: the program has only V = 16 tokens" ./succ1 --generate 3 --prompt-file p3 --top-k 17
expect e_temp 2 "invalid value '-1' for --temperature (expected 0 or a number from 1e-6 to 1e6)" ./succ1 --generate 3 --prompt-file p3 --temperature -1
# too large, and too small to be a double but not 0: out of the range, not "negative"
expect e_thuge 2 "invalid value '1e308' for --temperature (expected 0 or a number from 1e-6 to 1e6)" ./succ1 --generate 3 --prompt-file p3 --temperature 1e308
expect e_ttiny 2 "invalid value '1e-320' for --temperature (expected 0 or a number from 1e-6 to 1e6)" ./succ1 --generate 3 --prompt-file p3 --temperature 1e-320
expect e_tnan 2 "invalid value 'nan' for --temperature" ./succ1 --generate 3 --prompt-file p3 --temperature nan
expect e_gen0 2 "invalid value '0' for --generate" ./succ1 --generate 0 --prompt-file p3
expect e_nogen 2 "--prompt needs --generate N" ./succ1 --prompt x
expect e_noprompt 2 "--generate needs a prompt: --prompt TEXT or --prompt-file FILE" ./succ1 --generate 3
expect e_twoprompts 2 "--prompt and --prompt-file are two prompts" ./succ1 --generate 3 --prompt x --prompt-file p3
expect e_steps 2 "--steps does not go with --generate" ./succ1 --generate 3 --prompt-file p3 --steps 2
expect e_input 2 "--input does not go with --generate" ./succ1 --generate 3 --prompt-file p3 --input tokens=p3
expect e_nologits 2 "the program has no output named logits" ./nologits1 --generate 3 --prompt-file p3
expect e_flat 2 "output logits is f32[2, 16], not f32[B, T, V]" ./flat1 --generate 3 --prompt-file p3
expect e_twoin 2 "the program has 2 i32 inputs (tokens, other)" ./twoin1 --generate 3 --prompt-file p3
expect e_small 2 "input tokens indexes the gather at small.gsl:3:14, a table of 8 rows, but output logits scores V = 16 tokens" \
  ./small1 --generate 3 --prompt-file p3
expect e_nock 1 "--generate: --checkpoint nock holds no checkpoint to generate from" ./succ1 --generate 3 --prompt-file p3 --checkpoint nock
expect e_nodir 1 "--checkpoint missing: cannot open missing" ./succ1 --generate 3 --prompt-file p3 --checkpoint missing
expect e_nofile 1 "--prompt-file missing: cannot open it" ./succ1 --generate 3 --prompt-file missing
expect e_nan 1 "generating byte 1: logits[0, 0, :]: the score of token 0 is nan" ./nan1 --generate 3 --prompt-file p3
# a prompt file that never ends, or is too long, or is not a file: refused, not read forever
expect e_zero 2 "--prompt-file /dev/zero: it is a character device, not a regular file or a FIFO (refusing to read it)" \
  ./succ1 --generate 3 --prompt-file /dev/zero
mkdir pdir
expect e_pdir 2 "--prompt-file pdir: it is a directory, not a regular file or a FIFO" ./succ1 --generate 3 --prompt-file pdir
truncate -s 67108865 big # 64 MiB and one byte, every one a token (0): refused by its size, unread
expect e_big 2 "--prompt-file big: it is 67108865 bytes, more than a prompt may be (64 MiB; its last bytes are what generation reads: give those)" \
  ./succ1 --generate 3 --prompt-file big
name=e_pipe; rc=0
head -c 67108865 /dev/zero | timeout 120 ./succ1 --generate 3 --prompt-file /dev/stdin >$name.out 2>$name.err || rc=$?
grep -qF -- "--prompt-file /dev/stdin: more than 64 MiB, more than a prompt may be" $name.err && [ $rc -eq 2 ] && [ ! -s $name.out ] ||
  fail "$name: 64 MiB and a byte through a pipe: status $rc: $(cat $name.err)"
[ -e missing ] && fail "--generate made the --checkpoint directory"
[ $status -eq 0 ] && pass "errors: a bad prompt, option or program, no checkpoint, NaN scores: one message each, status 2 or 1"

# ---- examples/lm.gsl: train, checkpoint, generate on 1 and 2 devices ----
sizes="-D B=4 -D T=8 -D M=16 -D NH=2 -D H=32 -D E=4 -O1"
# shellcheck disable=SC2086
"$GSLC" $sizes -D DATA=1 -D EXPERT=1 "$top_srcdir/examples/lm.gsl" -o lm1 &&
  "$GSLC" $sizes -D DATA=1 -D EXPERT=2 "$top_srcdir/examples/lm.gsl" -o lm2 || { fail "examples/lm.gsl does not compile"; exit 1; }
awk 'BEGIN { x = 5; for (i = 0; i < 2 * 36; i++) { x = (1103515245 * x + 12345) % 2147483648; printf "%d ", int(x / 65536) % 256 } }' |
  "$NPYTOOL" write windows.npy i32 2,4,9 - || { fail "cannot write windows.npy"; exit 1; }
run train 2 ./lm2 --steps 2 --quiet --input tokens=windows.npy --checkpoint ck
[ $rc -eq 0 ] || { fail "training examples/lm.gsl: $(cat train.err)"; exit 1; }
ls -lAR --time-style=full-iso ck >ck.before
for np in 1 2; do
  run lmg$np $np ./lm$np --checkpoint ck --generate 12 --top-k 1 --prompt "The "
  [ $rc -eq 0 ] && [ "$(wc -c <lmg$np.out)" -eq 12 ] || fail "lm on $np device(s), --top-k 1: status $rc, $(wc -c <lmg$np.out) bytes: $(cat lmg$np.err)"
  grep -q "generating from checkpoint ck/step-00000002" lmg$np.err || fail "lm on $np device(s): no note of the checkpoint in: $(cat lmg$np.err)"
  run lms$np $np ./lm$np --checkpoint ck --resume --generate 12 --temperature 0.9 --top-k 40 --seed 5 --prompt "The " --quiet
  [ $rc -eq 0 ] && [ "$(wc -c <lms$np.out)" -eq 12 ] && [ ! -s lms$np.err ] ||
    fail "lm on $np device(s), sampled: status $rc, $(wc -c <lms$np.out) bytes, stderr: $(cat lms$np.err)"
done
cmp -s lmg1.out lmg2.out || fail "lm, --top-k 1: '$(bytes lmg1.out)' on 1 device, '$(bytes lmg2.out)' on 2"
cmp -s lms1.out lms2.out || fail "lm, sampled: '$(bytes lms1.out)' on 1 device, '$(bytes lms2.out)' on 2"
ls -lAR --time-style=full-iso ck | cmp -s - ck.before || fail "generation changed the checkpoint directory"
[ $status -eq 0 ] && pass "examples/lm.gsl: 12 bytes from a checkpoint, greedy and sampled, the same on 1 and 2 devices"
exit $status
