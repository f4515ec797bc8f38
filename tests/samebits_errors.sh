#!/bin/sh
# tests/samebits_errors.sh — gslc --same-bits' errors.
#
# A mesh whose devices cannot hold whole blocks of a summed dimension is
# refused at the sum, which may lie in the stdlib: the error names the
# device counts that would do and the least --same-bits=N under which
# this mesh's would, and a note at each call the sum was inlined through
# leads down to the user's line, as sema's errors do. Each refusal's whole
# text is compared (the stdlib's directory cut from its path), then the
# program is compiled with the N it names, which must then be accepted:
#   - issue 43's: stdlib's cross_entropy on logits of 50 classes split
#     3 ways (10 blocks of 5 at the default 12; --same-bits=50: blocks of
#     one, 17, 17 and 16 a device);
#   - the same sum through a function of the user's, in an iteration of a
#     loop, and of a remat for (a region of its own: the loop's header
#     noted);
#   - a product of the backward pass (a data-parallel gradient over a
#     batch of 50 whose forward sums fit): the forward value's calls;
#   - examples/mlp.gsl on [data = 3] (its batch of 64 in 8 blocks): 32,
#     as gslc.1 says;
#   - a dimension of 4099 (a prime) split 5 ways: no N up to 4096 fits.
# Then --same-bits=0 and --same-bits with --auto-shard: usage errors.
set -u
. "$top_srcdir/tests/lib.sh"

# refused NAME N [FLAGS...]: NAME.gsl (in $work) is refused under
# --same-bits with the text of NAME.want, and compiles under
# --same-bits=N (empty: not tried)
refused() {
  name=$1 n=$2
  shift 2
  if (cd "$work" && "$GSLC" --same-bits "$@" "$name.gsl" -o "$name") >/dev/null 2>"$work/$name.err"; then
    fail "$name compiled under --same-bits"
    return
  fi
  sed 's|^[^ ]*/stdlib/|stdlib/|' "$work/$name.err" >"$work/$name.got"
  diff -u "$work/$name.want" "$work/$name.got" || { fail "$name: the refusal differs"; return; }
  [ -n "$n" ] || { echo "ok: $name: refused under --same-bits"; return; }
  if (cd "$work" && "$GSLC" --same-bits="$n" "$@" "$name.gsl" -o "$name") >/dev/null 2>"$work/$name.err2"; then
    echo "ok: $name: refused under --same-bits, compiled under the --same-bits=$n it names"
  else
    fail "$name under the --same-bits=$n its refusal names: $(cat "$work/$name.err2")"
  fi
}

# the sum the stdlib's line names: log_softmax's, over the classes
cat >"$work/issue.gsl" <<'EOF'
import "nn"

mesh [model = 3]

input logits: f32[8, 50] split(1, model)
input labels: i32[8]

let loss = cross_entropy(logits, labels)
output loss
EOF
cat >"$work/issue.want" <<'EOF'
stdlib/nn.gsl:13:41: error: --same-bits: this sum runs over a dimension of 50 split 3 ways, and 3 devices cannot each hold whole blocks of its 10 blocks of 5 (the most blocks up to 12 that divide 50)
   13 |   return -mean(sum(one_hot(labels, C) * log_softmax(logits, -1), -1))
      |                                         ^~~~~~~~~~~~~~~~~~~~~~~
stdlib/nn.gsl:13:41: note: it is split 1, 2, 5, 10 ways whole; --same-bits=50 cuts it into 50 blocks of 1, whole on 3 devices (up to 17 a device); every other sum is cut by that bound too
   13 |   return -mean(sum(one_hot(labels, C) * log_softmax(logits, -1), -1))
      |                                         ^~~~~~~~~~~~~~~~~~~~~~~
issue.gsl:8:12: note: in the call to 'cross_entropy' here
    8 | let loss = cross_entropy(logits, labels)
      |            ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~
EOF
refused issue 50

cat >"$work/loop.gsl" <<'EOF'
import "nn"

mesh [model = 3]

input logits: f32[8, 50] split(1, model)
input labels: i32[8]

fn head(l, y) {
  return cross_entropy(l, y)
}

let a = 0.0
for i in 0..2 {
  let a = a + head(logits, labels)
}
output a
EOF
cat >"$work/loop.want" <<'EOF'
stdlib/nn.gsl:13:41: error: --same-bits: this sum runs over a dimension of 50 split 3 ways, and 3 devices cannot each hold whole blocks of its 10 blocks of 5 (the most blocks up to 12 that divide 50)
   13 |   return -mean(sum(one_hot(labels, C) * log_softmax(logits, -1), -1))
      |                                         ^~~~~~~~~~~~~~~~~~~~~~~
stdlib/nn.gsl:13:41: note: it is split 1, 2, 5, 10 ways whole; --same-bits=50 cuts it into 50 blocks of 1, whole on 3 devices (up to 17 a device); every other sum is cut by that bound too
   13 |   return -mean(sum(one_hot(labels, C) * log_softmax(logits, -1), -1))
      |                                         ^~~~~~~~~~~~~~~~~~~~~~~
loop.gsl:9:10: note: in the call to 'cross_entropy' here
    9 |   return cross_entropy(l, y)
      |          ^~~~~~~~~~~~~~~~~~~
loop.gsl:14:15: note: in the call to 'head' here, in iteration i = 0
   14 |   let a = a + head(logits, labels)
      |               ^~~~~~~~~~~~~~~~~~~~
EOF
refused loop 50

