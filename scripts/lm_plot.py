#!/usr/bin/python3
"""scripts/lm_plot.py — the loss curves of two language-model runs, an
MoE one and a dense one, in one PNG (`make lm-plot`).

    python3 scripts/lm_plot.py [--moe FILE] [--dense FILE] [-o PNG]
                               [--title TEXT] [--linear] [--time]
                               [--eval KEY] [--script FILE]

Reads the --metrics files the two runs wrote (JSON Lines, one object per
logged step, as a compiled program's --metrics writes them):

    {"step": 10, "loss": 1.23, "tokens_per_s": ..., "elapsed_s": ..., "ms_per_step": ...}

and, at evaluation steps, "eval_loss" too; a line may carry "loss",
"eval_loss", both, or (when only the held-out batches were measured at
that step) "eval_loss" alone. From each file it takes the train loss and
the eval loss (or, with --eval KEY, that value: eval_ce for an LM's
cross-entropy without its load-balancing terms) against the step and
draws four curves: train loss as thin light lines, eval loss as thick
dark lines with points, blue for MoE and red for dense; against the
wall-clock time of the run (elapsed_s) instead of the step with --time,
to compare runs of equal time. The y axis is logarithmic (the loss falls
fast, then slowly: a log axis keeps the slow part readable) unless
--linear. A file without eval_loss lines gives its train curve alone; a
line that is not a JSON object (say, the half-written last line of a run
still going) is skipped with a warning, and so is a value that is not a
finite number.

Where the MoE run's records carry its moe blocks' signals, two panels
below show them per block against the step, one colour a block and one
dash type a quantity:

  load     the busiest expert's load times E ("moe.NAME.load_max", else
           computed from "moe.NAME.load", the array of the experts' load
           fractions), the least one's ("moe.NAME.load_min") and the
           standard deviation of the loads times E ("moe.NAME.load_std"):
           an even load has max and min 1 and std 0; one expert taking
           every choice, max E and min 0;
  routing  on the left axis, the fraction of routed choices dropped at
           capacity ("moe.NAME.drop") and the fraction of experts that got
           nothing ("moe.NAME.idle"); on the right one, the router's
           entropy in nats ("moe.NAME.entropy") and, in a run with a
           routing bias, the spread of the bias, max minus min
           ("moe.NAME.bias_range").

A key a file lacks (an older run's records carry load and drop alone) is
left out, and a panel with nothing to show with it. With more than 2000
records a block, every k-th is drawn (and the last), to keep gnuplot's
data small. --script FILE writes the gnuplot program run to FILE too.

Draws with gnuplot (Debian: gnuplot-nox, which has the pngcairo terminal):
the data go inline on gnuplot's standard input, the PNG is written to a
temporary name and renamed, its directory created if missing. Exit status
0, 1 on a run-time error (a missing or empty file, no gnuplot, gnuplot
failing), 2 on a usage error. Standard library only.
"""
import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # importing lm_runs leaves no __pycache__ in scripts/
import lm_runs  # noqa: E402  (the one reader of --metrics files)
from lm_runs import number  # noqa: E402

PROG = "lm_plot"


