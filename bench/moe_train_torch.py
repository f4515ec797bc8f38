#!/usr/bin/python3
"""bench/moe_train_torch.py: bench/moe_train.gsl's training step in PyTorch (CPU).

The layer is bench/moe_torch.py's (GShard's top-2 gating, capacity factor
2.0, no random routing; --way einsum: dense one-hot dispatch and combine
tensors [G, S, E, C] and einsums, --way index: index_copy into expert
slots, bmm, index_add back); the loss is examples/moe.gsl's,

  loss = mean((y - tanh(x @ teacher))^2) + 0.01 * aux      (teacher frozen)

and one step is what a PyTorch user writes:

  opt.zero_grad(set_to_none=True); loss = f(x); loss.backward(); opt.step()

with opt = torch.optim.Adam([wg, wi, wo], lr=0.001) (PyTorch's defaults
otherwise, as GSL's adam). With --autocast the loss is computed under
torch.autocast("cpu", dtype=torch.bfloat16) (the mean square in f32), the
backward pass and Adam outside it, on f32 weights, as autocast's recipe
says. One intra-op thread (torch.set_num_threads(1)); bench runs
moe_torch.self_check(train=True) first.

Timing:  moe_train_torch.py --G 4 --S 256 --M 64 --H 256 --E 8 --steps 20
         --warmup 3 [--way einsum|index] [--autocast] [--x FILE.npy] [--opt sgd]
         prints "ms_per_step X" (mean over --steps steps after --warmup
         steps) and "loss FIRST LAST" (the loss of the first and of the last
         timed step); x is read from FILE (the fixed batch GSL is given),
         else drawn; the weights are drawn with bench/moe_train.gsl's stds.
         --opt sgd times the step with torch.optim.SGD instead of Adam (to
         see what Adam costs).
Check:   moe_train_torch.py --check DIR --steps N [--capacity F] [--sgd-lr LR]
         compares PyTorch's training with GSL's from the same start. DIR
         holds GSL's initial weights {wg,wi,wo,teacher}.npy (a run with lr
         0), the batch x.npy, the losses of GSL's N Adam steps on that x
         (gsl_loss.txt, one a line) and its weights after them
         (gsl_{wg,wi,wo}.npy), and its weights after one SGD step of
         learning rate LR (sgd_{wg,wi,wo}.npy; the gradient is (p0 - p1) /
         LR). PyTorch makes the same N Adam steps and the same SGD step, in
         float32, each way (the index way's lines named index_*; "loss K"
         lines for the einsum way), and prints a "routing" line, "loss K GSL
         TORCH" for each step, and
         "check NAME ERR" lines: max |a - b| / max |ref| (ref = GSL's) of
         the losses and of the first step's gradients (grad_*), and the
         relative L2 error ||a - b|| / ||ref|| of the N steps' updates p_N -
         p_0 (upd_*); "info maxupd_* X": the largest difference of one
         element's update, in units of lr. Adam's first steps move every
         element by about lr whatever its gradient's size, so an element
         whose gradient is at the level of float rounding (a hidden unit
         that almost no token activates) can move differently in the two;
         its neighbours' gradients then differ in the following steps. The
         update as a whole, and the losses, agree much more closely.
Exits 3 if torch cannot be imported. Run with OPENBLAS_NUM_THREADS=1 (set
here if unset, before torch loads OpenBLAS: two BLAS threads on a 2-core
machine fight torch's own thread pool).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # importing moe_torch leaves no __pycache__ in bench/
# moe_torch sets OPENBLAS_NUM_THREADS and OMP_NUM_THREADS before it imports torch,
# and exits 3 without torch
from moe_torch import WAYS, arguments, capacity_of, inputs, moe, precision, self_check, torch  # noqa: E402


def loss_fn(x, wg, wi, wo, teacher, C, way):
    y, aux, _ = moe(x, wg, wi, wo, C, way)
    target = torch.tanh(x @ teacher)
    return torch.mean((y.float() - target.float()) ** 2) + 0.01 * aux


def make_opt(params, name, lr):
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


def step(opt, x, wg, wi, wo, teacher, C, way="einsum", amp=None):
    """One training step; amp: the context of the forward pass (autocast or
    none), the backward pass and the update outside it, as PyTorch's
    autocast recipe says."""
    opt.zero_grad(set_to_none=True)
    with amp or precision(False):
        loss = loss_fn(x, wg, wi, wo, teacher, C, way)
    loss.backward()
    opt.step()
    return loss.detach()


def bench(a):
    self_check(train=True)
    x, wg, wi, wo, f = inputs(a)
    teacher = f((a.M, a.M), 0.125)            # frozen: no requires_grad
    for w in (wg, wi, wo):
        w.requires_grad_(True)
    opt = make_opt([wg, wi, wo], a.opt, a.lr)
    C = capacity_of(a.S, a.E, a.capacity)
    for _ in range(a.warmup):
        step(opt, x, wg, wi, wo, teacher, C, a.way, precision(a.autocast))
    losses = []
    t = time.perf_counter()
    for _ in range(a.steps):
        losses.append(step(opt, x, wg, wi, wo, teacher, C, a.way, precision(a.autocast)))
    t = time.perf_counter() - t
    assert wi.dtype == torch.float32
    print("ms_per_step %.3f" % (1000.0 * t / a.steps))
    print("loss %.9g %.9g" % (losses[0].item(), losses[-1].item()))


def relerr(a, ref):
    import numpy as np
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a.shape != ref.shape or not np.isfinite(a).all() or not np.isfinite(ref).all():
        return float("inf")
    return float(np.max(np.abs(a - ref)) / max(np.max(np.abs(ref)), 1e-30))


def check(a):
    import numpy as np
    d = a.check
    ld = lambda n: np.load(os.path.join(d, n + ".npy"))
    x, teacher = torch.from_numpy(ld("x")), torch.from_numpy(ld("teacher"))
    w0 = {n: ld(n) for n in ("wg", "wi", "wo")}
    G, S, M = x.shape
    E = w0["wg"].shape[1]
    C = capacity_of(S, E, a.capacity)
    fresh = lambda: [torch.from_numpy(w0[n].copy()).requires_grad_(True) for n in ("wg", "wi", "wo")]
    with torch.no_grad():
        _, _, kept = moe(x, *(torch.from_numpy(w0[n]) for n in ("wg", "wi", "wo")), C)
    print("routing G=%d S=%d E=%d C=%d: %d of %d choices dropped at step 1"
          % (G, S, E, C, 2 * G * S - int(kept.item()), 2 * G * S))
    for way in WAYS:
        check_way(a, way, "" if way == "einsum" else way + "_", x, teacher, w0, fresh, C)


def check_way(a, way, pre, x, teacher, w0, fresh, C):
    """check's comparisons for one way of dispatch; its lines' names begin
    with pre (the einsum way prints the per-step loss lines too)."""
    import numpy as np
    ld = lambda n: np.load(os.path.join(a.check, n + ".npy"))
    # N Adam steps: the losses, then the weights
    gsl_loss = [float(v) for v in open(os.path.join(a.check, "gsl_loss.txt")).read().split()]
    assert len(gsl_loss) == a.steps, (len(gsl_loss), a.steps)
    w = fresh()
    opt = make_opt(w, "adam", a.lr)
    losses = [step(opt, x, *w, teacher, C, way).item() for _ in range(a.steps)]
    if not pre:
        for k, (g, t) in enumerate(zip(gsl_loss, losses)):
            print("loss %d %.9g %.9g" % (k + 1, g, t))
    print("check %sloss %.3g" % (pre, max(relerr(t, g) for g, t in zip(gsl_loss, losses))))
    # one SGD step: the gradients
    ws = fresh()
    step(make_opt(ws, "sgd", a.sgd_lr), x, *ws, teacher, C, way)
    for n, p in zip(("wg", "wi", "wo"), ws):
        grad = (w0[n].astype(np.float64) - p.detach().numpy()) / a.sgd_lr
        ref = (w0[n].astype(np.float64) - ld("sgd_" + n)) / a.sgd_lr
        print("check %sgrad_%s %.3g" % (pre, n, relerr(grad, ref)))
    # the N steps' updates: relative L2 error (checked), and the largest
    # difference of one element in units of lr (not checked: see below)
    for n, p in zip(("wg", "wi", "wo"), w):
        p0 = w0[n].astype(np.float64)
        upd, ref = p.detach().numpy() - p0, ld("gsl_" + n) - p0
        print("check %supd_%s %.3g" % (pre, n, np.linalg.norm(upd - ref) / max(np.linalg.norm(ref), 1e-30)))
        print("info %smaxupd_%s %.3g" % (pre, n, np.max(np.abs(upd - ref)) / a.lr))


def main():
    torch.set_num_threads(1)
    p = arguments(__doc__)
    p.add_argument("--lr", type=float, default=0.001, help="learning rate (default 0.001)")
    p.add_argument("--opt", choices=("adam", "sgd"), default="adam")
    p.add_argument("--sgd-lr", type=float, default=1000.0,
                   help="learning rate of GSL's SGD step (--check; default 1000)")
    p.add_argument("--x", metavar="FILE", help="x as .npy [G, S, M] float32")
    p.add_argument("--check", metavar="DIR")
    a = p.parse_args()
    check(a) if a.check else bench(a)


if __name__ == "__main__":
    sys.exit(main())
