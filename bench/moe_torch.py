#!/usr/bin/python3
"""bench/moe_torch.py: bench/moe.gsl's forward MoE layer in PyTorch (CPU).

GShard's top-2 mixture of experts (SPEC section 6; Algorithms 1 and 2 of the
paper), three ways (--way), all from the same routes (top2routes, [G, S, E]
tensors only):

  gates    = softmax(x @ wg) over E, in float32 (even under autocast)  [G, S, E]
  e1, e2   = argmax, argmax of the rest (ties: lower index)
  w1, w2   = g1, g2 / (g1 + g2)            (renormalized before any dropping)
  slots    = exclusive cumsum of first choices in token order; second choices
             after all kept first choices of the group; a slot >= C drops the
             choice.  C = ceil(F * K * S / E), K = 2, no random routing (top2gating
             routes randomly when given u: bench/lm_torch.py).
  aux      = E * sum_e mean_s(one_hot(e1))_e * mean_s(gates)_e, mean over groups

  einsum (GShard's pseudo-code, fairseq's and DeepSpeed-MoE's reference
  top2gating): dense one-hot dispatch and combine tensors [G, S, E, C],
    t      = einsum("gsec,gsm->egcm", dispatch, x)
    out    = einsum("egch,ehm->egcm", relu(einsum("egcm,emh->egch", t, wi)), wo)
    y      = einsum("gsec,egcm->gsm", combine, out)
  index (what a careful PyTorch MoE layer does today): every kept choice's
  token copied into its slot (e * G + g) * C + s of an [E * G * C, M] buffer
  (index_select, index_copy), one torch.bmm per weight over [E, G * C, .],
  and the slots' outputs added into their tokens weighted by the gate
  (index_add); no [G, S, E, C] tensor.
  loop (Hugging Face's Mixtral layer): expert by expert over its kept
  tokens alone (index_select, two matmuls, index_add): no empty slot
  computed, where the two above compute every one of the E * C slots.

self_check() asserts at a tiny size (drops, random routing, gradients) that
the three ways compute the same numbers in float32 (to 1e-5 of max |ref|);
bench runs it first.

One intra-op thread (torch.set_num_threads(1)), torch.inference_mode().
Timing:  moe_torch.py --G 4 --S 256 --M 64 --H 256 --E 8 --steps 20 --warmup 3
         [--way einsum|index|loop] [--autocast] [--x FILE.npy]
         prints "ms_per_step X" (mean over --steps steps after --warmup
         steps); x is read from FILE (the batch GSL is given), else drawn;
         the weights are drawn with bench/moe.gsl's stds. --autocast runs
         the steps under torch.autocast("cpu", dtype=torch.bfloat16) (the
         products in bf16, the weights kept in f32), else all is float32.
Check:   moe_torch.py --check DIR [--capacity F]
         reads DIR/{x,wg,wi,wo,y,aux}.npy (y, aux and the weights from GSL)
         and prints "check NAME ERR" lines: max |a - b| / max |ref| of torch's
         y and aux against GSL's in float32, for each way (the index and
         loop ways' named index_y, loop_y, ...), and a "routing" line
         (choices dropped).
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


class Routes:
    """The routes of top-2 gating, per token of [G, S]: experts e1, e2
    (long), slots s1, s2 (long, 0 where dropped), keep1, keep2 (1.0 where
    the choice is kept), combine weights w1, w2 (renormalized over the two
    before any dropping, not yet zeroed where dropped), and aux."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def kept(self):
        return self.keep1.sum() + self.keep2.sum()

    def choices(self):
        """The kept choices, token by token and first choice first: keep
        [G, S, 2] (bool), and each kept choice's token (flat g * S + s) and
        combine weight: what the index and loop ways dispatch by."""
        G, S = self.e1.shape
        keep = torch.stack([self.keep1, self.keep2], -1) > 0
        token = torch.arange(G * S).view(G, S, 1).expand(G, S, 2)[keep]
        return keep, token, torch.stack([self.w1, self.w2], -1)[keep]


