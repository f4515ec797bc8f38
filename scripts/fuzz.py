#!/usr/bin/python3
"""scripts/fuzz.py — a self-contained mutation fuzzer for gslc (run by
scripts/fuzz.sh, which builds the sanitized gslc it drives).

Method. The seeds are the .gsl files of the corpus directories. Each
execution takes a seed (or, one time in four, a mutant that compiled
cleanly earlier: the pool lets mutations stack past the parser), applies
one to four mutations, writes the result to a scratch file and runs
`gslc --emit-spmd` on it (one run in eight `--explain`, one in eight
`-c -o scratch.o`) under a per-run timeout. Mutations:

  byte      flip a bit, insert, delete or overwrite a byte
  splice    replace a run of tokens with a run from another seed
  line      duplicate, delete or swap lines
  number    replace a number with one at a limit (0, 2^31, 2^63, 1e308, ...)
  name      replace a name with a long one (up to 5000 bytes)
  nest      wrap an expression in deep parentheses, unary minus, [0]
            indexing, or append a long `+ x` chain
  token     insert a keyword, operator or punctuation token

A finding is a sanitizer report (AddressSanitizer, LeakSanitizer,
UndefinedBehaviorSanitizer), a death by signal, an exit status other than
0 or 1, a timeout, or an exit status 1 whose stderr has neither a located
`file:line:col: error:` line nor a `gslc: error:` line. Findings are
grouped by a signature (kind and the first frame or line that says where)
and the first few inputs of each are saved in the findings directory as
NNNN-KIND.gsl with .stderr and .cmd beside them. At the end (the duration
is in seconds) it prints the execs, execs/s and the findings.

Standard library only; deterministic for a given --seed.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|"
                       r"UndefinedBehaviorSanitizer|SUMMARY: \w+Sanitizer")
LOCATED = re.compile(r"^[^\n]*:\d+:\d+: error: |^gslc: error: ", re.M)
TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\"[^\"\n]*\"|"
                   r"#[^\n]*|\s+|->|==|!=|<=|>=|\+=|\*\*|.", re.S)
NUMBERS = ["0", "1", "-1", "2", "3", "7", "255", "256", "65535", "65536", "2147483647",
           "2147483648", "4294967295", "4294967296", "4611686018427387904",
           "4611686018427387905", "9223372036854775807", "9223372036854775808",
           "18446744073709551615", "18446744073709551616", "99999999999999999999999",
           "1099511627776", "1099511627777", "0.0", "1e308", "1e309", "1e-320", "3.4e38",
           "3.5e38", "-0.0", "00000000000000000001"]
TOKENS = ["fn", "let", "return", "param", "input", "output", "mesh", "const", "import",
          "split", "f32", "i32", "(", ")", "[", "]", "{", "}", ",", ":", ";", "=", "+", "-",
          "*", "/", "@", "**", "<", ">", "==", "!", "\n", "sum", "mean", "reshape", "concat",
          "one_hot", "einsum", "gather", "cumsum", "softmax", "uniform", "normal", "zeros",
          "ones", "\"ij,jk->ik\"", "\"\"", "keep = true", "true", "false"]


def tokens(text):
    return TOKEN.findall(text)


class Mutator:
    def __init__(self, rng, seeds):
        self.rng = rng
        self.seeds = seeds
        self.seed_tokens = [tokens(s) for s in seeds]

    def byte(self, t):
        b = bytearray(t.encode("utf-8", "surrogateescape"))
        if not b:
            return chr(self.rng.randrange(256))
        i = self.rng.randrange(len(b))
        op = self.rng.randrange(4)
        if op == 0:
            b[i] ^= 1 << self.rng.randrange(8)
        elif op == 1:
            b.insert(i, self.rng.randrange(256))
        elif op == 2:
            del b[i]
        else:
            b[i] = self.rng.choice(b"(){}[],:;=+-*/@#\"\n\t 0129azAZ_\x00\xff")
        return b.decode("utf-8", "surrogateescape")

    def splice(self, t):
        a = tokens(t)
        b = self.rng.choice(self.seed_tokens)
        if not a or not b:
            return t
        i = self.rng.randrange(len(a))
        j = min(len(a), i + self.rng.randrange(1, 30))
        k = self.rng.randrange(len(b))
        m = min(len(b), k + self.rng.randrange(1, 60))
        return "".join(a[:i] + b[k:m] + a[j:])

    def line(self, t):
        lines = t.split("\n")
        if not lines:
            return t
        i = self.rng.randrange(len(lines))
        op = self.rng.randrange(3)
        if op == 0:
            lines[i:i] = [lines[i]] * self.rng.choice([1, 1, 2, 10, 100])
        elif op == 1:
            del lines[i]
        else:
            j = self.rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)

    def number(self, t):
        a = tokens(t)
        idx = [i for i, x in enumerate(a) if x[0].isdigit()]
        if not idx:
            return t
        a[self.rng.choice(idx)] = self.rng.choice(NUMBERS)
        return "".join(a)

    def name(self, t):
        a = tokens(t)
        idx = [i for i, x in enumerate(a) if x[0].isalpha() or x[0] == "_"]
        if not idx:
            return t
        i = self.rng.choice(idx)
        n = self.rng.choice([64, 255, 256, 511, 512, 513, 1024, 5000])
        long_name = (a[i] + "_" * n)[:n]
        if self.rng.randrange(2):  # rename every use alike, so the program may stay valid
            a = [long_name if x == a[i] else x for x in a]
        else:
            a[i] = long_name
        return "".join(a)

    def nest(self, t):
        a = tokens(t)
        idx = [i for i, x in enumerate(a) if x[0].isalnum() or x[0] == "_"]
        if not idx:
            return t
        i = self.rng.choice(idx)
        n = self.rng.choice([10, 100, 1000, 5000, 9000, 10001, 20000])
        op = self.rng.randrange(4)
        if op == 0:
            a[i] = "(" * n + a[i] + ")" * n
        elif op == 1:
            a[i] = "-" * n + a[i]
        elif op == 2:
            a[i] = a[i] + "[0]" * n
        else:
            a[i] = " + ".join([a[i]] * n)
        return "".join(a)

    def token(self, t):
        a = tokens(t)
        i = self.rng.randrange(len(a) + 1)
        a.insert(i, self.rng.choice(TOKENS))
        return "".join(a)

    def mutate(self, t):
        ops = [self.byte, self.byte, self.splice, self.splice, self.line, self.number,
               self.name, self.nest, self.token, self.token]
        for _ in range(self.rng.choice([1, 1, 2, 3, 4])):
            t = self.rng.choice(ops)(t)
        return t


def classify(rc, timed_out, err):
    """The finding's kind and signature, or None for an accepted outcome."""
    m = SANITIZER.search(err)
    if m:
        frame = re.search(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+)", err)
        where = re.search(r"^(\S+:\d+:\d+): runtime error: ([^\n]*)", err, re.M)
        if where:
            sig = where.group(1) + " " + re.sub(r"\d+", "N", where.group(2))[:80]
        elif frame:
            sig = frame.group(1) + " " + frame.group(2)
        else:
            sig = m.group(0)
        kind = "ubsan" if "runtime error" in m.group(0) or "Undefined" in m.group(0) else "asan"
        return kind, kind + ": " + sig
    if timed_out:
        return "timeout", "timeout"
    if rc < 0:
        return "signal", "signal %d" % -rc
    if rc not in (0, 1):
        return "status", "exit status %d" % rc
    if rc == 1 and not LOCATED.search(err):
        first = err.strip().split("\n")[0] if err.strip() else "(empty stderr)"
        return "unlocated", "unlocated: " + re.sub(r"\d+", "N", first)[:100]
    return None


