#!/usr/bin/python3
"""bench/moe_torch.py: bench/moe.gsl's forward MoE layer in PyTorch (CPU, float32).

GShard's top-2 mixture of experts (SPEC section 6; Algorithms 1 and 2 of the
paper), written the way PyTorch users write it (GShard, fairseq's and
DeepSpeed-MoE's reference top2gating): dense one-hot dispatch and combine
tensors [G, S, E, C] and einsums.

  gates    = softmax(x @ wg) over E                       [G, S, E]
  e1, e2   = argmax, argmax of the rest (ties: lower index)
  w1, w2   = g1, g2 / (g1 + g2)            (renormalized before any dropping)
  slots    = exclusive cumsum of first choices in token order; second choices
             after all kept first choices of the group; a slot >= C drops the
             choice.  C = ceil(F * K * S / E), K = 2, no random routing (top2gating
             routes randomly when given u: bench/lm_torch.py).
  t        = einsum("gsec,gsm->egcm", dispatch, x)
  out      = einsum("egch,ehm->egcm", relu(einsum("egcm,emh->egch", t, wi)), wo)
  y        = einsum("gsec,egcm->gsm", combine, out)
  aux      = E * sum_e mean_s(one_hot(e1))_e * mean_s(gates)_e, mean over groups

One intra-op thread (torch.set_num_threads(1)), torch.inference_mode().
Timing:  moe_torch.py --G 4 --S 256 --M 64 --H 256 --E 8 --steps 20 --warmup 3
         [--x FILE.npy]  prints "ms_per_step X" (mean over --steps steps after
         --warmup steps); x is read from FILE (the batch GSL is given), else
         drawn; the weights are drawn with bench/moe.gsl's stds.
Check:   moe_torch.py --check DIR [--capacity F]
         reads DIR/{x,wg,wi,wo,y,aux}.npy (y, aux and the weights from GSL)
         and prints "check NAME ERR" lines: max |a - b| / max |ref| of torch's
         y and aux against GSL's, and a "routing" line (choices dropped).
Exits 3 if torch cannot be imported. Run with OPENBLAS_NUM_THREADS=1 (set
here if unset, before torch loads OpenBLAS: two BLAS threads on a 2-core
machine with one intra-op thread are much slower).
"""
import argparse
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("torch unavailable: %s" % e, file=sys.stderr)
    sys.exit(3)


def capacity_of(S, E, factor, k=2):
    return int(math.ceil(factor * k * S / E))


def top2gating(logits, C, u=None):
    """logits [G, S, E] -> combine [G, S, E, C] (gate-weighted), dispatch
    [G, S, E, C] (0/1), aux (scalar), number of choices kept (a tensor).
    With u [G, S] (uniform in [0, 1)): random routing, a second choice is
    routed only where 2 * w2 > u, and one not routed takes no slot."""
    G, S, E = logits.shape
    gates = F.softmax(logits, dim=-1)
    # first choice; torch.argmax returns the first of equal maxima
    idx1 = torch.argmax(gates, dim=-1)
    mask1 = F.one_hot(idx1, E).to(gates.dtype)
    # second choice: the best of the rest
    idx2 = torch.argmax(gates.masked_fill(mask1.bool(), float("-inf")), dim=-1)
    mask2 = F.one_hot(idx2, E).to(gates.dtype)
    # the two gates, renormalized over the two before any dropping
    g1 = (gates * mask1).sum(dim=-1)
    g2 = (gates * mask2).sum(dim=-1)
    denom = g1 + g2
    w1, w2 = g1 / denom, g2 / denom
    if u is not None:
        mask2 = mask2 * (2 * w2 > u)[..., None].to(gates.dtype)
    # load-balancing loss from the first choices (before dropping)
    me = gates.mean(dim=1)                      # [G, E]
    ce = mask1.mean(dim=1)                      # [G, E]
    aux = (E * (me * ce).sum(dim=-1)).mean()
    # slots: exclusive cumsum over the group's tokens, first choices first
    loc1 = torch.cumsum(mask1, dim=1) - mask1
    mask1 = mask1 * (loc1 < C)
    loc2 = torch.cumsum(mask2, dim=1) - mask2 + mask1.sum(dim=1, keepdim=True)
    mask2 = mask2 * (loc2 < C)
    # each kept choice's slot, one-hot over C (0 for dropped choices)
    s1 = (loc1 * mask1).sum(dim=-1).long()      # [G, S]
    s2 = (loc2 * mask2).sum(dim=-1).long()
    k1 = mask1.sum(dim=-1)                      # 1.0 where the choice is kept
    k2 = mask2.sum(dim=-1)
    slot1 = F.one_hot(s1, C).to(gates.dtype) * k1[..., None]
    slot2 = F.one_hot(s2, C).to(gates.dtype) * k2[..., None]
    d1 = mask1[..., :, None] * slot1[..., None, :]   # [G, S, E, C]
    d2 = mask2[..., :, None] * slot2[..., None, :]
    combine = w1[..., None, None] * d1 + w2[..., None, None] * d2
    dispatch = d1 + d2
    return combine, dispatch, aux, mask1.sum() + mask2.sum()


