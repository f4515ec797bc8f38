#!/usr/bin/python3
"""bench/lm_torch_train.py: scripts/lm.sh's recipe in PyTorch — the same
model, data and schedule, trained for a budget of wall-clock time, then
scored on the same held-out bytes (issue 44, item 5).

    lm_torch_train.py [--data DIR] [--budget SECONDS | --steps N]
                      [--precision auto|f32|bf16] [--way auto|index|einsum|loop]
                      [--threads N] [--metrics FILE] [sizes and recipe]

The model is bench/lm_torch.py's (examples/lm.gsl layer for layer: a dense
and an MoE feed-forward layer in turn, top-2 gating with random routing,
capacity factor 4.0, a sequence a group; its moe layer bench/moe_torch.py's),
at scripts/lm.sh's sizes unless told otherwise: --T 128 --B 8 --M 128
--NH 4 --H 512 --L 4 --E 16 --HE 256. The data are DIR/train.npy and
DIR/eval.npy (scripts/lm_data.py's; default data/corpus_t128, what
scripts/lm.sh trains on; where DIR/eval_all.npy is there too, the corpus's
every held-out batch, the trained model is also scored on it at the end,
outside the budget, as lm.sh scores GSL's checkpoint): step k (from 1) trains on batch (k - 1) mod N of
train.npy, as GSL's --input cycles.

The recipe is scripts/lm.sh's (scripts/lm_recipe.sh), as PyTorch writes it:
  - loss = ce, the mean next-byte cross-entropy in nats (--aux W adds W
    times each moe layer's aux, GShard's load-balancing loss; 0 as the
    recipe);
  - the routing bias of GSL's bias_rate (--bias-rate 0.001; 0 for none):
    each moe layer chooses its experts by the gates plus a bias per
    expert, starting at zeros and moved after each step by the rate toward
    the even load of the step's routed choices (DeepSeek-V3's balancing
    without a loss; the weights stay the gates'); evaluations route with
    it as it is;
  - torch.optim.AdamW(betas (0.9, 0.999), eps 1e-8, weight_decay WD) on
    every param, WD 0 as the recipe (AdamW with 0 is Adam; GSL's adam with
    wd decays every param the same way);
  - the lr of GSL's schedule (man gsl, Learning-rate schedules) through
    LambdaLR: lr (e + 1) / W for the first W = --warmup 200 steps, then
    cosine from --lr 2e-3 to --min-lr 2e-4 over D = STEPS steps, p =
    min((e - W) / D, 1), as lm.sh passes -D STEPS;
  - torch.nn.utils.clip_grad_norm_(every param, --clip 1.0), GSL's clip
    (min(1, C / (norm + 1e-6)) on the global norm).

The steps. With --budget, a timing run of --timing-steps (240) steps gives
the step time (the fastest of its six windows after the first: 40 steps
each at 240), as lm.sh's does, and the run
takes the steps that fit in 97 % of the budget after 10 evaluations (each
priced as the timing run's forward passes over held-out batches); the
schedule is sized to them, and the run also stops early should the next
step and the last evaluation not fit in the budget (GSL's --max-time; the
evaluation priced as the last one took, or before the first as the timing
run priced it). With --steps N, N steps and no limit. Each timing run
also ends once its steps have taken --timing-limit seconds (60; at least 4
steps run): bf16 autocast on a CPU without bf16 products took minutes a
pair, and a pair that slow is not the fastest. The timing run times
every pair of a precision and a way that --precision and --way allow, and
the run trains with the fastest: --precision auto (the default) times f32
and bf16 (torch.autocast("cpu", dtype=torch.bfloat16) around the forward
pass; the router and the cross-entropy in f32), --way auto (the default)
the index dispatch (index_copy into the capacity slots, bmm over all of
them, index_add), the einsum one (GShard's one-hot tensors) and the loop
(expert by expert over its kept tokens alone, Mixtral's layer in Hugging
Face: no empty slot computed, which the other two compute; at the
recipe's capacity factor of 4 three in four slots are empty):
doc/benchmarks.md found index the faster for the moe layer, einsum under
autocast for the lm's step at T = 64, both at capacity 1 or 2. The timed
steps train a throwaway copy: the run starts from the same initial params.

Evaluations, as GSL's: after every STEPS / 10 steps and after the last, the
forward pass alone over every held-out batch, under torch.no_grad() and the
run's precision, with random routing drawn from a fixed seed per held-out
batch (the same draws at every evaluation, none of a training step's);
eval_ce is the mean of the batches' cross-entropies, eval_loss of their
losses, nats a byte. Evaluations are left out of ms_per_step and
tokens_per_s, as GSL leaves them out.

One process with --threads intra-op threads (default 2: one a core, as
scripts/lm.sh runs one rank a core; torch.set_num_threads), OpenBLAS at one
thread (OPENBLAS_NUM_THREADS=1, set here before torch loads), and, where
OpenBLAS would fall back to its Prescott kernels on a CPU it does not know,
OPENBLAS_CORETYPE=SkylakeX or Haswell as bench/run.sh sets it (2.3 times
faster a step at the recipe's sizes on this machine's Xeon).

Prints the timing ("timing PRECISION WAY X ms a step, Y ms a held-out
batch"), the choice ("precision P, way W"), the steps, the initial loss
("step 1 loss L": about ln 256 = 5.545 for bytes), every logged step, and
at the end "held-out cross-entropy X nats/byte after N steps, S s of
training". --metrics FILE writes GSL's --metrics lines (man gslrun, LOG
AND METRICS): one JSON object a logged step, with step, loss, lr,
grad_norm, eval_loss and eval_ce, tokens_per_s, elapsed_s (since training
began, evaluations included), ms_per_step, eval_s, with a routing bias
moe.layerL.bias_range for each moe layer L (its bias's largest entry less
its least, GSL's moe.NAME.bias_range signal), peak_rss_kib (the last
record: this process's peak RSS, one rank), and in the first record a
"provenance" object (the program, torch's version, precision, way,
threads, the capacity, aux and bias settings, OPENBLAS_CORETYPE);
scripts/lm_runs.py and scripts/lm_plot.py read
them as they read GSL's. Exits 3 if torch cannot be imported, 2 on a usage
error.
"""
import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import time