def main():
    ap = argparse.ArgumentParser(description="mutation fuzzer for gslc")
    ap.add_argument("--gslc", required=True, help="the (sanitized) gslc to run")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz")
    ap.add_argument("--findings", required=True, help="directory for the findings")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per run")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    ap.add_argument("--keep", type=int, default=3, help="inputs saved per signature")
    ap.add_argument("corpus", nargs="+", help="directories (or files) of .gsl seeds")
    o = ap.parse_args()

    files = []
    for c in o.corpus:
        if os.path.isdir(c):
            files += sorted(os.path.join(c, f) for f in os.listdir(c) if f.endswith(".gsl"))
        elif c.endswith(".gsl"):
            files.append(c)
    seeds = []
    for f in files:
        with open(f, encoding="utf-8", errors="surrogateescape") as fh:
            seeds.append(fh.read())
    if not seeds:
        sys.exit("fuzz.py: no .gsl seeds in " + " ".join(o.corpus))
    seed = o.seed if o.seed is not None else int(time.time())
    rng = random.Random(seed)
    mut = Mutator(rng, seeds)
    os.makedirs(o.findings, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="gslfuzz.")
    src = os.path.join(scratch, "fuzz.gsl")
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:symbolize=1:" + env.get("ASAN_OPTIONS", "")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:" + env.get("UBSAN_OPTIONS", "")
    pool = []  # mutants that compiled cleanly: mutated further
    execs = 0
    signatures = {}  # signature -> [count, kind, first saved file]
    saved = 0
    print("fuzz.py: %d seeds, %.0f s, random seed %d, findings in %s" %
          (len(seeds), o.seconds, seed, o.findings), flush=True)
    start = time.time()
    last_report = start
    try:
        while time.time() - start < o.seconds:
            base = rng.choice(pool) if pool and rng.randrange(4) == 0 else rng.choice(seeds)
            text = mut.mutate(base)
            with open(src, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(text)
            r = rng.randrange(8)
            if r == 0:
                args = [o.gslc, "--explain", "fuzz.gsl"]
            elif r == 1:
                args = [o.gslc, "-c", "fuzz.gsl", "-o", "fuzz.o"]
            else:
                args = [o.gslc, "--emit-spmd", "fuzz.gsl"]
            timed_out = False
            try:
                p = subprocess.run(args, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   timeout=o.timeout)
                rc, err = p.returncode, p.stderr
            except subprocess.TimeoutExpired as e:
                timed_out, rc, err = True, -9, e.stderr or b""
            err = err.decode("utf-8", "replace")
            execs += 1
            found = classify(rc, timed_out, err)
            if found is None:
                if rc == 0 and len(pool) < 500 and len(text) < 200000:
                    pool.append(text)
                continue
            kind, sig = found
            entry = signatures.setdefault(sig, [0, kind, None])
            entry[0] += 1
            if entry[0] <= o.keep:
                saved += 1
                stem = os.path.join(o.findings, "%04d-%s" % (saved, kind))
                shutil.copyfile(src, stem + ".gsl")
                with open(stem + ".stderr", "w") as fh:
                    fh.write(err)
                with open(stem + ".cmd", "w") as fh:
                    fh.write(" ".join(args[1:]).replace("fuzz.gsl", stem + ".gsl") + "\n")
                if entry[2] is None:
                    entry[2] = stem + ".gsl"
                    print("fuzz.py: new finding: %s (%s)" % (sig, stem + ".gsl"), flush=True)
            now = time.time()
            if now - last_report > 60:
                print("fuzz.py: %d execs, %.1f/s, %d findings (%d signatures)" %
                      (execs, execs / (now - start), sum(e[0] for e in signatures.values()),
                       len(signatures)), flush=True)
                last_report = now
    except KeyboardInterrupt:
        pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.time() - start
    total = sum(e[0] for e in signatures.values())
    print("execs: %d" % execs)
    print("execs/s: %.1f" % (execs / elapsed if elapsed > 0 else 0))
    print("findings: %d (%d distinct signatures, %d inputs saved in %s)" %
          (total, len(signatures), saved, o.findings))
    for sig, (count, kind, first) in sorted(signatures.items(), key=lambda kv: -kv[1][0]):
        print("  %6d  %s  e.g. %s" % (count, sig, first))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