def top2routes(logits, C, u=None, bias=None, loads=None):
    """logits [G, S, E] -> Routes. With u [G, S] (uniform in [0, 1)):
    random routing, a second choice is routed only where 2 * w2 > u, and
    one not routed takes no slot. With bias [E] (a routing bias, GSL's
    bias_rate): the experts are chosen by gates + bias, the weights are
    the gates' (DeepSeek-V3's balancing without a loss). Only [G, S, E]
    tensors: every way of dispatch starts from these routes, so they route
    alike to the token. Routes.routed [E]: the choices routed to each
    expert, before capacity (GSL's routing_signals' counts), also appended
    to the list loads where one is given."""
    G, S, E = logits.shape
    gates = F.softmax(logits, dim=-1)
    score = gates if bias is None else gates + bias
    # first choice; torch.argmax returns the first of equal maxima
    idx1 = torch.argmax(score, dim=-1)
    mask1 = F.one_hot(idx1, E).to(gates.dtype)
    # second choice: the best of the rest
    idx2 = torch.argmax(score.masked_fill(mask1.bool(), float("-inf")), dim=-1)
    mask2 = F.one_hot(idx2, E).to(gates.dtype)
    # the two gates, renormalized over the two before any dropping
    g1 = (gates * mask1).sum(dim=-1)
    g2 = (gates * mask2).sum(dim=-1)
    denom = g1 + g2
    w1, w2 = g1 / denom, g2 / denom
    if u is not None:
        mask2 = mask2 * (2 * w2 > u)[..., None].to(gates.dtype)
    routed = (mask1 + mask2).detach().sum(dim=(0, 1))
    if loads is not None:
        loads.append(routed)
    # load-balancing loss from the first choices (before dropping)
    me = gates.mean(dim=1)                      # [G, E]
    ce = mask1.mean(dim=1)                      # [G, E]
    aux = (E * (me * ce).sum(dim=-1)).mean()
    # slots: exclusive cumsum over the group's tokens, first choices first
    loc1 = torch.cumsum(mask1, dim=1) - mask1
    mask1 = mask1 * (loc1 < C)
    loc2 = torch.cumsum(mask2, dim=1) - mask2 + mask1.sum(dim=1, keepdim=True)
    mask2 = mask2 * (loc2 < C)
    return Routes(e1=idx1, e2=idx2, w1=w1, w2=w2, aux=aux, routed=routed,
                  s1=(loc1 * mask1).sum(dim=-1).long(), s2=(loc2 * mask2).sum(dim=-1).long(),
                  keep1=mask1.sum(dim=-1), keep2=mask2.sum(dim=-1))


def top2gating(logits, C, u=None, bias=None, loads=None):
    """logits [G, S, E] -> combine [G, S, E, C] (gate-weighted), dispatch
    [G, S, E, C] (0/1), aux (scalar), number of choices kept (a tensor):
    GShard's dense one-hot form of top2routes (bias and loads its)."""
    E = logits.shape[-1]
    r = top2routes(logits, C, u, bias, loads)
    mask1 = F.one_hot(r.e1, E).to(r.w1.dtype) * r.keep1[..., None]
    mask2 = F.one_hot(r.e2, E).to(r.w1.dtype) * r.keep2[..., None]
    # each kept choice's slot, one-hot over C (0 for dropped choices)
    slot1 = F.one_hot(r.s1, C).to(r.w1.dtype) * r.keep1[..., None]
    slot2 = F.one_hot(r.s2, C).to(r.w1.dtype) * r.keep2[..., None]
    d1 = mask1[..., :, None] * slot1[..., None, :]   # [G, S, E, C]
    d2 = mask2[..., :, None] * slot2[..., None, :]
    combine = r.w1[..., None, None] * d1 + r.w2[..., None, None] * d2
    dispatch = d1 + d2
    return combine, dispatch, r.aux, r.kept()


def gate_logits(x, wg):
    """The router's logits in float32 even under autocast (routing on
    bf16 logits would pick other experts for near ties: careful MoE code
    keeps the router in f32)."""
    with torch.autocast("cpu", enabled=False):
        return torch.einsum("gsm,me->gse", x.float(), wg)


def moe_einsum(x, wg, wi, wo, C, act=torch.relu, u=None, bias=None, loads=None):
    """GShard's dense form: one-hot [G, S, E, C] tensors and four einsums."""
    combine, dispatch, aux, kept = top2gating(gate_logits(x, wg), C, u, bias, loads)
    t = torch.einsum("gsec,gsm->egcm", dispatch, x)
    h = act(torch.einsum("egcm,emh->egch", t, wi))
    out = torch.einsum("egch,ehm->egcm", h, wo)
    y = torch.einsum("gsec,egcm->gsm", combine, out)
    return y, aux, kept