def blas_core():
    """As bench/run.sh does: where OpenBLAS does not know this CPU and falls
    back to its SSE3 Prescott kernels (OpenBLAS 0.3.21 and recent Xeons),
    set OPENBLAS_CORETYPE to SkylakeX (AVX-512) or Haswell (AVX2) for
    Debian's torch, which multiplies through it, unless it is set already.
    Must run before torch loads OpenBLAS. Returns a note, or None."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return None
    try:
        r = subprocess.run([sys.executable, "-c", "import numpy"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, OPENBLAS_VERBOSE="2"))
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = f.read()
    except (OSError, subprocess.SubprocessError):
        return None
    core = re.search(r"^Core: (\S+)", r.stdout + r.stderr, re.M)
    if not core or core.group(1) != "Prescott":
        return None
    pick = "SkylakeX" if re.search(r"\bavx512f\b", cpu) else "Haswell" if re.search(r"\bavx2\b", cpu) else None
    if pick:
        os.environ["OPENBLAS_CORETYPE"] = pick
        return ("OpenBLAS detected core Prescott (CPU unknown to it): using OPENBLAS_CORETYPE=%s "
                "(set OPENBLAS_CORETYPE=Prescott to keep its choice)" % pick)
    return None


BLAS_NOTE = blas_core()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # importing lm_torch leaves no __pycache__ in bench/
# moe_torch (imported by lm_torch) sets OPENBLAS_NUM_THREADS=1 and
# OMP_NUM_THREADS=1 before it imports torch, and exits 3 without torch
from lm_torch import forward, init_params, leaves, split_params, torch  # noqa: E402
from moe_torch import WAYS, bias_step, capacity_of, precision  # noqa: E402

PROG = "lm_torch_train"
EVAL_SEED = 1 << 40  # random routing of held-out batch j draws from seed EVAL_SEED + j


def lr_factor(e, a, steps):
    """GSL's lr_cosine(e, lr, W, D, lo) / lr (stdlib/optim.gsl), e the
    steps done before this one."""
    if e < a.warmup:
        return (e + 1) / a.warmup
    p = min((e - a.warmup) / steps, 1.0)
    lo = a.min_lr / a.lr
    return lo + (1 - lo) * (1 + math.cos(math.pi * p)) / 2


def load(path, a):
    import numpy as np
    data = np.load(path)
    want = (a.B, a.T + 1)
    if data.dtype != np.int32 or data.ndim != 3 or data.shape[1:] != want:
        sys.exit("%s: %s: expected int32 [N, %d, %d], got %s %s"
                 % (PROG, path, want[0], want[1], data.dtype, list(data.shape)))
    return data


class Run:
    """The params, AdamW with GSL's schedule and clipping, the step on
    batch k of the data, and the evaluation."""

    def __init__(self, a, params, train, held, steps, bf16, way):
        self.a, self.p, self.train, self.held, self.bf16, self.way = a, params, train, held, bf16, way
        self.opt = torch.optim.AdamW(leaves(params), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                                     weight_decay=a.wd)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda e: lr_factor(e, a, steps))
        self.maskadd = (torch.tril(torch.ones(a.T, a.T)) - 1) * 1e9
        self.C = capacity_of(a.T, a.E, a.capacity)
        self.k = 0
        # the moe layers' routing biases (GSL's bias_rate): zeros, moved after each step, not trained
        self.biases = [torch.zeros(a.E) for _ in range(a.L // 2)] if a.bias_rate > 0 else None

    def step(self):
        """One training step: (loss, lr, grad norm before clipping)."""
        tokens = torch.from_numpy(self.train[self.k % len(self.train)]).long()
        self.k += 1
        lr = self.opt.param_groups[0]["lr"]
        self.opt.zero_grad(set_to_none=True)
        loads = []
        with precision(self.bf16):        # the forward pass only, as autocast's recipe says
            ce, aux = forward(self.p, tokens, self.a, self.maskadd, self.C, True, way=self.way,
                              biases=self.biases, loads=loads)
            loss = ce + self.a.aux * aux
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(leaves(self.p), self.a.clip) if self.a.clip > 0 else None
        self.opt.step()
        self.sched.step()
        if self.biases is not None:
            for b, routed in zip(self.biases, loads):
                bias_step(b, routed, self.a.bias_rate)
        return loss.item(), lr, None if norm is None else norm.item()

    def evaluate(self, batches=None):
        """(eval_loss, eval_ce) over the held-out batches (the first
        `batches` of them, for timing), in double precision."""
        n = len(self.held) if batches is None else min(batches, len(self.held))
        tot_loss = tot_ce = 0.0
        with torch.no_grad(), torch.random.fork_rng():
            for j in range(n):
                torch.manual_seed(EVAL_SEED + j)
                tokens = torch.from_numpy(self.held[j]).long()
                with precision(self.bf16):
                    ce, aux = forward(self.p, tokens, self.a, self.maskadd, self.C, True, way=self.way,
                                      biases=self.biases)
                tot_ce += float(ce)
                tot_loss += float(ce + self.a.aux * aux)
        return tot_loss / n, tot_ce / n


def time_steps(a, start, train, held, bf16, way):
    """ms a step (the fastest window after the first, of six windows of the
    steps run: --timing-steps, or fewer, at least 4, where --timing-limit
    ends them; lm.sh's rule), ms a held-out
    batch's forward pass, and the steps run, on a throwaway copy of the params."""
    r = Run(a, split_params({n: t.detach() for n, t in stacked(start).items()}), train, held, 1000, bf16, way)
    times = []
    t0 = time.perf_counter()
    for _ in range(a.timing_steps):
        t = time.perf_counter()
        r.step()
        times.append(time.perf_counter() - t)
        if len(times) >= 4 and time.perf_counter() - t0 > a.timing_limit:
            break
    w = max(1, len(times) // 6)
    windows = [times[i:i + w] for i in range(0, len(times) - w + 1, w)]
    per = min(sum(x) / len(x) for x in (windows[1:] or windows))
    t = time.perf_counter()
    k = 8
    r.evaluate(k)
    return 1000 * per, 1000 * (time.perf_counter() - t) / min(k, len(held)), len(times)


def stacked(p):
    """{name: tensor or list of per-layer tensors} -> {name: one tensor}."""
    return {n: torch.stack([t.detach() for t in v]) if isinstance(v, list) else v.detach() for n, v in p.items()}


def main():
    ap = argparse.ArgumentParser(prog="lm_torch_train.py", description=__doc__.split("\n")[0])
    for n, v in (("L", 4), ("B", 8), ("T", 128), ("V", 256), ("M", 128), ("NH", 4), ("H", 512), ("HE", 256),
                 ("E", 16), ("seed", 0)):
        ap.add_argument("--" + n, type=int, default=v)
    ap.add_argument("--capacity", type=float, default=4.0, help="the capacity factor (default 4.0)")
    ap.add_argument("--aux", type=float, default=0.0, help="weight of the aux losses (default 0: none)")
    ap.add_argument("--bias-rate", type=float, default=0.001,
                    help="the routing bias's step, GSL's bias_rate; 0: no bias (default 0.001)")
    ap.add_argument("--lr", type=float, default=2e-3, help="the lr after warmup (default 2e-3)")
    ap.add_argument("--min-lr", type=float, default=2e-4, help="the lr the cosine ends at (default 2e-4)")
    ap.add_argument("--warmup", type=int, default=200, help="steps of linear warmup (default 200)")
    ap.add_argument("--clip", type=float, default=1.0, help="the most the global grad norm may be; 0: none "
                    "(default 1.0)")
    ap.add_argument("--wd", type=float, default=0.0, help="decoupled weight decay (default 0)")
    ap.add_argument("--data", metavar="DIR", default="data/corpus_t128",
                    help="train.npy and eval.npy (default data/corpus_t128)")
    ap.add_argument("--budget", type=float, default=600, help="seconds of training, evaluations included "
                    "(default 600)")
    ap.add_argument("--steps", type=int, help="train this many steps: no timing run, no time limit")
    ap.add_argument("--timing-steps", type=int, default=240, help="steps of each timing run (default 240)")
    ap.add_argument("--timing-limit", type=float, default=60, help="seconds after which a timing run ends, "
                    "at least 4 steps run (default 60)")
    ap.add_argument("--precision", choices=("auto", "f32", "bf16"), default="auto",
                    help="f32, bf16 autocast, or auto: the faster by the timing run (default)")
    ap.add_argument("--way", choices=("auto",) + tuple(WAYS), default="auto",
                    help="the moe layers' dispatch: index, einsum, loop, or auto: the fastest by the timing "
                         "run (default)")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads, one a core (default 2)")
    ap.add_argument("--metrics", metavar="FILE", help="GSL's --metrics lines (JSON Lines)")
    a = ap.parse_args()
    if a.M % a.NH:
        ap.error("--M must be a multiple of --NH")
    if a.L < 2 or a.L % 2:
        ap.error("--L must be even and positive: a dense and a moe layer per pair, as lm.gsl")
    if (a.steps is None or a.precision == "auto" or a.way == "auto") and a.timing_steps < 4:
        ap.error("--timing-steps must be at least 4")
    if a.bias_rate < 0:
        ap.error("--bias-rate must not be negative")
    if not a.timing_limit > 0:
        ap.error("--timing-limit must be positive")
    if a.steps is not None and a.steps < 1:
        ap.error("--steps must be at least 1")
    torch.set_num_threads(a.threads)
    if BLAS_NOTE:
        print(BLAS_NOTE, flush=True)
    train = load(os.path.join(a.data, "train.npy"), a)
    held = load(os.path.join(a.data, "eval.npy"), a)
    start = init_params(a)

    # the precision and the steps
    # the precision and the way (the fastest pair by the timing run), and the steps
    precs = ("f32", "bf16") if a.precision == "auto" else (a.precision,)
    ways = tuple(WAYS) if a.way == "auto" else (a.way,)
    pairs = [(p, w) for p in precs for w in ways]
    timed = {}
    if a.steps is None or len(pairs) > 1:
        for pair in pairs:
            timed[pair] = time_steps(a, start, train, held, pair[0] == "bf16", pair[1])
            ms, eval_ms, ran = timed[pair]
            print("timing %s %s %.3f ms a step, %.3f ms a held-out batch (%d steps%s)"
                  % (pair + (ms, eval_ms, ran, "" if ran == a.timing_steps else
                             " of %d: --timing-limit %g s" % (a.timing_steps, a.timing_limit))), flush=True)
    prec, way = min(timed, key=lambda p: timed[p][0]) if len(pairs) > 1 else pairs[0]
    print("precision %s, way %s" % (prec, way), flush=True)
    eval_guess = None      # seconds an evaluation is guessed to take, until one is measured
    if a.steps is not None:
        steps, limit = a.steps, None
    else:
        ms, eval_ms, _ = timed[prec, way]
        steps = max(100, int((0.97 * a.budget * 1000 - 10 * len(held) * eval_ms) / ms))
        limit = a.budget
        eval_guess = eval_ms * len(held) / 1000
        print("%.3f ms a step, %.3f ms a held-out batch (%d of them): %d steps fit in %g s"
              % (ms, eval_ms, len(held), steps, a.budget), flush=True)

    run = Run(a, start, train, held, steps, prec == "bf16", way)
    every = max(1, steps // 10)
    tokens = a.B * (a.T + 1)
    metrics = open(a.metrics, "w", encoding="utf-8") if a.metrics else None
    records = 0
    begin = since = time.perf_counter()
    aside = 0.0            # seconds of evaluations
    last_eval = None       # seconds the last evaluation took
    last_logged = 0
    end = steps
    k = 0
    while k < end:
        loss, lr, norm = run.step()
        k += 1
        now = time.perf_counter()
        if k == 1:
            print("step 1 loss %.6f (the initial loss; ln 256 = %.6f)" % (loss, math.log(256)), flush=True)
        if not math.isfinite(loss):
            sys.exit("%s: the loss at step %d is %r" % (PROG, k, loss))
        if limit is not None and k < end:
            trained = now - begin - aside
            ev = last_eval if last_eval is not None else eval_guess
            if now - begin + trained / k + ev > limit:
                print("%s: --budget %g s: the run ends after step %d of %d" % (PROG, limit, k, steps), flush=True)
                end = k
        if k % every == 0 or k == end:       # an evaluation, and the step logged (lm.sh: log and
            rec = {"step": k, "loss": loss, "lr": lr}   # evaluate every STEPS / 10 steps)
            if norm is not None:
                rec["grad_norm"] = norm
            for j, b in enumerate(run.biases or []):   # GSL's moe.NAME.bias_range, NAME the layer
                rec["moe.layer%d.bias_range" % (2 * j + 1)] = float(b.max() - b.min())
            t = time.perf_counter()
            rec["eval_loss"], rec["eval_ce"] = run.evaluate()
            last_eval = time.perf_counter() - t
            per = (now - since) / (k - last_logged)
            rec.update({"tokens_per_s": round(tokens / per, 1), "elapsed_s": round(now - begin, 6),
                        "ms_per_step": round(1000 * per, 6), "eval_s": round(last_eval, 6)})
            if k == end:
                rec["peak_rss_kib"] = [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]
            if not records:
                rec["provenance"] = {"program": "bench/lm_torch_train.py", "torch": torch.__version__,
                                     "precision": prec, "way": way, "threads": a.threads, "steps": steps,
                                     "data": a.data, "capacity": a.capacity, "aux": a.aux,
                                     "bias_rate": a.bias_rate,
                                     "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}
            records += 1
            print("step %d/%d  loss %.6g  lr %.3g%s  eval_loss %.6g  eval_ce %.6g  tokens/s %.0f  "
                  "(%.1f ms/step, %.1f s elapsed; eval %.2f s)"
                  % (k, steps, loss, lr, "" if norm is None else "  gnorm %.3g" % norm, rec["eval_loss"],
                     rec["eval_ce"], tokens / per, 1000 * per, now - begin, last_eval), flush=True)
            if metrics:
                metrics.write(json.dumps(rec) + "\n")
                metrics.flush()
            last_logged = k
            since = time.perf_counter()
            aside += last_eval
    if metrics:
        metrics.close()
    train_s = time.perf_counter() - begin - aside
    print("%s: held-out cross-entropy %.8g nats/byte after %d steps, %.0f s of training (%s, --way %s, "
          "%d threads)" % (PROG, rec["eval_ce"], k, train_s, prec, way, a.threads))
    every_held = os.path.join(a.data, "eval_all.npy")
    if os.path.exists(every_held):
        # the corpus: eval.npy is a fixed subset of the held-out batches;
        # the trained model is scored on all of them, outside the budget,
        # as scripts/lm.sh scores GSL's checkpoint
        run.held = load(every_held, a)
        loss_all, ce_all = run.evaluate()
        print("%s: on all the held-out bytes (%s, %d batches): %.8g nats/byte"
              % (PROG, every_held, len(run.held), ce_all), flush=True)
        if a.metrics:
            with open(a.metrics, "a", encoding="utf-8") as m:
                m.write(json.dumps({"step": k, "eval_all_loss": loss_all, "eval_all_ce": ce_all}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
