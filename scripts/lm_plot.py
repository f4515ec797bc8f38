#!/usr/bin/python3
"""scripts/lm_plot.py — the loss curves of two language-model runs, an
MoE one and a dense one, in one PNG (`make lm-plot`).

    python3 scripts/lm_plot.py [--moe FILE] [--dense FILE] [-o PNG]
                               [--title TEXT] [--linear]

Reads the --metrics files the two runs wrote (JSON Lines, one object per
logged step, as a compiled program's --metrics writes them):

    {"step": 10, "loss": 1.23, "tokens_per_s": ..., "elapsed_s": ..., "ms_per_step": ...}

and, at evaluation steps, "eval_loss" too; a line may carry "loss",
"eval_loss", both, or (when only the held-out batches were measured at
that step) "eval_loss" alone. From each file it takes the train loss and
the eval loss (or, with --eval KEY, that value: eval_ce for an LM's
cross-entropy without its load-balancing terms) against the step and
draws four curves: train loss as thin
light lines, eval loss as thick dark lines with points, blue for MoE and
red for dense. The y axis is logarithmic (the loss falls fast, then slowly: a log
axis keeps the slow part readable) unless --linear. A file without
eval_loss lines gives its train curve alone; a line that is not a JSON
object (say, the half-written last line of a run still going) is skipped
with a warning, and so is a value that is not a finite number.

Draws with gnuplot (Debian: gnuplot-nox, which has the pngcairo terminal):
the data go inline on gnuplot's standard input, the PNG is written to a
temporary name and renamed, its directory created if missing. Exit status
0, 1 on a run-time error (a missing or empty file, no gnuplot, gnuplot
failing), 2 on a usage error. Standard library only.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

PROG = "lm_plot"


def fail(msg, status=1):
    print("%s: error: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(status)


def number(v):
    """v as a finite float, or None (bools are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def read_metrics(path, eval_key):
    """(train, eval): lists of (step, loss) in file order, from a metrics
    file; eval from eval_key, or eval_loss in a line without it."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    train, held = [], []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            print("%s: warning: %s:%d: not a JSON object, skipped" % (PROG, path, n), file=sys.stderr)
            continue
        step = number(obj.get("step"))
        if step is None:
            print("%s: warning: %s:%d: no step, skipped" % (PROG, path, n), file=sys.stderr)
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
    if not train and not held:
        fail("%s: no loss or eval_loss in any line (is it a --metrics file of a training run?)" % path)
    return train, held


def quote(s):
    """s as a gnuplot string in double quotes."""
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


# y tics of the log axis: gnuplot's own are the decades only, and the loss
# of a byte-level model spans less than one; the fine ones for a short run
LOG_TICS = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 15, 20, 30)
FINE_TICS = tuple(round(m * 10 ** e, 3) for e in (-1, 0, 1)
                  for m in (1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.8, 2, 2.2, 2.4, 2.6, 2.8, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9))


def script(curves, out, title, linear):
    """The gnuplot program: the data blocks, then the plot."""
    lo = min(v for c in curves for _, v in c[3])
    hi = max(v for c in curves for _, v in c[3])
    lines = []
    for name, _, _, points in curves:
        lines.append("$%s << EOD" % name)
        lines.extend("%.17g %.9g" % p for p in points)
        lines.append("EOD")
    lines += [
        "set terminal pngcairo size 1000,640 enhanced font 'sans,11'",
        "set output %s" % quote(out),
        "set encoding utf8",
        "set title %s" % quote(title),
        "set xlabel 'step'",
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
    ap.add_argument("--eval", metavar="KEY", default="eval_loss",
                    help="the eval curve's metrics key, e.g. eval_ce for the held-out cross-entropy "
                         "alone (default eval_loss; a line without KEY gives its eval_loss)")
    args = ap.parse_args()

    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        fail("gnuplot not found: it draws the picture (Debian: apt-get install gnuplot-nox)")

    curves = []
    for run, path, dark, light in (("MoE", args.moe, "#1f4f9f", "#8fb2e6"),
                                   ("dense", args.dense, "#b03020", "#eba399")):
        train, held = read_metrics(path, args.eval)
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
    try:
        run = subprocess.run([gnuplot], input=script(curves, tmp, args.title, args.linear),
                             capture_output=True, text=True)
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
    print("%s: wrote %s" % (PROG, out))


if __name__ == "__main__":
    main()