def moe_index(x, wg, wi, wo, C, act=torch.relu, u=None, bias=None, loads=None):
    """Dispatch by index: every kept choice's token copied into its slot of
    an [E * G * C, M] buffer (flat slot (e * G + g) * C + s, the layout of
    [E, G, C, M]; empty slots stay zero, as in the dense form), one bmm per
    weight over [E, G * C, .], and the outputs read back from the slots and
    added into their tokens weighted by the gate (index_add_)."""
    G, S, M = x.shape
    E = wg.shape[1]
    r = top2routes(gate_logits(x, wg), C, u, bias, loads)
    keep, token, weight = r.choices()
    grp = torch.arange(G).view(G, 1)
    slot = torch.stack([(r.e1 * G + grp) * C + r.s1, (r.e2 * G + grp) * C + r.s2], -1)[keep]
    xs = x.reshape(G * S, M)
    t = xs.new_zeros(E * G * C, M).index_copy(0, slot, xs.index_select(0, token))
    h = act(torch.bmm(t.view(E, G * C, M), wi))
    out = torch.bmm(h, wo).view(E * G * C, M)
    y = xs.new_zeros(G * S, M).index_add(0, token, out.index_select(0, slot) * weight[:, None])
    return y.view(G, S, M), r.aux, keep.sum()


def moe_loop(x, wg, wi, wo, C, act=torch.relu, u=None, bias=None, loads=None):
    """Expert by expert over its kept choices alone (the loop of Hugging
    Face's Mixtral layer and of many MoE codes): the kept choices sorted by
    expert, each expert's tokens gathered (index_select), two matmuls on
    them, and the outputs added into their tokens weighted by the gate
    (index_add). The same routes as the other ways (a choice past capacity
    is dropped), but no empty slot is computed: at a capacity factor of 4
    the index way's bmm runs four times the rows that carry a token."""
    G, S, M = x.shape
    E = wg.shape[1]
    r = top2routes(gate_logits(x, wg), C, u, bias, loads)
    keep, token, weight = r.choices()
    expert = torch.stack([r.e1, r.e2], -1)[keep]
    order = torch.argsort(expert, stable=True)
    token, weight = token[order], weight[order]
    xs = x.reshape(G * S, M)
    outs, at = [], 0
    for e, n in enumerate(torch.bincount(expert, minlength=E).tolist()):
        if n:
            t = xs.index_select(0, token[at:at + n])
            outs.append(act(t @ wi[e]) @ wo[e])
            at += n
    y = xs.new_zeros(G * S, M)
    if outs:
        y = y.index_add(0, token, torch.cat(outs) * weight[:, None])
    return y.view(G, S, M), r.aux, keep.sum()


WAYS = {"einsum": moe_einsum, "index": moe_index, "loop": moe_loop}


def moe(x, wg, wi, wo, C, way="einsum", act=torch.relu, u=None, bias=None, loads=None):
    """The layer: y [G, S, M], aux, the number of choices kept (a tensor);
    with bias [E], routed by the gates plus it (top2routes), and with the
    list loads, each call's routed choices per expert appended to it."""
    return WAYS[way](x, wg, wi, wo, C, act, u, bias, loads)


def bias_step(bias, routed, rate):
    """GSL's routing bias step (stdlib/moe.gsl's bias_step), in place:
    each expert's bias moves by rate toward the even load, up where it got
    less than 1/E of the routed choices (counts over the whole batch), down
    where more; in float32, as GSL computes it."""
    E = bias.shape[0]
    load = routed.float() / routed.float().sum()
    even = torch.tensor(1.0, dtype=torch.float32) / E
    bias += torch.tensor(rate, dtype=torch.float32) * ((load < even).float() - (load > even).float())


def precision(autocast):
    """The context of the step: torch.autocast to bfloat16 if autocast
    (--autocast), else none (float32)."""
    if autocast:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    import contextlib
    return contextlib.nullcontext()


