#!/usr/bin/python3
"""bench/mlp_torch.py: examples/mlp.gsl's forward pass in PyTorch (CPU, float32).

  y = gelu(x @ w1 + b1, approximate='tanh') @ w2 + b2   (x @ w + b as torch.addmm)

One intra-op thread (torch.set_num_threads(1)), torch.inference_mode().
Timing:  mlp_torch.py --B 256 --D 1024 --H 4096 --O 1024 --steps 8 --warmup 2
         prints "ms_per_step X" (mean over --steps steps after --warmup steps).
Check:   mlp_torch.py --check DIR
         reads DIR/{x,w1,b1,w2,b2,y,yref}.npy (y from GSL, yref from
         mlp_numpy.py --check) and prints torch's max relative errors
         (max |a - b| / max |ref|) against yref and GSL's y.
Exits 3 if torch cannot be imported. Run with OPENBLAS_NUM_THREADS=1.
"""
import argparse
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("torch unavailable: %s" % e, file=sys.stderr)
    sys.exit(3)


def mlp(x, w1, b1, w2, b2):
    return torch.addmm(b2, F.gelu(torch.addmm(b1, x, w1), approximate="tanh"), w2)


def relerr(a, ref):
    import numpy as np
    return float(np.max(np.abs(a.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def check(d):
    import numpy as np
    ld = lambda n: np.load(os.path.join(d, n + ".npy"))
    with torch.inference_mode():
        yt = mlp(*(torch.from_numpy(ld(n)) for n in ("x", "w1", "b1", "w2", "b2"))).numpy()
    assert yt.dtype == np.float32
    print("check torch-vs-ref %.3g" % relerr(yt, ld("yref")))
    print("check torch-vs-gsl %.3g" % relerr(yt, ld("y").astype(np.float64)))


def bench(a):
    g = torch.Generator().manual_seed(0)
    f = lambda shape, sd: sd * torch.randn(shape, generator=g, dtype=torch.float32)
    x = f((a.B, a.D), 1.0)
    w1, b1 = f((a.D, a.H), 0.0625), torch.zeros(a.H)
    w2, b2 = f((a.H, a.O), 0.03125), torch.zeros(a.O)
    with torch.inference_mode():
        for _ in range(a.warmup):
            y = mlp(x, w1, b1, w2, b2)
        t = time.perf_counter()
        for _ in range(a.steps):
            y = mlp(x, w1, b1, w2, b2)
        t = time.perf_counter() - t
    assert y.dtype == torch.float32
    print("ms_per_step %.3f" % (1000.0 * t / a.steps))


def main():
    torch.set_num_threads(1)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for n, v in (("B", 256), ("D", 1024), ("H", 4096), ("O", 1024), ("steps", 8), ("warmup", 2)):
        p.add_argument("--" + n, type=int, default=v)
    p.add_argument("--check", metavar="DIR")
    a = p.parse_args()
    check(a.check) if a.check else bench(a)


if __name__ == "__main__":
    sys.exit(main())