def moe(x, wg, wi, wo, C):
    combine, dispatch, aux, kept = top2gating(torch.einsum("gsm,me->gse", x, wg), C)
    t = torch.einsum("gsec,gsm->egcm", dispatch, x)
    h = torch.relu(torch.einsum("egcm,emh->egch", t, wi))
    out = torch.einsum("egch,ehm->egcm", h, wo)
    y = torch.einsum("gsec,egcm->gsm", combine, out)
    return y, aux, kept


def relerr(a, ref):
    import numpy as np
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a.shape != ref.shape or not np.isfinite(a).all() or not np.isfinite(ref).all():
        return float("inf")
    return float(np.max(np.abs(a - ref)) / max(np.max(np.abs(ref)), 1e-30))


def check(d, factor):
    import numpy as np
    ld = lambda n: np.load(os.path.join(d, n + ".npy"))
    x, wg, wi, wo = (torch.from_numpy(ld(n)) for n in ("x", "wg", "wi", "wo"))
    G, S, M = x.shape
    E = wg.shape[1]
    C = capacity_of(S, E, factor)
    with torch.inference_mode():
        y, aux, kept = moe(x, wg, wi, wo, C)
    assert y.dtype == torch.float32
    print("routing G=%d S=%d E=%d C=%d: %d of %d choices dropped"
          % (G, S, E, C, 2 * G * S - int(kept.item()), 2 * G * S))
    print("check y %.3g" % relerr(y.numpy(), ld("y")))
    print("check aux %.3g" % relerr(aux.numpy(), ld("aux")))


def inputs(a):
    """The batch (a.x's file, else a normal draw) and the layer's weights,
    drawn as bench/moe.gsl declares them; also the generator, for more."""
    g = torch.Generator().manual_seed(0)
    f = lambda shape, sd: sd * torch.randn(shape, generator=g, dtype=torch.float32)
    if a.x:
        import numpy as np
        x = torch.from_numpy(np.load(a.x))
        assert tuple(x.shape) == (a.G, a.S, a.M) and x.dtype == torch.float32, x.shape
    else:
        x = f((a.G, a.S, a.M), 1.0)
    wg, wi, wo = f((a.M, a.E), 0.02), f((a.E, a.M, a.H), 0.02), f((a.E, a.H, a.M), 0.02)
    return x, wg, wi, wo, f


def bench(a):
    x, wg, wi, wo, _ = inputs(a)
    C = capacity_of(a.S, a.E, a.capacity)
    with torch.inference_mode():
        for _ in range(a.warmup):
            y, aux, _ = moe(x, wg, wi, wo, C)
        t = time.perf_counter()
        for _ in range(a.steps):
            y, aux, _ = moe(x, wg, wi, wo, C)
        t = time.perf_counter() - t
    assert y.dtype == torch.float32
    print("ms_per_step %.3f" % (1000.0 * t / a.steps))


def arguments(doc):
    """The options both peers take: sizes, steps, the capacity factor."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    for n, v in (("G", 4), ("S", 256), ("M", 64), ("H", 256), ("E", 8), ("steps", 8), ("warmup", 2)):
        p.add_argument("--" + n, type=int, default=v)
    p.add_argument("--capacity", type=float, default=2.0, help="capacity factor F (default 2.0)")
    return p


def main():
    torch.set_num_threads(1)
    p = arguments(__doc__)
    p.add_argument("--x", metavar="FILE", help="x as .npy [G, S, M] float32")
    p.add_argument("--check", metavar="DIR")
    a = p.parse_args()
    check(a.check, a.capacity) if a.check else bench(a)


if __name__ == "__main__":
    sys.exit(main())
