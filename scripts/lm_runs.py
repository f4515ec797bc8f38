#!/usr/bin/python3
"""scripts/lm_runs.py — what a language-model run's --metrics file says,
read in one place: scripts/lm_plot.py and scripts/lm_experts.py import it,
and on its own it prints one markdown table row a run.

    python3 scripts/lm_runs.py [LABEL=]FILE...

A --metrics file is JSON Lines, one object a logged step, as a compiled
program's --metrics writes them (man gslrun, LOG AND METRICS) and as
bench/lm_torch_train.py writes them for PyTorch:

    {"step": 100, "loss": 2.1, "eval_loss": 2.2, "eval_ce": 2.19, "tokens_per_s": 36600.0,
     "elapsed_s": 30.1, "ms_per_step": 28.2, "eval_s": 1.2, "peak_rss_kib": [402112, 398080]}

eval_* only at evaluation steps, peak_rss_kib (one number a rank) only in
the last record, and an MoE program's "moe.NAME.drop" (the fraction of
routed choices dropped at capacity) where it has moe blocks.

summary(FILE) reduces a file to one run's numbers:
  steps        the last record's step
  eval_ce      the last evaluation's held-out cross-entropy (eval_ce, else
               eval_loss), nats a token (a byte), and eval_step its step
  train_s      seconds of training: the sum over records of ms_per_step
               times the steps since the record before (evaluations and
               checkpoints left out, as the runtime leaves them out of
               ms_per_step)
  tokens_step  tokens a step (tokens_per_s * ms_per_step / 1000: B (T + 1)
               for the LM), tokens = steps * tokens_step
  tokens_per_s tokens / train_s
  wall_s       the last record's elapsed_s (evaluations included)
  rss_max_kib, rss_sum_kib  the largest rank's peak RSS and the ranks' sum
  drop         the mean of the last record's moe.*.drop values (None
               without moe blocks)
A line that is not a JSON object (say, the half-written last line of a
run still going) is skipped with a warning. Exit status 0, 1 when a file
cannot be read or has no record, 2 on a usage error. Standard library only.
"""
import json
import math
import statistics
import sys

PROG = "lm_runs"


def number(v):
    """v as a finite float, or None (bools are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class MetricsError(Exception):
    """A metrics file that cannot be read or holds no record."""


def records(path, prog=PROG):
    """The JSON objects of a metrics file, in order, with the line each is
    on: [(line, dict)]; other lines are skipped with a warning under prog's
    name."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise MetricsError("%s: %s" % (path, e.strerror))
    out = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            print("%s: warning: %s:%d: not a JSON object, skipped" % (prog, path, n), file=sys.stderr)
            continue
        out.append((n, obj))
    return out


def summary(path, prog=PROG):
    """One run's numbers (the module's header lists them), as a dict."""
    recs = [r for _, r in records(path, prog) if number(r.get("step")) is not None]
    if not recs:
        raise MetricsError("%s: no record with a step (is it a --metrics file of a training run?)" % path)
    s = {"path": path, "steps": int(recs[-1]["step"]), "eval_ce": None, "eval_step": None,
         "train_s": 0.0, "tokens_step": None, "tokens": None, "tokens_per_s": None,
         "wall_s": number(recs[-1].get("elapsed_s")), "rss_max_kib": None, "rss_sum_kib": None, "drop": None}
    prev, per_step = 0, []
    for r in recs:
        step, ms, tps = int(r["step"]), number(r.get("ms_per_step")), number(r.get("tokens_per_s"))
        if ms is not None and step > prev:
            s["train_s"] += ms * (step - prev) / 1000.0
        if ms is not None and tps is not None and ms > 0:
            per_step.append(tps * ms / 1000.0)
        prev = max(prev, step)
        ce = number(r.get("eval_ce", r.get("eval_loss")))
        if ce is not None:
            s["eval_ce"], s["eval_step"] = ce, step
        rss = r.get("peak_rss_kib")
        if isinstance(rss, list) and rss and all(number(x) is not None for x in rss):
            s["rss_max_kib"], s["rss_sum_kib"] = max(rss), sum(rss)
        drops = [number(v) for k, v in r.items() if k.startswith("moe.") and k.endswith(".drop")]
        drops = [d for d in drops if d is not None]
        if drops:
            s["drop"] = sum(drops) / len(drops)
    if per_step:
        s["tokens_step"] = round(statistics.median(per_step))
        s["tokens"] = s["steps"] * s["tokens_step"]
        if s["train_s"] > 0:
            s["tokens_per_s"] = s["tokens"] / s["train_s"]
    return s


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


HEADER = ("| run | steps | tokens seen | training time | wall time | tokens/s | peak RSS (largest rank) "
          "| held-out nats/byte (step) |\n| --- | --- | --- | --- | --- | --- | --- | --- |")


def row(label, s):
    """A markdown table row of summary s, under HEADER's columns."""
    return "| %s | %s | %s | %s s | %s s | %s | %s MiB | %s (%s) |" % (
        label, format(s["steps"], ","), fmt(s["tokens"] and s["tokens"] / 1e6, ".3g") + " M",
        fmt(s["train_s"], ".0f"), fmt(s["wall_s"], ".0f"), fmt(s["tokens_per_s"], ",.0f"),
        fmt(s["rss_max_kib"] and s["rss_max_kib"] / 1024, ".0f"), fmt(s["eval_ce"], ".4f"),
        fmt(s["eval_step"], ","))


def main(argv):
    if not argv or any(a in ("-h", "--help") for a in argv):
        print(__doc__.split("\n\n")[1].strip())
        return 0 if argv else 2
    rows = []
    for a in argv:
        label, path = a.split("=", 1) if "=" in a else (a, a)
        try:
            rows.append(row(label, summary(path)))
        except MetricsError as e:
            print("%s: error: %s" % (PROG, e), file=sys.stderr)
            return 1
    print(HEADER)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
