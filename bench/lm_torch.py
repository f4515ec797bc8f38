#!/usr/bin/python3
"""bench/lm_torch.py: examples/lm.gsl's training step in PyTorch (CPU).

The model is examples/lm.gsl's decoder-only byte-level Transformer with
stdlib/transformer.gsl's blocks, layer for layer:

  x, y     = tokens[:, :T], tokens[:, 1:]        tokens: int [B, T + 1]
  h        = emb[x] + pos                        emb [V, M], pos [T, M]
  layer l  = 0..L-1 (--L, lm.gsl's -D L: 4), pre-norm, with residuals:
    h      = h + attention(LN(h))                causal, NH heads of DH = M / NH:
             q, k, v = h @ wq, wk, wv [M, NH, DH]; s = q k^T / sqrt(DH) with
             -1e9 added where the key is after the query; softmax(s) v @ wo
             [NH, DH, M]; no biases
    h      = h + gelu(LN(h) @ w1) @ w2           even layers: dense, H wide
    h      = h + moe(LN(h))                      odd layers: mixture of experts
  ce       = cross_entropy(LN(h) @ wout, y)      wout [M, V], mean over B * T
  loss     = ce + 0.01 * (aux_1 + aux_3 + ...)

LN is layer norm over M with gain and bias, eps 1e-5; gelu the tanh form.
The moe layer is bench/moe_torch.py's (imported: GShard's top-2 gating, then
--way einsum, dense one-hot dispatch and combine tensors [G, S, E, C],
--way index, index_copy into the experts' slots, bmm, index_add back, or
--way loop, expert by expert over its kept tokens alone),
with every sequence a group (G = B, S = T),
capacity factor F = 1.0 as in stdlib/transformer.gsl (C = ceil(F * 2 * T /
E) = 2T/E; --capacity F for another; bench/run.sh passes the factor it
reads in the model's source), random routing as GSL's
moe block does by default (a second choice is routed only where 2 * w2 > u,
u uniform per token: torch.rand here, GSL's counter-based draws there, so
the two route alike in law, not token for token), and the expert FFN
gelu(t @ wi[e]) @ we[e], HE wide (--HE: lm.gsl's -D HE, H unless given).
The params are lm.gsl's, one tensor per layer: emb, pos, the 2L + 1
layer norms' gains (ones) and biases (zeros), per layer wq wk wv wo, per
dense layer w1 w2, per moe layer wg [M, E], wi [E, M, HE], we [E, HE, M],
and wout; every weight drawn normal(0.02). One step is what a PyTorch
user writes:

  opt.zero_grad(set_to_none=True); loss = f(batch); loss.backward(); opt.step()

with torch.optim.Adam(params, lr=0.001) (betas (0.9, 0.999), eps 1e-8, as
GSL's adam). Step k (from 1) trains on batch (k - 1) mod N of the data
[N, B, T + 1] (scripts/lm_data.py's train.npy), as GSL cycles through an
--input file. With --autocast the loss is computed under
torch.autocast("cpu", dtype=torch.bfloat16) (the router and the
cross-entropy in f32), the backward pass and Adam outside it. One
intra-op thread (torch.set_num_threads(1)); bench runs
moe_torch.self_check(train=True) first.

Timing:  lm_torch.py --data train.npy [--L 4 --B 8 --T 64 --M 128 --NH 4
         --H 512 --HE H --E 8 --capacity 1.0] --steps 20 --warmup 3 [--way einsum|index|loop]
         [--autocast] [--log-every K]
         [--metrics FILE]
         prints "ms_per_step X" and "tokens_per_s Y" (over the --steps
         steps after --warmup steps; tokens = B * (T + 1) a step, what the
         batch holds) and "loss FIRST LAST" (the first and last timed
         step's). --log-every K also prints "step K/N loss L" every K steps,
         and --metrics FILE writes GSL's --metrics lines (one JSON object
         per logged step: step, loss, tokens_per_s, elapsed_s, ms_per_step),
         so a PyTorch run can be drawn beside GSL's (scripts/lm_plot.py).
Check:   lm_torch.py --check DIR --steps N [--data FILE] [sizes as above]
         compares PyTorch's training with GSL's from the same start, with
         random routing off in both. DIR holds GSL's initial params
         ({name}.npy, lm.gsl's stacked layout, from a run with lr 0), GSL's
         N losses (gsl_loss.txt, one a line) and params after its N Adam
         steps (gsl_{name}.npy). Prints a "routing" line, "loss K GSL TORCH"
         for each step, "check loss ERR" (max |a - b| / max |ref|, ref =
         GSL's) and "check upd_NAME ERR" (the relative L2 error ||a - b|| /
         ||ref|| of the N steps' updates p_N - p_0 of each param), in
         float32, for each way (the index and loop ways' lines named
         index_* and loop_*).
Exits 3 if torch cannot be imported. Run with OPENBLAS_NUM_THREADS=1 (set
here if unset, before torch loads OpenBLAS: two BLAS threads on a 2-core
machine fight torch's own thread pool).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # importing moe_torch leaves no __pycache__ in bench/
# moe_torch sets OPENBLAS_NUM_THREADS and OMP_NUM_THREADS before it imports torch,
# and exits 3 without torch
from moe_torch import WAYS, F, capacity_of, moe, precision, self_check, torch  # noqa: E402  (the moe layer)

LN_EPS = 1e-5


def param_shapes(a):
    """lm.gsl's params and their stacked shapes (dimension 0: the layer,
    for those that have one)."""
    M, DH, L = a.M, a.M // a.NH, a.L
    return {
        "emb": (a.V, M), "pos": (a.T, M),
        "ln_g": (2 * L + 1, M), "ln_b": (2 * L + 1, M),
        "wq": (L, M, a.NH, DH), "wk": (L, M, a.NH, DH), "wv": (L, M, a.NH, DH),
        "wo": (L, a.NH, DH, M),
        "w1": (L // 2, M, a.H), "w2": (L // 2, a.H, M),
        "wg": (L // 2, M, a.E), "wi": (L // 2, a.E, M, a.HE), "we": (L // 2, a.E, a.HE, M),
        "wout": (M, a.V),
    }


STACKED = ("ln_g", "ln_b", "wq", "wk", "wv", "wo", "w1", "w2", "wg", "wi", "we")


def split_params(stacked):
    """{name: stacked tensor} -> {name: tensor, or a list of one per layer},
    every one a leaf that requires grad."""
    p = {}
    for n, t in stacked.items():
        if n in STACKED:
            p[n] = [t[i].clone().requires_grad_(True) for i in range(t.shape[0])]
        else:
            p[n] = t.clone().requires_grad_(True)
    return p


def leaves(p):
    out = []
    for n in sorted(p):
        out.extend(p[n] if isinstance(p[n], list) else [p[n]])
    return out


def init_params(a):
    """Drawn as lm.gsl declares them (other draws, the same laws)."""
    g = torch.Generator().manual_seed(a.seed)
    stacked = {}
    for n, shape in param_shapes(a).items():
        if n == "ln_g":
            stacked[n] = torch.ones(shape)
        elif n == "ln_b":
            stacked[n] = torch.zeros(shape)
        else:
            stacked[n] = 0.02 * torch.randn(shape, generator=g, dtype=torch.float32)
    return split_params(stacked)


def layer_norm(x, p, i):
    return F.layer_norm(x, x.shape[-1:], p["ln_g"][i], p["ln_b"][i], LN_EPS)


def attention(x, wq, wk, wv, wo, maskadd):
    """Causal multi-head self-attention, stdlib/transformer.gsl's."""
    q = torch.einsum("btm,mhd->bhtd", x, wq)
    k = torch.einsum("btm,mhd->bhtd", x, wk)
    v = torch.einsum("btm,mhd->bhtd", x, wv)
    s = torch.einsum("bhtd,bhud->bhtu", q, k) * (q.shape[-1] ** -0.5) + maskadd
    o = torch.einsum("bhtu,bhud->bhtd", F.softmax(s, dim=-1), v)
    return torch.einsum("bhtd,hdm->btm", o, wo)


