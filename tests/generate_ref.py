"""tests/generate_ref.py — the text a --generate run of tests/generate.sh's
bigram program must write, computed apart from libgslrt from what
man/gslrun.7 (GENERATION) promises: Philox-4x32-10 written out here (and
checked against Random123's known answer), the 53-bit uniform draw of
stream 0xFFFFFFFF at step j, the top-k filter and the softmax in double,
and the window of the last T bytes read at its last position.

The program's logits at position t of a window x are w[x[t]] + p[t] (f32),
so the scores of the next byte depend on the last byte and its position.

usage: generate_ref.py W.npy P.npy PROMPT_FILE N TEMPERATURE TOP_K SEED
writes the N bytes to stdout.
"""
import math
import sys

import numpy as np

MASK = 0xFFFFFFFF


def philox(ctr, key):
    x0, x1, x2, x3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * x0
        p1 = 0xCD9E8D57 * x2
        x0, x1, x2, x3 = ((p1 >> 32) ^ x1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ x3 ^ k1) & MASK, p0 & MASK
        k0 = (k0 + 0x9E3779B9) & MASK
        k1 = (k1 + 0xBB67AE85) & MASK
    return x0, x1, x2, x3


def uniform53(seed, stream, step, i):
    hi = (step >> 32) & MASK
    out = philox((i & MASK, i >> 32, step & MASK, stream ^ hi), (seed & MASK, seed >> 32))
    return ((out[0] >> 5) * 2.0**26 + (out[1] >> 6)) * 2.0**-53


def choose(z, temperature, top_k, u):
    v = len(z)
    z = [float(a) for a in z]
    best = min(range(v), key=lambda i: (-z[i], i))  # the highest score, the lowest token of a tie
    if temperature == 0 or top_k == 1:
        return best
    kept = sorted(sorted(range(v), key=lambda i: (-z[i], i))[:top_k or v])
    weight = [math.exp((z[i] - z[best]) / temperature) for i in kept]
    target, acc = u * sum(weight), 0.0
    for i, wi in zip(kept, weight):
        acc += wi
        if target < acc:
            return i
    return kept[-1]


def main():
    assert philox((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    w, p = np.load(sys.argv[1]), np.load(sys.argv[2])
    prompt = open(sys.argv[3], "rb").read()
    n, temperature, top_k, seed = int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
    t = p.shape[0]
    context, out = list(prompt[-t:]), bytearray()
    for j in range(n):
        pos = len(context) - 1
        z = (w[context[pos]] + p[pos]).astype(np.float32)
        c = choose(z, temperature, top_k, uniform53(seed, 0xFFFFFFFF, j, 0))
        out.append(c)
        context = (context + [c])[-t:]
    sys.stdout.buffer.write(bytes(out))


main()
