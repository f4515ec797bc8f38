#!/usr/bin/python3
"""scripts/lm_experts.py — the tables and the plot of scripts/lm_experts.sh:
the byte-level LM with E experts a MoE layer at the same FLOPs a token
(GShard's table in miniature), from the runs that script made.

    python3 scripts/lm_experts.py MANIFEST -o MD [--png PNG]
                                  [--steps N] [--budget S] [--np N] [--corpus NAME]

MANIFEST has one line a run, tab-separated, as lm_experts.sh writes it:

    TABLE  E  MODEL  STATUS  PARAMS  METRICS  LOG  FLAGS

TABLE is steps (equal steps) or time (equal wall-clock time); MODEL moe
(examples/lm.gsl) or dense (examples/lm_dense.gsl, the E = 1 row); STATUS
scripts/lm.sh's exit status; PARAMS the params gslc counts (--stats on one
device: the params' bytes / 4); METRICS the run's --metrics file; LOG its
output; FLAGS the -D settings it was compiled with.

The sizes. Each model's consts are read from its source (`const NAME =
VALUE`, in order, a value an expression of the consts before it), with
FLAGS' -D settings in their place. From them, per model:

  params   V M + T M + 2 (2L + 1) M + 4 L M^2 + D 2 M H + X (M E + 2 E M HE) + M V
           with D dense and X MoE layers (lm.gsl: L/2 each; lm_dense.gsl: L
           and 0); it must equal gslc's count, or the run is not the model
           these formulas describe, and the script stops (status 1).
  FLOP a token, forward: the matrix products, 2 a multiply-add, as doc/lm.md
           counts them:
             attention  L (8 M^2 + 4 T M)   (q, k, v, o; the scores and their
                                             use over all T keys, as computed)
             dense FFN  D 4 M H
             experts    X TOP 4 M HE       (the TOP experts a token runs)
             router     X 2 M E            (the gate: grows with E)
             output     2 M V
           With TOP HE = H the experts cost what a dense layer costs, so
           every model spends the same FLOPs a token but the router's.
  C        an expert's slots a group: ceil(CAP TOP T / E), at least 1 (a
           sequence a group: S = T); E C / T is the slots a token a MoE layer
           computes (TOP when C divides evenly; more where C rounds up).

From each METRICS file (scripts/lm_runs.py's summary): steps, tokens seen,
training seconds (evaluations left out), tokens/s, the largest rank's peak
RSS, the last logged fraction of routed choices dropped at capacity, and
the held-out cross-entropy of the last evaluation (eval_ce: nats a byte).

Writes MD: two markdown tables, equal steps and equal time, a row an E
(ascending; a run that failed says so and where its log is), and with
--png a picture: held-out nats/byte, params, tokens/s and peak RSS against
E, one line a table (matplotlib; without it the script says so and writes
the tables alone). Exit status 0, 1 on a run-time error, 2 on a usage
error.
"""
import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # importing lm_runs leaves no __pycache__ in scripts/
import lm_runs  # noqa: E402  (the one reader of --metrics files)

PROG = "lm_experts"
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = {"moe": "examples/lm.gsl", "dense": "examples/lm_dense.gsl"}
TABLES = (("steps", "Equal steps"), ("time", "Equal time"))