def self_check(train=False):
    """The index and loop ways must compute the einsum way's numbers in float32: y and
    aux (and with train, the gradients of every weight) at a tiny size with
    choices dropped and random routing, to 1e-5 of max |ref|; under
    autocast bf16 the same routes and y within 5e-2 (bf16 rounding)."""
    g = torch.Generator().manual_seed(7)
    G, S, M, H, E = 2, 24, 8, 16, 4
    x = torch.randn((G, S, M), generator=g)
    u = torch.rand((G, S), generator=g)
    ws = [torch.randn(s, generator=g) * sd for s, sd in (((M, E), 1.0), ((E, M, H), 0.3), ((E, H, M), 0.3))]
    C = capacity_of(S, E, 1.0)
    res = {}
    for way in WAYS:
        for amp in (False, True):
            w = [t.clone().requires_grad_(train) for t in ws]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                y, aux, kept = moe(x, *w, C, way, torch.relu, u)
            out = [y.float(), aux.float()]
            if train:
                ((y.float() ** 2).mean() + aux).backward()
                out += [t.grad for t in w]
            res[way, amp] = out, int(kept)
    err = lambda a, b: float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
    (ref, k) = res["einsum", False]
    assert 0 < k < 2 * G * S, k
    for way in WAYS:
        got, kw = res[way, False]
        assert kw == k, (way, kw, k)
        bad = [(i, err(a, b)) for i, (a, b) in enumerate(zip(got, ref)) if not err(a, b) < 1e-5]
        assert not bad, "%s and einsum dispatch differ in float32: %s" % (way, bad)
    for way in WAYS:
        (y16, _), k16 = res[way, True][0][:2], res[way, True][1]
        assert k16 == k and err(y16, ref[0]) < 5e-2, (way, k16, err(y16, ref[0]))


def relerr(a, ref):
    import numpy as np
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a.shape != ref.shape or not np.isfinite(a).all() or not np.isfinite(ref).all():
        return float("inf")
    return float(np.max(np.abs(a - ref)) / max(np.max(np.abs(ref)), 1e-30))


def check(d, factor):
    """GSL's y and aux against each way's (the index and loop ways' lines
    named index_* and loop_*), in float32."""
    import numpy as np
    ld = lambda n: np.load(os.path.join(d, n + ".npy"))
    x, wg, wi, wo = (torch.from_numpy(ld(n)) for n in ("x", "wg", "wi", "wo"))
    G, S, M = x.shape
    E = wg.shape[1]
    C = capacity_of(S, E, factor)
    for way in WAYS:
        with torch.inference_mode():
            y, aux, kept = moe(x, wg, wi, wo, C, way)
        assert y.dtype == torch.float32
        pre = "" if way == "einsum" else way + "_"
        if way == "einsum":
            print("routing G=%d S=%d E=%d C=%d: %d of %d choices dropped"
                  % (G, S, E, C, 2 * G * S - int(kept.item()), 2 * G * S))
        print("check %sy %.3g" % (pre, relerr(y.numpy(), ld("y"))))
        print("check %saux %.3g" % (pre, relerr(aux.numpy(), ld("aux"))))


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
    self_check()
    x, wg, wi, wo, _ = inputs(a)
    C = capacity_of(a.S, a.E, a.capacity)
    with torch.inference_mode(), precision(a.autocast):
        for _ in range(a.warmup):
            y, aux, _ = moe(x, wg, wi, wo, C, a.way)
        t = time.perf_counter()
        for _ in range(a.steps):
            y, aux, _ = moe(x, wg, wi, wo, C, a.way)
        t = time.perf_counter() - t
        mm = torch.bmm(x[:1], wi[:1]).dtype       # what the products ran in
    assert mm == (torch.bfloat16 if a.autocast else torch.float32), mm
    print("ms_per_step %.3f" % (1000.0 * t / a.steps))


def arguments(doc):
    """The options both peers take: sizes, steps, the capacity factor."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    for n, v in (("G", 4), ("S", 256), ("M", 64), ("H", 256), ("E", 8), ("steps", 8), ("warmup", 2)):
        p.add_argument("--" + n, type=int, default=v)
    p.add_argument("--capacity", type=float, default=2.0, help="capacity factor F (default 2.0)")
    p.add_argument("--way", choices=sorted(WAYS), default="einsum",
                   help="dispatch: einsum (GShard's one-hot tensors, the default), index or loop")
    p.add_argument("--autocast", action="store_true", help="run the step under torch.autocast bfloat16")
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