sed 's/^for i in/remat for j in/' "$work/loop.gsl" >"$work/remat.gsl"
cat >"$work/remat.want" <<'EOF'
stdlib/nn.gsl:13:41: error: --same-bits: this sum runs over a dimension of 50 split 3 ways, and 3 devices cannot each hold whole blocks of its 10 blocks of 5 (the most blocks up to 12 that divide 50)
   13 |   return -mean(sum(one_hot(labels, C) * log_softmax(logits, -1), -1))
      |                                         ^~~~~~~~~~~~~~~~~~~~~~~
stdlib/nn.gsl:13:41: note: it is split 1, 2, 5, 10 ways whole; --same-bits=50 cuts it into 50 blocks of 1, whole on 3 devices (up to 17 a device); every other sum is cut by that bound too
   13 |   return -mean(sum(one_hot(labels, C) * log_softmax(logits, -1), -1))
      |                                         ^~~~~~~~~~~~~~~~~~~~~~~
remat.gsl:9:10: note: in the call to 'cross_entropy' here
    9 |   return cross_entropy(l, y)
      |          ^~~~~~~~~~~~~~~~~~~
remat.gsl:14:15: note: in the call to 'head' here
   14 |   let a = a + head(logits, labels)
      |               ^~~~~~~~~~~~~~~~~~~~
remat.gsl:13:7: note: in iteration j = 0 of the loop here
   13 | remat for j in 0..2 {
      |       ^~~~~~~~~~~~~
EOF
refused remat 50

# the forward sums run over 50 x 48 = 2400 (12 blocks, whole on 3
# devices); the gradient of w over the batch of 50 alone
cat >"$work/backward.gsl" <<'EOF'
import "nn"

mesh [data = 3]

param w: f32[16, 48] = normal(0.1)
input x: f32[50, 16] split(0, data)

fn model(x) {
  return dense(x, w, 0.0)
}

let y = model(x)
train mean(reshape(y, [2400])) with sgd(lr = 0.1)
EOF
cat >"$work/backward.want" <<'EOF'
stdlib/nn.gsl:27:10: error: --same-bits: this product of the backward pass runs over a dimension of 50 split 3 ways, and 3 devices cannot each hold whole blocks of its 10 blocks of 5 (the most blocks up to 12 that divide 50)
   27 |   return x @ w + b
      |          ^~~~~
stdlib/nn.gsl:27:10: note: it is split 1, 2, 5, 10 ways whole; --same-bits=50 cuts it into 50 blocks of 1, whole on 3 devices (up to 17 a device); every other sum is cut by that bound too
   27 |   return x @ w + b
      |          ^~~~~
backward.gsl:9:10: note: in the call to 'dense' here
    9 |   return dense(x, w, 0.0)
      |          ^~~~~~~~~~~~~~~~
backward.gsl:12:9: note: in the call to 'model' here
   12 | let y = model(x)
      |         ^~~~~~~~
EOF
refused backward 50

# examples/mlp.gsl on [data = 3]: its loss's mean over the batch
cp "$top_srcdir/examples/mlp.gsl" "$work/mlp.gsl"
cat >"$work/mlp.want" <<'EOF'
stdlib/nn.gsl:7:10: error: --same-bits: this sum runs over a dimension of 64 split 3 ways, and 3 devices cannot each hold whole blocks of its 8 blocks of 8 (the most blocks up to 12 that divide 64)
    7 |   return mean(d * d)
      |          ^~~~~~~~~~~
stdlib/nn.gsl:7:10: note: it is split 1, 2, 4, 8 ways whole; --same-bits=32 cuts it into 32 blocks of 2, whole on 3 devices (up to 11 a device); every other sum is cut by that bound too
    7 |   return mean(d * d)
      |          ^~~~~~~~~~~
mlp.gsl:44:7: note: in the call to 'mse' here
   44 | train mse(y, tanh(x @ teacher)) with adam(lr = LR)
      |       ^~~~~~~~~~~~~~~~~~~~~~~~~
EOF
refused mlp 32 -D DP=3

cat >"$work/prime.gsl" <<'EOF'
mesh [m = 5]
input z: f32[4099] split(0, m)
let s = sum(z, 0)
output s
EOF
cat >"$work/prime.want" <<'EOF'
prime.gsl:3:9: error: --same-bits: this sum runs over a dimension of 4099 split 5 ways, and 5 devices cannot each hold whole blocks of its 1 blocks of 4099 (the most blocks up to 12 that divide 4099)
    3 | let s = sum(z, 0)
      |         ^~~~~~~~~
prime.gsl:3:9: note: it is split 1 ways whole; no --same-bits=N up to 4096 cuts it into blocks whole on 5 devices
    3 | let s = sum(z, 0)
      |         ^~~~~~~~~
EOF
refused prime ""

# ---- usage errors ----
mlp=$top_srcdir/examples/mlp.gsl
"$GSLC" --same-bits=0 "$mlp" -o "$work/bad" 2>"$work/err0" && fail "--same-bits=0 accepted"
grep -q "gslc: error: --same-bits=N takes a block count from 1 to 4096, got '0'" "$work/err0" ||
  { fail "the error for --same-bits=0:"; cat "$work/err0"; }
"$GSLC" --same-bits --auto-shard "$mlp" -o "$work/bad" 2>"$work/erra" && fail "--same-bits --auto-shard accepted"
grep -q "gslc: error: --same-bits blocks the sums" "$work/erra" || { fail "the error for --auto-shard:"; cat "$work/erra"; }
exit $status