def fail(msg, status=1):
    print("%s: error: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(status)


def consts(model, flags):
    """The model's consts: its source's, in order, each -D NAME=VALUE of
    flags (the last one of a name) in place of the source's value."""
    given = dict(re.findall(r"-D\s*(\w+)=(\S+)", flags))
    path = os.path.join(TOP, SOURCES[model])
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    out = {}
    for name, expr in re.findall(r"^const\s+(\w+)\s*=\s*([^#\n]+)", text, re.M):
        expr = given.get(name, expr).strip()
        if not re.fullmatch(r"[\w\s.+\-*/()]+", expr):
            fail("%s: const %s = %s: not an expression of numbers and consts" % (path, name, expr))
        try:
            out[name] = eval(expr, {"__builtins__": {}}, dict(out))  # numbers and the consts before it
        except Exception as e:  # noqa: BLE001 (a name not yet defined, a syntax error)
            fail("%s: const %s = %s: %s" % (path, name, expr, e))
    for name in given:
        if name not in out:
            fail("-D %s: %s has no const named %s" % (name, SOURCES[model], name))
    return out


def sizes(model, c):
    """params, the forward FLOP a token and its router's part, the capacity
    C and the slots a token a MoE layer, of a model with consts c."""
    L, T, V, M, H = c["L"], c["T"], c["V"], c["M"], c["H"]
    dense, moe = (L, 0) if model == "dense" else (L // 2, L // 2)
    E, HE, top = (c["E"], c["HE"], c["TOP"]) if moe else (1, 0, 0)
    params = (V * M + T * M + 2 * (2 * L + 1) * M + 4 * L * M * M + dense * 2 * M * H
              + moe * (M * E + 2 * E * M * HE) + M * V)
    router = moe * 2 * M * E
    flop = L * (8 * M * M + 4 * T * M) + dense * 4 * M * H + moe * top * 4 * M * HE + router + 2 * M * V
    C = max(1, math.ceil(c["CAP"] * top * T / E)) if moe else None
    return {"params_formula": params, "flop": flop, "router": router, "C": C,
            "slots": E * C / T if moe else None, "E": E if moe else 1, "HE": HE, "H": H}


def read_manifest(path):
    runs = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) != 8 or f[0] not in dict(TABLES) or f[2] not in SOURCES:
            fail("%s:%d: expected TABLE E MODEL STATUS PARAMS METRICS LOG FLAGS, tab-separated" % (path, n))
        try:
            e, status, params = int(f[1]), int(f[3]), int(f[4])
        except ValueError:
            fail("%s:%d: E, STATUS and PARAMS must be whole numbers" % (path, n))
        run = {"table": f[0], "E": e, "model": f[2], "status": status, "params": params,
               "metrics": f[5], "log": f[6], "flags": f[7]}
        c = consts(run["model"], run["flags"])
        run.update(sizes(run["model"], c))
        run["consts"] = c
        if run["params_formula"] != params:
            fail("%s:%d: gslc counts %d params for E = %d, the formula %d: %s is not the model this script "
                 "counts FLOPs for" % (path, n, params, e, run["params_formula"], SOURCES[run["model"]]))
        if run["E"] != e:
            fail("%s:%d: the run is listed as E = %d, its flags give E = %d" % (path, n, e, run["E"]))
        run["summary"] = None
        if status == 0:
            try:
                run["summary"] = lm_runs.summary(run["metrics"], PROG)
            except lm_runs.MetricsError as err:
                fail(str(err))
        runs.append(run)
    if not runs:
        fail("%s: no runs" % path)
    return runs


def f(v, spec):
    return "-" if v is None else format(v, spec)


def table(runs, kind):
    """The markdown table of one kind (steps or time)."""
    head = ["E", "model", "experts", "params", "FLOP a token (forward)", "of which the router",
            "C (slots a token)", "steps", "tokens seen", "training time", "tokens/s",
            "peak RSS, largest rank", "dropped at capacity", "held-out nats/byte"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in sorted(runs, key=lambda r: r["E"]):
        model = "dense (`lm_dense.gsl`, H %d)" % r["H"] if r["model"] == "dense" else "MoE (`lm.gsl`)"
        experts = "-" if r["model"] == "dense" else "%d of width %d, top-%d" % (r["E"], r["HE"], r["consts"]["TOP"])
        cap = "-" if r["C"] is None else "%d (%.3g)" % (r["C"], r["slots"])
        cells = [str(r["E"]), model, experts, format(r["params"], ","), format(r["flop"], ","),
                 "%s (%.2f %%)" % (format(r["router"], ","), 100.0 * r["router"] / r["flop"]), cap]
        s = r["summary"]
        if s is None:
            cells += ["failed (status %d; %s)" % (r["status"], r["log"])] + [""] * 6
        else:
            cells += [format(s["steps"], ","), f(s["tokens"] and s["tokens"] / 1e6, ".3g") + " M",
                      f(s["train_s"], ".0f") + " s", f(s["tokens_per_s"], ",.0f"),
                      f(s["rss_max_kib"] and s["rss_max_kib"] / 1024.0, ".0f") + " MiB",
                      f(s["drop"] and 100 * s["drop"], ".1f") + (" %" if s["drop"] is not None else ""),
                      f(s["eval_ce"], ".4f")]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def markdown(runs, a):
    c = runs[0]["consts"]
    moe = [r for r in runs if r["model"] == "moe"]
    lines = ["# More experts at the same FLOPs a token", "",
             "scripts/lm_experts.sh (doc/lm.md, \"More experts, the same FLOPs a token\"): the byte-level LM "
             "with width %d, %d layers (%d heads), context %d, %d sequences a step, on %s, %s ranks. "
             "E = 1 is the dense model (`examples/lm_dense.gsl`, feed-forward width %d in every layer); "
             "E > 1 is `examples/lm.gsl`, dense layers of width %d alternating with MoE layers of E experts "
             "of width %s, top-%s, capacity factor %s, a sequence a group."
             % (c["M"], c["L"], c["NH"], c["T"], c["B"], a.corpus, a.np, c["H"], c["H"],
                moe[0]["HE"] if moe else "-", moe[0]["consts"]["TOP"] if moe else "-",
                moe[0]["consts"]["CAP"] if moe else "-"),
             "",
             "Held equal: every size but E, the experts' FLOPs a token (TOP experts of width HE cost one "
             "dense layer of width TOP HE = H), the data, the recipe. Not equal: the router's 2 M E FLOPs a "
             "token a MoE layer (its column), the dispatch and combine, and the capacity's empty slots "
             "(C: an expert's slots a group, ceil(CAP TOP T / E); in brackets the slots a token, E C / T). "
             "FLOP a token counts the forward pass's matrix products, 2 a multiply-add. params are gslc's "
             "count. tokens/s leaves the evaluations out; peak RSS is the largest rank's; dropped is the "
             "fraction of routed choices dropped at capacity at the last logged step (the MoE blocks' mean); "
             "held-out is the last evaluation's cross-entropy in nats a byte.", ""]
    for kind, title in TABLES:
        rs = [r for r in runs if r["table"] == kind]
        if not rs:
            continue
        what = ("%s steps each (the same tokens seen)" % format(a.steps, ",") if kind == "steps" and a.steps
                else "%s s of training each (scripts/lm.sh's timing run, then --max-time)" % a.budget
                if kind == "time" and a.budget else "")
        lines += ["## %s%s" % (title, ": " + what if what else ""), "", table(rs, kind), ""]
    return "\n".join(lines)


def plot(runs, png):
    """The picture: four panels against E, a line a table. False when
    matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = (("held-out nats/byte", lambda s, r: s["eval_ce"]),
              ("params", lambda s, r: r["params"]),
              ("tokens/s (training)", lambda s, r: s["tokens_per_s"]),
              ("peak RSS, largest rank (MiB)", lambda s, r: s["rss_max_kib"] and s["rss_max_kib"] / 1024.0))
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    es = sorted({r["E"] for r in runs})
    for ax, (label, get) in zip(axes.flat, panels):
        for (kind, title), style in zip(TABLES, ("o-", "s--")):
            pts = [(r["E"], get(r["summary"], r)) for r in sorted(runs, key=lambda r: r["E"])
                   if r["table"] == kind and r["summary"]]
            pts = [(e, v) for e, v in pts if v is not None]
            if pts:
                ax.plot([e for e, _ in pts], [v for _, v in pts], style, label=title)
        ax.set_xscale("log", base=2)
        ax.set_xticks(es)
        ax.set_xticklabels([str(e) if e > 1 else "1\n(dense)" for e in es])
        if label == "params":
            ax.set_yscale("log")
        ax.set_xlabel("experts a MoE layer (E)")
        ax.set_title(label)
        ax.grid(True, color="#dddddd")
        ax.legend()
    fig.suptitle("byte-level LM: more experts at the same FLOPs a token")
    fig.tight_layout()
    folder = os.path.dirname(png)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = "%s.tmp.%d.png" % (png, os.getpid())
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, png)
    return True


def main():
    ap = argparse.ArgumentParser(prog="lm_experts.py", description=__doc__.split("\n")[0])
    ap.add_argument("manifest", help="the runs, as scripts/lm_experts.sh writes them")
    ap.add_argument("-o", "--output", metavar="MD", required=True, help="the tables (markdown)")
    ap.add_argument("--png", metavar="PNG", help="the picture (matplotlib)")
    ap.add_argument("--steps", type=int, help="the equal-steps table's steps, for its title")
    ap.add_argument("--budget", help="the equal-time table's seconds, for its title")
    ap.add_argument("--np", default="2", help="the ranks, for the header")
    ap.add_argument("--corpus", default="fortunes", help="the data, for the header")
    a = ap.parse_args()
    runs = read_manifest(a.manifest)
    text = markdown(runs, a)
    tmp = "%s.tmp.%d" % (a.output, os.getpid())
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, a.output)
    except OSError as e:
        fail("%s: %s" % (a.output, e.strerror))
    print("%s: wrote %s (%d runs)" % (PROG, a.output, len(runs)))
    if a.png:
        if plot(runs, a.png):
            print("%s: wrote %s" % (PROG, a.png))
        else:
            print("%s: no plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib); "
                  "the tables are in %s" % (PROG, a.output))


if __name__ == "__main__":
    main()