def fail(msg, status=1):
    print("%s: error: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(status)


# the router's quantities, in the order of a block's values: (metrics key
# suffix, curve title after the block's name, panel, axes, dash type);
# "load_max" falls back on max(load) * E, from the "load" array
ROUTER = (("load_max", "max", "load", "x1y1", 1),
          ("load_std", "std", "load", "x1y1", 2),
          ("load_min", "min", "load", "x1y1", 3),
          ("drop", "dropped", "routing", "x1y1", 1),
          ("idle", "idle", "routing", "x1y1", 3),
          ("entropy", "entropy", "routing", "x1y2", 2),
          ("bias_range", "bias range", "routing", "x1y2", 4))
ROUTER_KEYS = {q[0]: k for k, q in enumerate(ROUTER)}
DASHES = {1: "solid", 2: "dashed", 3: "dotted", 4: "dash-dot"}  # gnuplot's dash types, as titles name them
MAX_POINTS = 2000  # the router's records drawn a block, at most (about: every k-th, and the last)


def read_metrics(path, eval_key, x_key="step"):
    """(train, eval, router): lists of (step, loss) in file order, from a
    metrics file, eval from eval_key (or eval_loss in a line without it);
    router maps each moe block's name to its [(step, values)], values a
    tuple in ROUTER's order, None where the record lacks one."""
    try:
        objs = lm_runs.records(path, PROG)
    except lm_runs.MetricsError as e:
        fail(str(e))
    train, held, router = [], [], {}
    for n, obj in objs:
        step = number(obj.get(x_key))
        if step is None:
            print("%s: warning: %s:%d: no %s, skipped" % (PROG, path, n, x_key), file=sys.stderr)
            continue
        for key, out in (("loss", train), (eval_key if eval_key in obj else "eval_loss", held)):
            if key not in obj:
                continue
            v = number(obj[key])
            if v is None or v <= 0:
                print("%s: warning: %s:%d: %s is %r, skipped" % (PROG, path, n, key, obj[key]),
                      file=sys.stderr)
                continue
            out.append((step, v))
        blocks = {}  # name: values, of this record
        for key, v in obj.items():
            prefix, _, suffix = key.rpartition(".")  # a block's name may hold dots: "moe.lm.gsl:74.drop"
            if not prefix.startswith("moe.") or len(prefix) == len("moe.") or suffix not in ROUTER_KEYS:
                continue
            v = number(v)
            if v is not None:
                blocks.setdefault(prefix[len("moe."):], [None] * len(ROUTER))[ROUTER_KEYS[suffix]] = v
        for key, load in obj.items():  # the busiest expert's load from the array, where no load_max
            name = key[len("moe."):-len(".load")]
            if not (key.startswith("moe.") and key.endswith(".load") and name and isinstance(load, list) and load):
                continue
            loads = [number(x) for x in load]
            values = blocks.setdefault(name, [None] * len(ROUTER))
            if None not in loads and values[ROUTER_KEYS["load_max"]] is None:
                values[ROUTER_KEYS["load_max"]] = max(loads) * len(loads)
        for name, values in blocks.items():
            if any(v is not None for v in values):
                router.setdefault(name, []).append((step, tuple(values)))
    if not train and not held:
        fail("%s: no loss or eval_loss in any line (is it a --metrics file of a training run?)" % path)
    return train, held, router


def thin(points, most=MAX_POINTS):
    """Every k-th of points, and the last, k the least that leaves at most
    about most of them."""
    k = -(-len(points) // most)
    if k <= 1:
        return points
    out = points[::k]
    return out + points[-1:] if (len(points) - 1) % k else out


def quote(s):
    """s as a gnuplot string in double quotes."""
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


# y tics of the log axis: gnuplot's own are the decades only, and the loss
# of a byte-level model spans less than one; the fine ones for a short run
LOG_TICS = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 15, 20, 30)
FINE_TICS = tuple(round(m * 10 ** e, 3) for e in (-1, 0, 1)
                  for m in (1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.8, 2, 2.2, 2.4, 2.6, 2.8, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9))


def script(curves, router, out, title, linear, xlabel="step"):
    """The gnuplot program: the data blocks, then the plot (and, with
    router signals, the router's panels below it: load, routing)."""
    lo = min(v for c in curves for _, v in c[3])
    hi = max(v for c in curves for _, v in c[3])
    lines = []
    for name, _, _, points in curves:
        lines.append("$%s << EOD" % name)
        lines.extend("%.17g %.9g" % p for p in points)
        lines.append("EOD")
    blocks = sorted(router.items())
    for k, (_, points) in enumerate(blocks):
        lines.append("$router%d << EOD" % k)
        lines.extend("%.17g " % step + " ".join("?" if v is None else "%.9g" % v for v in values)
                     for step, values in thin(points))
        lines.append("EOD")
    # the quantities each panel draws, those some record has: (block's index, its name, quantity's index)
    drawn = {panel: [(k, name, q) for k, (name, points) in enumerate(blocks) for q in range(len(ROUTER))
                     if ROUTER[q][2] == panel and any(v[q] is not None for _, v in points)]
             for panel in ("load", "routing")}
    panels = [p for p in ("load", "routing") if drawn[p]]
    lines += [
        "set terminal pngcairo size 1000,%d enhanced font 'sans,11'" % (640 + 400 * len(panels)),
        "set output %s" % quote(out),
        "set encoding utf8",
    ]
    if panels:  # the panels' left and right margins fixed, to line their x axes up
        lines += ["set multiplot layout %d,1" % (1 + len(panels)), "set lmargin screen 0.09",
                  "set rmargin screen 0.91"]
    lines += [
        "set title %s" % quote(title),
        "set xlabel %s" % quote(xlabel),
        "set ylabel %s" % quote("loss (nats per byte%s)" % ("" if linear else ", log scale")),
        "set grid xtics ytics lc rgb '#dddddd'",
        "set key top right box opaque",
        "set border 3",
        "set tics nomirror",
        "set xrange [0:*]",
    ]
    if not linear:
        lines += ["set logscale y", "set yrange [%.6g:%.6g]" % (lo / 1.05, hi * 1.05)]
        tics = [t for t in LOG_TICS if lo / 1.05 <= t <= hi * 1.05]
        if len(tics) < 4:
            tics = [t for t in FINE_TICS if lo / 1.05 <= t <= hi * 1.05]
        if len(tics) >= 2:
            lines.append("set ytics (%s)" % ", ".join("%g" % t for t in tics))
    plots = []
    for name, label, style, _ in curves:
        plots.append("$%s using 1:2 with %s title %s noenhanced" % (name, style, quote(label)))
    lines.append("plot " + ", \\\n     ".join(plots))
    if not panels:
        return "\n".join(lines) + "\n"
    colors = ("#1f4f9f", "#2e8b57", "#b8860b", "#8b008b", "#b03020", "#008b8b")
    lines += ["unset logscale y", "unset ytics", "set ytics nomirror", "set yrange [0:*]", "set xrange [0:*]",
              "set datafile missing '?'"]
    for panel in panels:
        said = {}  # the panel's quantities on each axis: {title: dash type}
        for _, _, q in drawn[panel]:
            said.setdefault(ROUTER[q][3], {}).setdefault(ROUTER[q][1], DASHES[ROUTER[q][4]])
        # the key below the panel, a row a block and a column a quantity (gnuplot fills it column by
        # column), under the x axis's label: the bottom margin made room for both
        rows = len({k for k, _, _ in drawn[panel]})
        lines += ["set key bmargin center vertical nobox Left reverse samplen 2 maxrows %d" % rows,
                  "set bmargin %d" % (4 + rows)]
        title = "; right: ".join(", ".join("%s (%s)" % kv for kv in said[a].items())
                                 for a in ("x1y1", "x1y2") if a in said)
        if panel == "load":
            lines += ["set title %s" % quote("MoE router, expert load x E: " + title),
                      "set ylabel 'load x E, 1 is even'"]
        else:
            lines += ["set title %s" % quote("MoE router: " + title),
                      "set ylabel %s" % quote("fraction " + ", ".join(said["x1y1"])) if "x1y1" in said
                      else "unset ylabel"]
        if "x1y2" in said:
            lines += ["set y2range [0:*]", "set y2tics nomirror", "set border 11",
                      "set y2label %s" % quote(", ".join("entropy (nats)" if n == "entropy" else n
                                                         for n in said["x1y2"]))]
        else:
            lines += ["unset y2tics", "unset y2label", "set border 3"]
        plots = []
        for k, name, q in sorted(drawn[panel], key=lambda d: (d[2], d[0])):
            _, label, _, axes, dt = ROUTER[q]
            plots.append("$router%d using 1:%d axes %s with lines lw %g dt %d lc rgb '%s' title %s noenhanced"
                         % (k, q + 2, axes, 2 if dt == 1 else 1.5, dt, colors[k % len(colors)],
                            quote(name + " " + label)))
        lines.append("plot " + ", \\\n     ".join(plots))
    lines.append("unset multiplot")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(
        prog="lm_plot.py",
        description="Train and eval loss against step of an MoE and a dense LM run, "
                    "from their --metrics files, in one PNG (gnuplot).")
    ap.add_argument("--moe", metavar="FILE", default="runs/lm.jsonl",
                    help="the MoE run's --metrics file (default runs/lm.jsonl)")
    ap.add_argument("--dense", metavar="FILE", default="runs/lm_dense.jsonl",
                    help="the dense run's --metrics file (default runs/lm_dense.jsonl)")
    ap.add_argument("-o", "--output", metavar="PNG", default="doc/lm_loss.png",
                    help="the picture (default doc/lm_loss.png)")
    ap.add_argument("--title", default="byte-level LM on the fortunes corpus: MoE against dense",
                    help="the picture's title")
    ap.add_argument("--linear", action="store_true", help="a linear y axis (default: logarithmic)")
    ap.add_argument("--time", action="store_true",
                    help="against the runs' wall-clock seconds (elapsed_s) instead of the step")
    ap.add_argument("--eval", metavar="KEY", default="eval_loss",
                    help="the eval curve's metrics key, e.g. eval_ce for the held-out cross-entropy "
                         "alone (default eval_loss; a line without KEY gives its eval_loss)")
    ap.add_argument("--script", metavar="FILE",
                    help="also write the gnuplot program it runs (data inline) to FILE")
    args = ap.parse_args()

    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        fail("gnuplot not found: it draws the picture (Debian: apt-get install gnuplot-nox)")

    curves, router = [], {}
    for run, path, dark, light in (("MoE", args.moe, "#1f4f9f", "#8fb2e6"),
                                   ("dense", args.dense, "#b03020", "#eba399")):
        train, held, signals = read_metrics(path, args.eval, "elapsed_s" if args.time else "step")
        if run == "MoE":
            router = signals
        key = run.lower()
        if train:
            curves.append((key + "_train", "%s train" % run, "lines lw 1 lc rgb '%s'" % light, train))
        if held:
            curves.append((key + "_eval", "%s held out (%s)" % (run, args.eval),
                           "linespoints lw 2.5 pt 7 ps 0.9 lc rgb '%s'" % dark, held))

    out = args.output
    folder = os.path.dirname(out)
    try:
        if folder:
            os.makedirs(folder, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (folder, e.strerror))
    tmp = "%s.tmp.%d.png" % (out, os.getpid())
    program = script(curves, router, tmp, args.title, args.linear, "seconds of training" if args.time else "step")
    if args.script:
        try:
            with open(args.script, "w", encoding="utf-8") as f:
                f.write(program)
        except OSError as e:
            fail("%s: %s" % (args.script, e.strerror))
    try:
        run = subprocess.run([gnuplot], input=program, capture_output=True, text=True)
    except OSError as e:
        fail("%s: %s" % (gnuplot, e.strerror))
    if run.returncode != 0 or not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail("gnuplot failed (status %d)%s" % (run.returncode, ":\n" + run.stderr.strip() if run.stderr else ""))
    try:
        os.replace(tmp, out)
    except OSError as e:
        fail("%s: %s" % (out, e.strerror))
    for name, label, _, points in curves:
        print("%s: %-24s %4d points, steps %g-%g, loss %.4g -> %.4g"
              % (PROG, label, len(points), points[0][0], points[-1][0], points[0][1], points[-1][1]))
    for name, points in sorted(router.items()):
        said = []
        for key, label in (("drop", "dropped"), ("load_max", "max load x E"), ("load_min", "min"),
                           ("load_std", "std"), ("idle", "idle"), ("entropy", "entropy"),
                           ("bias_range", "bias range")):
            values = [v[ROUTER_KEYS[key]] for _, v in points if v[ROUTER_KEYS[key]] is not None]
            if values:
                said.append("%s %.3g -> %.3g" % (label, values[0], values[-1]))
        drawn = len(thin(points))
        print("%s: router %-15s %4d points%s, %s" % (PROG, name, len(points),
                                                   " (%d drawn)" % drawn if drawn < len(points) else "",
                                                   ", ".join(said)))
    print("%s: wrote %s" % (PROG, out))


if __name__ == "__main__":
    main()