def gelu(x):
    return F.gelu(x, approximate="tanh")


def moe_ffn(x, wg, wi, we, C, routing, way, bias=None, loads=None):
    """The moe block on x [B, T, M], every sequence a group, dispatched by
    way (bench/moe_torch.py's einsum, index or loop): y, aux, and the number of
    choices kept (a tensor); bias and loads as moe_torch.moe's."""
    u = torch.rand(x.shape[:2]) if routing else None
    return moe(x, wg, wi, we, C, way, gelu, u, bias, loads)


def loss_fn(p, tokens, a, maskadd, C, routing, kept=None, way="einsum"):
    """The loss of one batch; appends each moe layer's kept choices to kept."""
    ce, aux = forward(p, tokens, a, maskadd, C, routing, kept, way)
    return ce + a.aux * aux


def forward(p, tokens, a, maskadd, C, routing, kept=None, way="einsum", biases=None, loads=None):
    """The cross-entropy of one batch (lm.gsl's `output ce`) and its moe
    layers' aux losses, summed; appends each moe layer's kept choices to
    kept. With biases (a routing bias [E] per moe layer), each layer routes
    by its gates plus its bias, and appends its routed choices per expert
    to the list loads."""
    T = tokens.shape[1] - 1
    x, y = tokens[:, :T], tokens[:, 1:]
    h = F.embedding(x, p["emb"]) + p["pos"]
    aux = 0.0
    for l in range(a.L):
        h = h + attention(layer_norm(h, p, 2 * l), p["wq"][l], p["wk"][l], p["wv"][l], p["wo"][l], maskadd)
        n = layer_norm(h, p, 2 * l + 1)
        if l % 2 == 0:
            h = h + F.gelu(n @ p["w1"][l // 2], approximate="tanh") @ p["w2"][l // 2]
        else:
            dh, la, k = moe_ffn(n, p["wg"][l // 2], p["wi"][l // 2], p["we"][l // 2], C, routing, way,
                                None if biases is None else biases[l // 2], loads)
            h, aux = h + dh, aux + la
            if kept is not None:
                kept.append(int(k.item()))
    logits = layer_norm(h, p, 2 * a.L) @ p["wout"]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    return ce, aux


class Trainer:
    """The params, Adam, and the step on batch k of the data."""

    def __init__(self, a, p, data, routing, way="einsum", autocast=False):
        self.a, self.p, self.data, self.routing = a, p, data, routing
        self.way, self.autocast = way, autocast
        self.opt = torch.optim.Adam(leaves(p), lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
        keep = torch.tril(torch.ones(a.T, a.T))
        self.maskadd = (keep - 1) * 1e9          # 0 where the key is at or before the query
        self.C = capacity_of(a.T, a.E, a.capacity)
        self.k = 0

    def step(self):
        tokens = torch.from_numpy(self.data[self.k % len(self.data)]).long()
        self.k += 1
        self.opt.zero_grad(set_to_none=True)
        with precision(self.autocast):        # the forward pass only, as autocast's recipe says
            loss = loss_fn(self.p, tokens, self.a, self.maskadd, self.C, self.routing, way=self.way)
        loss.backward()
        self.opt.step()
        return loss.detach()


def load_data(a):
    import numpy as np
    data = np.load(a.data)
    want = (a.B, a.T + 1)
    if data.dtype != np.int32 or data.ndim != 3 or data.shape[1:] != want:
        sys.exit("lm_torch.py: %s: expected int32 [N, %d, %d], got %s %s"
                 % (a.data, want[0], want[1], data.dtype, list(data.shape)))
    return data


def bench(a):
    self_check(train=True)
    tr = Trainer(a, init_params(a), load_data(a), True, a.way, a.autocast)
    for _ in range(a.warmup):
        tr.step()
    tokens = a.B * (a.T + 1)
    metrics = open(a.metrics, "w") if a.metrics else None
    losses = []
    last = 0
    start = since = time.perf_counter()
    for k in range(1, a.steps + 1):
        losses.append(tr.step())
        if a.log_every and (k % a.log_every == 0 or k == a.steps):
            now = time.perf_counter()
            per = (now - since) / (k - last)
            loss = losses[-1].item()
            print("step %d/%d loss %.6f (%.1f ms/step)" % (k, a.steps, loss, 1000 * per), flush=True)
            if metrics:
                metrics.write(json.dumps({"step": k, "loss": loss, "tokens_per_s": round(tokens / per, 1),
                                          "elapsed_s": round(now - start, 6),
                                          "ms_per_step": round(1000 * per, 3)}) + "\n")
                metrics.flush()
            since, last = now, k
    t = time.perf_counter() - start
    if metrics:
        metrics.close()
    assert tr.p["emb"].dtype == torch.float32
    print("ms_per_step %.3f" % (1000.0 * t / a.steps))
    print("tokens_per_s %.1f" % (tokens * a.steps / t))
    print("loss %.9g %.9g" % (losses[0].item(), losses[-1].item()))


def check(a):
    import numpy as np
    d = a.check
    ld = lambda n: np.load(os.path.join(d, n + ".npy"))
    p0 = {n: ld(n) for n in param_shapes(a)}
    for n, shape in param_shapes(a).items():
        if p0[n].shape != shape:
            sys.exit("lm_torch.py: %s.npy: expected %s, got %s" % (n, list(shape), list(p0[n].shape)))
    gsl_loss = [float(v) for v in open(os.path.join(d, "gsl_loss.txt")).read().split()]
    assert len(gsl_loss) == a.steps, (len(gsl_loss), a.steps)
    for way in WAYS:                          # the einsum way's lines unprefixed
        pre = "" if way == "einsum" else way + "_"
        p = split_params({n: torch.from_numpy(v) for n, v in p0.items()})
        tr = Trainer(a, p, load_data(a), False, way)
        if not pre:
            kept = []
            with torch.no_grad():                 # the routing of step 1
                loss_fn(p, torch.from_numpy(tr.data[0]).long(), a, tr.maskadd, tr.C, False, kept, way)
            print("routing B=%d T=%d E=%d C=%d, no random routing: %s of %d choices dropped at step 1 in"
                  " the moe layers" % (a.B, a.T, a.E, tr.C, " and ".join(str(2 * a.B * a.T - k) for k in kept),
                                       2 * a.B * a.T))
        losses = [tr.step().item() for _ in range(a.steps)]
        if not pre:
            for k, (g, t) in enumerate(zip(gsl_loss, losses)):
                print("loss %d %.9g %.9g" % (k + 1, g, t))
        print("check %sloss %.3g" % (pre, max(abs(t - g) / abs(g) for g, t in zip(gsl_loss, losses))))
        for n in sorted(p0):
            pn = torch.stack(p[n]) if isinstance(p[n], list) else p[n]
            start = p0[n].astype(np.float64)
            upd, ref = pn.detach().numpy() - start, ld("gsl_" + n) - start
            print("check %supd_%s %.3g" % (pre, n, np.linalg.norm(upd - ref) / max(np.linalg.norm(ref), 1e-30)))


def main():
    torch.set_num_threads(1)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for n, v in (("L", 4), ("B", 8), ("T", 64), ("V", 256), ("M", 128), ("NH", 4), ("H", 512), ("E", 8),
                 ("steps", 20), ("warmup", 3), ("seed", 0)):
        p.add_argument("--" + n, type=int, default=v)
    p.add_argument("--HE", type=int, help="the experts' width (default --H, as lm.gsl's HE = H)")
    p.add_argument("--lr", type=float, default=0.001, help="Adam's learning rate (default 0.001)")
    p.add_argument("--aux", type=float, default=0.01, help="weight of the moe layers' aux loss (default 0.01)")
    p.add_argument("--capacity", type=float, default=1.0,
                   help="the moe layers' capacity factor (default 1.0, stdlib/transformer.gsl's)")
    p.add_argument("--data", metavar="FILE", default="data/fortunes/train.npy",
                   help="int32 batches [N, B, T + 1] (default data/fortunes/train.npy)")
    p.add_argument("--log-every", metavar="K", type=int, default=0, help="print the loss every K timed steps")
    p.add_argument("--metrics", metavar="FILE", help="with --log-every: JSON Lines as GSL's --metrics")
    p.add_argument("--way", choices=sorted(WAYS), default="einsum",
                   help="the moe layers' dispatch: einsum (one-hot tensors, the default), index or loop")
    p.add_argument("--autocast", action="store_true", help="the forward pass under torch.autocast bfloat16")
    p.add_argument("--check", metavar="DIR")
    a = p.parse_args()
    if a.HE is None:
        a.HE = a.H
    if a.M % a.NH:
        p.error("--M must be a multiple of --NH")
    if a.L < 2 or a.L % 2:
        p.error("--L must be even and positive: a dense and a moe layer per pair, as lm.gsl")
    if a.metrics and not a.log_every:
        p.error("--metrics needs --log-every")
    check(a) if a.check else bench(a)


if __name__ == "__main__":
    sys.exit(main())
