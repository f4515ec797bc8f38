#!/usr/bin/python3
"""bench/mlp_numpy.py: examples/mlp.gsl's forward pass in numpy (float32).

  y = gelu_tanh(x @ w1 + b1) @ w2 + b2

Timing:  mlp_numpy.py --B 256 --D 1024 --H 4096 --O 1024 --steps 8 --warmup 2
         prints "ms_per_step X" (mean over --steps steps after --warmup steps).
Check:   mlp_numpy.py --check DIR
         reads DIR/{x,w1,b1,w2,b2,y}.npy (y is GSL's), writes DIR/yref.npy (the
         same computation in float64) and prints the max relative errors
         (max |a - b| / max |ref|) of GSL and numpy against it and each other.
Run with OPENBLAS_NUM_THREADS=1 for a single-core comparison.
"""
import argparse
import os
import sys
import time

import numpy as np

C = np.sqrt(2.0 / np.pi)


def gelu(h):
    # the tanh approximation, as PyTorch's gelu(approximate='tanh')
    return 0.5 * h * (1.0 + np.tanh(h.dtype.type(C) * (h + h.dtype.type(0.044715) * (h * h * h))))


def mlp(x, w1, b1, w2, b2):
    h = x @ w1
    h += b1
    y = gelu(h) @ w2
    y += b2
    return y


def relerr(a, ref):
    a = a.astype(np.float64)
    return float(np.max(np.abs(a - ref)) / max(np.max(np.abs(ref)), 1e-30))


def check(d):
    ld = lambda n: np.load(os.path.join(d, n + ".npy"))
    x, w1, b1, w2, b2, yg = (ld(n) for n in ("x", "w1", "b1", "w2", "b2", "y"))
    ref = mlp(*(a.astype(np.float64) for a in (x, w1, b1, w2, b2)))
    np.save(os.path.join(d, "yref.npy"), ref)
    yn = mlp(x, w1, b1, w2, b2)
    assert yn.dtype == np.float32 and yg.shape == yn.shape, (yg.dtype, yg.shape, yn.shape)
    print("check gsl-vs-ref %.3g" % relerr(yg, ref))
    print("check numpy-vs-ref %.3g" % relerr(yn, ref))
    print("check numpy-vs-gsl %.3g" % relerr(yn, yg.astype(np.float64)))


def bench(a):
    rng = np.random.default_rng(0)
    f = lambda shape, sd: (sd * rng.standard_normal(shape)).astype(np.float32)
    x = f((a.B, a.D), 1.0)
    w1, b1 = f((a.D, a.H), 0.0625), np.zeros(a.H, np.float32)
    w2, b2 = f((a.H, a.O), 0.03125), np.zeros(a.O, np.float32)
    for _ in range(a.warmup):
        y = mlp(x, w1, b1, w2, b2)
    t = time.perf_counter()
    for _ in range(a.steps):
        y = mlp(x, w1, b1, w2, b2)
    t = time.perf_counter() - t
    assert y.dtype == np.float32
    print("ms_per_step %.3f" % (1000.0 * t / a.steps))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for n, v in (("B", 256), ("D", 1024), ("H", 4096), ("O", 1024), ("steps", 8), ("warmup", 2)):
        p.add_argument("--" + n, type=int, default=v)
    p.add_argument("--check", metavar="DIR")
    a = p.parse_args()
    check(a.check) if a.check else bench(a)


if __name__ == "__main__":
    sys.exit(main())
