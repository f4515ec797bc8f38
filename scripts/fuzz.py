#!/usr/bin/python3
"""scripts/fuzz.py — a self-contained mutation fuzzer for gslc and for the
files a compiled program reads (run by scripts/fuzz.sh, which builds the
sanitized gslc and libgslrt it drives). Two modes; findings are judged and
saved alike.

Compile-time mode (the default). The seeds are the .gsl files under the
corpus directories (searched recursively) and EXTRA_SEEDS (loops and
every optimizer keyword on a mesh). Each execution takes a seed (or, one
time in four, a mutant that compiled cleanly earlier: the pool lets
mutations stack past the parser), chosen by the time its runs take (one
ten times as slow is run a tenth as often), applies one to four
mutations, writes the result to a scratch file and runs `gslc
--emit-spmd` on it (one run in eight `--explain`, one in 32 `-c -o
scratch.o`, which costs fifteen times the rest; on a program with a mesh
one in six `--auto-shard --machine FILE` with --emit-spmd, --explain or
--stats, the mesh's const sizes set to 1, 2 or 4 by -D) under a per-run
timeout. The machine file is valid one time in four, else mutated: a
value to a limit of machine.c's range (0 < x <= 1e15), tiny, huge, NaN,
hex or no number; a key unknown, misspelt, of an unknown axis or given
twice; lines duplicated, deleted, swapped or longer than machine.c's
512-byte buffer; NUL, 0xff, CR and control bytes; the separator; the
file empty, comments only, CRLF or 20000 lines. With --server (the fork
server scripts/gslc_server, built by fuzz.sh) gslc is loaded once and
forked per run, and LeakSanitizer checks one run in --leak-every (its
scan costs more than a small run); one run in --exec-every is exec'd as
before. Mutations:

  byte      flip a bit, insert, delete or overwrite a byte
  splice    replace a run of tokens with a run from another seed
  line      duplicate, delete or swap lines
  number    replace a number with one at a limit (0, 2^31, 2^63, 1e308, ...)
  name      replace a name with a long one (up to 5000 bytes)
  nest      wrap an expression in deep parentheses, unary minus, [0]
            indexing, or append a long `+ x` chain
  token     insert a keyword, operator or punctuation token (loop headers
            among them)
  optim     rewrite the train statement's `with OPT(...)`: another
            optimizer, some of its keywords and the schedule's (warmup,
            decay, decay_steps, min_lr, clip) at f32's and a step count's
            limits, negatives, names and expressions

A finding is a sanitizer report (AddressSanitizer, LeakSanitizer,
UndefinedBehaviorSanitizer), a death by signal, an exit status other than
0 or 1, a timeout (unless the unmutated seed times out too, as the -c of
examples/lm.gsl does in a sanitized build), or an exit status 1 whose
stderr has neither a located `file:line:col: error:` line nor a `gslc:
error:` line.

Run-time mode (--runtime). The sanitized gslc compiles RUNTIME_PROGRAM (a
small model that trains params of f32 and i32 with adam's f32 states, and
reads an i32 token input through gather and an f32 input) for one device
and for two, each linked with the sanitized libgslrt.a; that program writes
a valid checkpoint (--checkpoint DIR --steps 2), and this script writes
valid input and held-out .npy files of 3 and 2 cycling batches. Each
execution copies them to a scratch directory, mutates one or two of

  manifest  the checkpoint's manifest.json, knowing JSON but no field of
            it: a number to a limit, a float, a negative or 1e30; a string
            to another of the document, to "", a huge one, a path with '/'
            or '..', a control character, a lone surrogate; a value to
            another type or to deep nesting; a key deleted, duplicated or
            added; an object's keys reordered; an array's elements
            duplicated (two tensors of one name), deleted or swapped; the
            document re-indented, truncated, byte-flipped, given a BOM,
            comments, or junk after it
  tensor    one of the checkpoint's .npy files (its header's descr,
            fortran_order or shape, the header length, magic, version,
            padding, truncation, the data's length or values), its size
            and crc32 in the manifest fixed to match, three times in four,
            so that the mutant gets past them to the .npy reader
  input     an --input or --eval-input .npy file: the same mutations, and
            token values out of the table's range, NaN and infinities
  dir       the checkpoint directory: a lock or junk file, a leftover
            step-*.tmp.* directory, a newer incomplete step directory, a
            tensor file replaced by a directory, a symbolic link or a FIFO

and runs the program under a timeout: `--checkpoint DIR --resume --steps
3 --input ...` (training one step and writing a checkpoint), `--resume
--steps 2 --eval-input ...` (evaluating the checkpoint) or `--input ...
--steps 2` (fresh, sometimes with --eval-input and --eval-every 1); one
run in six on two ranks under mpiexec, one in four with --output. A
disturbance of the directory that hung the program three times is not
tried again (each hang costs the whole timeout). Besides the
findings above (with exit status 1 expected to bring exactly one line
"PROG: rank R: error: CAUSE" without control characters, as runtime/fail.c
prints it; mpiexec's own "Abort(1) on node ..." line aside), a finding is
an exit status 0 with an error line, and an exit status 0 on a mutated
manifest that is not JSON (RFC 8259: UTF-8, no BOM, no NaN, nothing after
the document). An exit status 0 on a manifest that is JSON but breaks the
valid one's shape — a key it always had missing or duplicated, a value of
another JSON type (an integer that became 2.9 or 1e30, a string that
became a number) — is saved as "lenient": no crash, but a reader that
should have refused. Other exit statuses 0 and 1 are accepted: whether a
mutant changed a field's meaning is not judged.

Generation (eight runs in 28). GEN_PROGRAM maps windows of 5 tokens to
the scores of V = 16 (man/gslrun.7 GENERATION) and is trained, with a
schedule and clipping, to a checkpoint of its own (gck). A run generates
from it (or from no checkpoint, the other program's, a missing one; one
in four times from its checkpoint's manifest or a tensor mutated as
above) with --generate N, a prompt (--prompt of 1 to 4102 bytes,
--prompt-file of up to 1 MB, empty, a directory, missing, /dev/null; its
bytes tokens, or one at or past V, 0xff, UTF-8, NUL, an escape sequence),
and sometimes --temperature, --top-k and --seed: each value good in half
the runs, else bad one time in six (limits, signs, inf, nan, hex, empty,
huge); now and then an option generation refuses, one given twice or in
the --opt=value form. Besides the findings above, exit status 2 must
bring a usage error ("PROG: error: CAUSE" and "Try 'PROG --help'."),
and exit status 0 must have written exactly N bytes, each below V. The
runs are exec'd: a compiled program's MPI_Init, MPICH's singleton start,
is most of a run, and a fork server's parent must not call it.

Findings are grouped by a signature (kind and the first frame or line
that says where) and the first few of each are saved in the findings
directory: a compile-time one as NNNN-KIND.gsl with .stderr and .cmd
beside it; a run-time one as the directory NNNN-KIND/ holding the mutated
files, stderr, mutations (what was done) and run.sh, which reruns it. At
the end (the duration is in seconds) it prints the execs, execs/s and the
findings.

Standard library only; deterministic for a given --seed.
"""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|"
                       r"UndefinedBehaviorSanitizer|SUMMARY: \w+Sanitizer")
LOCATED = re.compile(r"^[^\n]*:\d+:\d+: error: |^gslc: error: ", re.M)
TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.(?!\.)\d*)?(?:[eE][-+]?\d+)?|\"[^\"\n]*\"|"
                   r"#[^\n]*|\s+|->|==|!=|<=|>=|\+=|\*\*|\.\.|.", re.S)
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
          "ones", "\"ij,jk->ik\"", "\"\"", "keep = true", "true", "false", "for", "in", "..",
          "for i in 0..3 {", "for i in 2..1 {"]


# The most bytes one mutation may add by repeating (a line, a name at
# every use), and the largest mutant: without them a 20 kB line repeated
# 100 times and then a name renamed to 5000 bytes at every use made
# hundreds of MB, on which the tokenizer ran for minutes (fuzz.py stalled
# with no run under way).
MUTANT_GROWTH = 1 << 20
MUTANT_MAX = 4 << 20


def tokens(text):
    return TOKEN.findall(text)


# Seeds of the newer surface, besides the corpus's: a loop that rebinds
# names in a trained program on a two-axis mesh (for --auto-shard and
# --machine runs), a train statement with every schedule keyword, and
# regions recomputed (remat fn, remat for) with a random draw inside.
EXTRA_SEEDS = ["""\
const DP = 2
const MP = 2
const L = 3
mesh [data = DP, model = MP]
param w: f32[L, 8, 8] = normal(0.1)
param b: f32[8] = zeros()
input x: f32[16, 8]
let h = x
for l in 0..L {
  let h = tanh(h @ w[l] + b)
}
train mean(h * h) with adam(lr = 0.01, beta1 = 0.8, warmup = 2, decay = cosine, decay_steps = 10, min_lr = 0.001, clip = 1.0)
output h
""", """\
const N = 4
mesh [d = 2]
param w: f32[N, 4] split(0) = normal(0.1)
input x: f32[N, 4] split(0)
let s = 0
for i in 0..N {
  for j in i..N {
    let s = s + sum(w[i] * x[j])
  }
}
train s * s with momentum(lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01, decay = linear, decay_steps = 5)
output s
""", """\
const L = 4
mesh [data = 2]
param w1: f32[L, 8, 16] = normal(0.1)
param w2: f32[L, 16, 8] = normal(0.1)
input x: f32[4, 8] shard([data, _])
remat fn block(h, a, b) {
  let u = gelu(h @ a) * uniform_like(h @ a)
  return h + u @ b
}
let h = x
remat for l in 0..L / 2 {
  let h = block(h, w1[2 * l], w2[2 * l])
  let h = tanh(h @ w1[2 * l + 1]) @ w2[2 * l + 1]
}
train mean(h * h) with adam(lr = 0.01)
output h
"""]

# The optimizers and the keywords they take (compiler/optim.def), the
# schedule's and clipping's every optimizer takes (sema.c), and values:
# limits of f32 and of a step count, negatives, names, expressions.
OPTIMIZERS = ["sgd", "momentum", "adam", "adamw", "sgd", "adam", "adagrad", "Adam", "lr"]
OPT_KEYWORDS = ["lr", "beta1", "beta2", "eps", "weight_decay", "momentum", "nesterov", "warmup", "decay",
                "decay_steps", "min_lr", "clip", "schedule", "beta3", "lr"]
OPT_VALUES = ["0", "1", "0.001", "0.01", "0.9", "0.999", "1e-8", "1e-45", "1e-46", "1.4e-45", "1e-50",
              "3.4e38", "3.4028235e38", "3.5e38", "1e308", "1e309", "-1", "-0.0", "0.5", "2.5", "10",
              "16777216", "16777217", "4294967296", "1e9", "true", "false", "cosine", "linear", "constant",
              "exponential", "\"cosine\"", "LR", "N * 2", "(1)", "-(-1)", "1 / 0", "0 / 0", "x", "[1, 2]",
              "cosine(1)", "0.999999999", "1 - 1e-9", "99999999999999999999"]


def optim_op(rng, t):
    """The train statement's optimizer call rewritten: another optimizer,
    some of its keywords and the schedule's, at values from OPT_VALUES (a
    decay mostly a decay's name). A text without `with NAME(` is returned
    unchanged."""
    m = re.search(r"\bwith\s+\w+\s*\(", t)
    if not m:
        return t
    depth, end = 0, len(t)
    for i in range(m.end() - 1, len(t)):
        depth += {"(": 1, ")": -1}.get(t[i], 0)
        if depth == 0:
            end = i + 1
            break
    args = []
    for _ in range(rng.choice([0, 1, 2, 3, 4, 6, 8])):
        k = rng.choice(OPT_KEYWORDS)
        if k == "decay" and rng.randrange(4):
            v = rng.choice(["cosine", "linear", "constant"])
        elif k in ("decay_steps", "warmup") and rng.randrange(2):
            v = rng.choice(["0", "1", "5", "100", "16777216", "16777217", "2.5", "-1", "1e9"])
        else:
            v = rng.choice(OPT_VALUES)
        args.append("%s = %s" % (k, v) if rng.randrange(16) else v)
    return t[:m.start()] + "with %s(%s)" % (rng.choice(OPTIMIZERS), ", ".join(args)) + t[end:]


# A machine file (compiler/machine.c): the keys, and values at limits
# (machine.c takes 0 < x <= 1e15), tiny and huge, and not numbers.
MACHINE_KEYS = ["gemm_f32_gflops", "gemm_bf16_gflops", "memory_gbs", "rng_gbs", "link_gbs", "latency_us"]
MACHINE_DEFAULTS = ["112", "225", "6", "0.1", "2.2", "0.4"]
MACHINE_NUMBERS = ["1e15", "999999999999999", "1000000000000000.1", "1e15.0", "1.0000000000000002e15",
                   "1e16", "1e308", "1e309", "1", "0.5", "1e-3", "1e-6", "1e-9", "1e-300", "4.9e-324",
                   "2.2250738585072014e-308", "0", "-0", "-1", "nan", "NaN", "inf", "-inf", "infinity",
                   "0x10", "0x1p-1074", "0x1p+49", "1e", ".", "1..2", "1 2", "", "+5", "5.", ".5", "1e+2",
                   "00000000000000000000000001", "1" * 400, "1_000", "5 # a comment", "5\t", "\t5"]


def machine_text(rng, axes):
    """A valid machine file: some of the keys, one a line, at their
    defaults or other positive rates, with link_gbs.AXIS for some of the
    mesh's axes, comments and blank lines."""
    lines = ["# fuzz.py's machine file"]
    for k, v in zip(MACHINE_KEYS, MACHINE_DEFAULTS):
        if rng.randrange(4):
            lines.append("%s = %s" % (k, v if rng.randrange(2) else rng.choice(["1", "50", "0.25", "1000"])))
    for a in axes:
        if rng.randrange(2):
            lines.append("link_gbs.%s = %s  # axis %s" % (a, rng.choice(["0.5", "2.2", "20"]), a))
    rng.shuffle(lines)
    return "\n".join(lines) + "\n"


def machine_mutate(rng, text, axes):
    """A mutant of a machine file's text and what was done."""
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        lines = text.split("\n")
        op = rng.randrange(10)
        i = rng.randrange(len(lines))
        if op < 3:  # a value to a limit, tiny, huge or not a number
            keyed = [j for j, ln in enumerate(lines) if "=" in ln] or [i]
            i = rng.choice(keyed)
            key = lines[i].split("=")[0].strip() or rng.choice(MACHINE_KEYS)
            lines[i] = "%s = %s" % (key, rng.choice(MACHINE_NUMBERS))
            done.append("value")
        elif op == 3:  # a key unknown, misspelt, of an unknown axis, given twice
            key = rng.choice(["foo", "GEMM_F32_GFLOPS", "gemm_f32_gflops ", "link_gbs.", "link_gbs.nowhere",
                              "link_gbs.%s.%s" % ((axes or ["d"])[0], (axes or ["d"])[0]), "link_gbs..",
                              "=", "", "latency", "a" * 600] + MACHINE_KEYS + ["link_gbs." + a for a in axes])
            lines.insert(i, "%s = %s" % (key, rng.choice(MACHINE_DEFAULTS)))
            done.append("key")
        elif op == 4:  # a line duplicated, deleted or swapped
            j = rng.randrange(len(lines))
            r = rng.randrange(3)
            if r == 0:
                lines.insert(i, lines[i])
            elif r == 1:
                del lines[i]
            else:
                lines[i], lines[j] = lines[j], lines[i]
            done.append("line")
        elif op == 5:  # a long line: of spaces, a comment, a key or a value
            n = rng.choice([510, 511, 512, 513, 1023, 1024, 4096, 70000])
            r = rng.randrange(4)
            lines.insert(i, (" " * n + "memory_gbs = 6", "# " + "c" * n, "k" * n + " = 1",
                             "latency_us = " + "0" * n + "1")[r])
            done.append("long line (%d)" % n)
        elif op == 6:  # bytes: NUL, 0xff, CR, a BOM, a tab, control characters
            b = bytearray(text.encode("utf-8", "surrogateescape"))
            for _ in range(rng.choice([1, 1, 4, 64])):
                j = rng.randrange(len(b) + 1)
                b[j:j] = bytes([rng.choice([0, 0xff, 0xfe, 13, 9, 1, 0x7f, 0x80, 0xc3, ord("="), ord("#")])])
            text = b.decode("utf-8", "surrogateescape")
            done.append("bytes")
            continue
        elif op == 7:  # the separator
            keyed = [j for j, ln in enumerate(lines) if "=" in ln] or [i]
            i = rng.choice(keyed)
            lines[i] = lines[i].replace("=", rng.choice(["", "==", ":", " = = ", "=\n", "\t=\t"]), 1)
            done.append("separator")
        elif op == 8:  # the whole: empty, comments only, no final newline, CRLF, many lines
            r = rng.randrange(5)
            text = ("", "# nothing\n#\n", text.rstrip("\n"), text.replace("\n", "\r\n"),
                    "# c\n" * 20000 + text)[r]
            done.append(("empty", "comments only", "no final newline", "CRLF", "20000 lines")[r])
            continue
        else:  # a number's digits
            lines[i] = re.sub(r"\d", lambda _: rng.choice("0123456789"), lines[i])
            done.append("digits")
        text = "\n".join(lines)
    return text, ", ".join(done)


def mesh_axes(text):
    """The axes of a program's mesh [a = X, b = 2]: [(name, value text)]."""
    m = re.search(r"^mesh\s*\[([^\]\n]*)\]", text, re.M)
    if not m:
        return []
    return re.findall(r"([A-Za-z_]\w*)\s*=\s*([A-Za-z_0-9]+)", m.group(1))


# ---- the compile-time mutator ---------------------------------------------------------

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
            k = self.rng.choice([1, 1, 2, 10, 100])
            lines[i:i] = [lines[i]] * (k if len(lines[i]) * k <= MUTANT_GROWTH else 1)
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
        if self.rng.randrange(2) and a.count(a[i]) * n <= MUTANT_GROWTH:  # every use alike: it may stay valid
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

    def optim(self, t):
        return optim_op(self.rng, t)

    def mutate(self, t):
        ops = [self.byte, self.byte, self.splice, self.splice, self.line, self.number,
               self.name, self.nest, self.token, self.token, self.optim]
        for _ in range(self.rng.choice([1, 1, 2, 3, 4])):
            m = self.rng.choice(ops)(t)
            if len(m) > MUTANT_MAX:  # mutants of mutants grew to hundreds of MB, and fuzz.py stalled on them
                break
            t = m
        return t


# ---- running and judging, both modes --------------------------------------------------

def run(args, cwd, env, timeout, out=None):
    """Runs args in its own process group (mpiexec's ranks included), stdout
    discarded (or written to the file out): (status, timed out, stderr). A
    timeout kills the group."""
    fh = open(out, "wb") if out else subprocess.DEVNULL
    try:
        p = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=fh, stderr=subprocess.PIPE, start_new_session=True)
    finally:
        if out:
            fh.close()
    try:
        _, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = p.communicate()
        timed_out = True
    return p.returncode, timed_out, err.decode("utf-8", "replace")


class Server:
    """A fork server (scripts/fuzz_server.c) that runs its target, loaded
    once, in a forked child per request or in a persistent child that runs
    many: run() as the function of that name, the target's argv[0] aside.
    Restarted if it dies."""

    def __init__(self, path, env, scratch):
        self.path, self.env, self.scratch = path, env, scratch
        self.proc = None
        self.runs = 0

    def start(self):
        self.proc = subprocess.Popen([self.path], cwd=self.scratch, env=self.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def stop(self):
        if self.proc:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None

    def run(self, args, cwd, timeout, leaks=True, persistent=False):
        """leaks: whether the run ends with LeakSanitizer's check (if the
        server's ASAN_OPTIONS have detect_leaks=1), the costliest part of a
        small forked run; persistent: in the persistent child, without
        it (its result depends on the child's earlier runs if it is not a
        clean one: run such a run again forked)."""
        out = os.path.join(self.scratch, "server.out")
        err = os.path.join(self.scratch, "server.err")
        flags = "l" if leaks else "p" if persistent else "-"
        fields = [str(int(timeout * 1000)), flags, os.path.abspath(cwd), out, err] + list(args)
        request = b"".join(os.fsencode(f) + b"\0" for f in fields) + b"\0"
        for attempt in (0, 1):
            if self.proc is None:
                self.start()
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
                line = self.proc.stdout.readline().decode("ascii", "replace").split()
            except (BrokenPipeError, OSError):
                line = []
            if line:
                break
            self.proc.kill()  # died: start it again once
            self.proc.wait()
            self.proc = None
        else:
            raise OSError("the fork server %s answers nothing" % self.path)
        self.runs += 1
        with open(err, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        if line[0] == "timeout":
            return -signal.SIGKILL, True, text
        if line[0] == "signal":
            return -int(line[1]), False, text
        return int(line[1]), False, text


def classify_crash(rc, timed_out, err):
    """A sanitizer report, timeout, signal or unexpected status: (kind,
    signature), or None."""
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
    return None


def classify(rc, timed_out, err):
    """A compile-time run's finding: (kind, signature), or None."""
    found = classify_crash(rc, timed_out, err)
    if found:
        return found
    if rc == 1 and not LOCATED.search(err):
        first = err.strip().split("\n")[0] if err.strip() else "(empty stderr)"
        return "unlocated", "unlocated: " + re.sub(r"\d+", "N", first)[:100]
    return None


class Findings:
    """The signatures seen, their counts, and the inputs saved."""

    def __init__(self, where, keep):
        self.where = where
        self.keep = keep
        self.signatures = {}  # signature -> [count, kind, first saved file]
        self.saved = 0
        os.makedirs(where, exist_ok=True)

    def add(self, kind, sig, save):
        """Counts a finding; save(stem) stores its input if it is among the
        first --keep of its signature and returns the saved path."""
        entry = self.signatures.setdefault(sig, [0, kind, None])
        entry[0] += 1
        if entry[0] > self.keep:
            return
        self.saved += 1
        path = save(os.path.join(self.where, "%04d-%s" % (self.saved, kind)))
        if entry[2] is None:
            entry[2] = path
            print("fuzz.py: new finding: %s (%s)" % (sig, path), flush=True)

    def total(self):
        return sum(e[0] for e in self.signatures.values())

    def progress(self, execs, elapsed):
        print("fuzz.py: %d execs, %.1f/s, %d findings (%d signatures)" %
              (execs, execs / elapsed if elapsed > 0 else 0, self.total(), len(self.signatures)),
              flush=True)

    def report(self, execs, elapsed):
        print("execs: %d" % execs)
        print("execs/s: %.1f" % (execs / elapsed if elapsed > 0 else 0))
        print("findings: %d (%d distinct signatures, %d inputs saved in %s)" %
              (self.total(), len(self.signatures), self.saved, self.where))
        for sig, (count, kind, first) in sorted(self.signatures.items(), key=lambda kv: -kv[1][0]):
            print("  %6d  %s  e.g. %s" % (count, sig, first))


def sanitizer_env(leaks):
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ("detect_leaks=%d:abort_on_error=0:symbolize=1:" % leaks +
                           env.get("ASAN_OPTIONS", ""))
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:" + env.get("UBSAN_OPTIONS", "")
    return env


def fuzz_loop(o, findings, step):
    """Calls step() (which runs one mutant and returns nothing) for
    o.seconds, printing progress each minute; (execs, elapsed). An
    exception in step() (a bug of this script) is printed and the run goes
    on, up to 10 of them."""
    execs = errors = 0
    start = time.time()
    last_report = start
    try:
        while time.time() - start < o.seconds:
            try:
                step()
            except (OSError, ValueError, TypeError, IndexError, KeyError, UnicodeError):
                errors += 1
                print("fuzz.py: an error of the fuzzer itself (%d of 10 allowed):" % errors,
                      file=sys.stderr, flush=True)
                traceback.print_exc()
                if errors == 10:
                    break
            execs += 1
            now = time.time()
            if now - last_report > 60:
                findings.progress(execs, now - start)
                last_report = now
    except KeyboardInterrupt:
        pass
    return execs, time.time() - start


def tiny_rate(text):
    """Whether a machine file's text sets a rate below 1e-4 (> 0), which
    makes CBC abort (known, being fixed in compiler/machine.c)."""
    for v in re.findall(r"=\s*([^\s#=]+)", text):
        for parse in (float, float.fromhex):  # strtod reads hex floats too (0x1p-1074)
            try:
                if 0 < parse(v) < 1e-4:
                    return True
            except (ValueError, OverflowError):
                pass
    return False


def gsl_files(corpus):
    files = []
    for c in corpus:
        if os.path.isdir(c):
            for d, subdirs, names in os.walk(c):
                subdirs[:] = sorted(s for s in subdirs if not s.startswith("."))
                files += sorted(os.path.join(d, f) for f in names if f.endswith(".gsl"))
        elif c.endswith(".gsl"):
            files.append(c)
    return files


def fuzz_compile(o, rng, findings):
    seeds = []
    for f in gsl_files(o.corpus):
        with open(f, encoding="utf-8", errors="surrogateescape") as fh:
            seeds.append(fh.read())
    if not seeds:
        sys.exit("fuzz.py: no .gsl seeds in " + " ".join(o.corpus))
    seeds += EXTRA_SEEDS
    mut = Mutator(rng, seeds)
    scratch = tempfile.mkdtemp(prefix="gslfuzz.", dir=o.scratch)
    src = os.path.join(scratch, "fuzz.gsl")
    machine = os.path.join(scratch, "fuzz.machine")
    costs = [0.1] * len(seeds)  # seconds a run of each seed's mutants takes, a moving average
    by_mode = {}  # mode -> runs
    env = sanitizer_env(1)
    server_env = dict(env, LD_BIND_NOW="1")  # every symbol bound in the server, not in each child
    server = Server(o.server, server_env, scratch) if o.server else None
    execs_by = {"persistent": 0, "forked": 0, "exec": 0, "rerun": 0, "not reproduced": 0}

    def run_gslc(args, timeout):
        """A run through the fork server (in its persistent child, or one
        in --leak-every and every -c forked, with LeakSanitizer's check),
        or one in --exec-every (and every one without a server) by exec. A
        persistent run that is not clean is run again forked, and that
        run's result is the one judged."""
        if server and (o.exec_every <= 0 or rng.randrange(o.exec_every) != 0):
            leaks = rng.randrange(o.leak_every) == 0
            if leaks or not o.persistent:
                execs_by["forked"] += 1
                return server.run(args, scratch, timeout, leaks)
            execs_by["persistent"] += 1
            result = server.run(args, scratch, timeout, False, True)
            if result[1] or classify(*result) is None:
                return result
            execs_by["rerun"] += 1
            again = server.run(args, scratch, timeout, True)
            if classify(*again) is None:
                execs_by["not reproduced"] += 1
            return again
        execs_by["exec"] += 1
        return run(args, scratch, env, timeout)
    pool = []  # mutants that compiled cleanly, with their runs' seconds: mutated further
    slow_bases = {}  # (base, mode) -> whether the unmutated base times out too
    slow = [0]  # runs that timed out as their unmutated base does
    print("fuzz.py: %d seeds, %.0f s, random seed %d, findings in %s" %
          (len(seeds), o.seconds, o.seed, o.findings), flush=True)

    def base_too_slow(base, args):
        """Whether the unmutated base times out too in this mode (the -c of
        examples/lm.gsl takes longer than the timeout in a sanitized build),
        or takes more than half of it (on a loaded machine the -c of
        examples/moe.gsl takes 5 to 13 s): then the mutant's timeout is not
        a finding. Asked again after each timeout until it says so."""
        key = (base, args[1])
        if not slow_bases.get(key):
            with open(os.path.join(scratch, "base.gsl"), "w", encoding="utf-8",
                      errors="surrogateescape") as fh:
                fh.write(base)
            t0 = time.time()
            timed_out = run_gslc([a.replace("fuzz.gsl", "base.gsl") for a in args], o.timeout)[1]
            slow_bases[key] = timed_out or time.time() - t0 > o.timeout / 2
        return slow_bases[key]

    def step():
        # a base chosen by the time its runs take: a seed that takes ten
        # times as long is run a tenth as often (equal time for the slow)
        if pool and rng.randrange(4) == 0:
            k, (base, _) = None, rng.choices(pool, [1 / max(c, 0.03) for _, c in pool])[0]
        else:
            k = rng.choices(range(len(seeds)), [1 / max(c, 0.03) for c in costs])[0]
            base = seeds[k]
        text = mut.mutate(base)
        with open(src, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
        axes = mesh_axes(text)
        mtext = None
        r = rng.randrange(32)
        if r < 4:
            args, mode = [o.gslc, "--explain", "fuzz.gsl"], "--explain"
        elif r == 4 and rng.randrange(4) == 0:  # codegen: fifteen times the cost of the rest, on average
            args, mode = [o.gslc, "-c", "fuzz.gsl", "-o", "fuzz.o"], "-c"
        elif r < 10 and axes:  # the cost search, priced with a machine file (mutated three times in four)
            mtext = machine_text(rng, [a for a, _ in axes])
            what = "valid"
            if rng.randrange(4):
                mtext, what = machine_mutate(rng, mtext, [a for a, _ in axes])
            with open(machine, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(mtext)
            args = [o.gslc, "--auto-shard", "--machine", "fuzz.machine",
                    rng.choice(["--emit-spmd", "--explain", "--stats"])]
            for name, value in axes:  # the mesh's sizes that are consts: 1, 2 or 4 devices
                if not value[0].isdigit() and rng.randrange(4):
                    args += ["-D", "%s=%d" % (name, rng.choice([1, 2, 2, 4]))]
            args.append("fuzz.gsl")
            mode = "--auto-shard --machine (%s)" % ("valid" if what == "valid" else "mutated")
        else:
            args, mode = [o.gslc, "--emit-spmd", "fuzz.gsl"], "--emit-spmd"
        t0 = time.time()
        rc, timed_out, err = run_gslc(args, o.timeout)
        took = time.time() - t0
        runs, secs = by_mode.get(mode, (0, 0.0))
        by_mode[mode] = (runs + 1, secs + took)
        if k is not None:
            costs[k] = 0.8 * costs[k] + 0.2 * took
        found = classify(rc, timed_out, err)
        if found and mtext is not None and found == ("signal", "signal 6") and tiny_rate(mtext):
            found = "known", "signal 6 on a machine file with a rate below 1e-4 (known: CBC aborts)"
        if timed_out and base_too_slow(base, args):
            slow[0] += 1
            return
        if found is None:
            if rc == 0 and len(pool) < 500 and len(text) < 200000:
                pool.append((text, took))
            return

        def save(stem):
            shutil.copyfile(src, stem + ".gsl")
            if mtext is not None:
                shutil.copyfile(machine, stem + ".machine")
            with open(stem + ".stderr", "w") as fh:
                fh.write(err)
            with open(stem + ".cmd", "w") as fh:
                fh.write(" ".join(shlex.quote(a) for a in args[1:]).replace("fuzz.gsl", stem + ".gsl")
                         .replace("fuzz.machine", stem + ".machine") + "\n")
            return stem + ".gsl"
        findings.add(found[0], found[1], save)

    try:
        return fuzz_loop(o, findings, step)
    finally:
        if server:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        print("runs in the fork server's persistent child: %d (not clean, so run again forked: %d, of which "
              "not reproduced: %d), forked: %d, exec'd: %d" % (execs_by["persistent"], execs_by["rerun"],
                                                            execs_by["not reproduced"], execs_by["forked"],
                                                            execs_by["exec"]))
        print("runs by mode (and their seconds): " +
              ", ".join("%s: %d (%.0f s)" % (m, n, t) for m, (n, t) in sorted(by_mode.items())))
        if slow[0]:
            print("runs that timed out as their unmutated seed does (not findings): %d" % slow[0])


# ---- JSON with the place of every value, for mutating a manifest in place ----------------

JSON_WS = re.compile(r"[ \t\r\n]*")
JSON_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"')
JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")


class JNode:
    """A JSON value: its kind ("obj", "arr", "str", "int", "float", "bool",
    "null"), its span [start, end) in the text, its normalized path ($.a[].b),
    and for an object its members [(key node, value node)], for an array its
    items."""
    __slots__ = ("kind", "start", "end", "path", "members", "items")

    def __init__(self, kind, start, path):
        self.kind, self.start, self.end, self.path = kind, start, start, path
        self.members, self.items = [], []


def jparse(t, max_depth=200):
    """Parses JSON text t (a str) into a tree of JNode with every value
    listed in document order: (root, nodes). ValueError if t is not JSON
    (or nests deeper than max_depth)."""
    nodes = []
    pos = 0

    def ws():
        nonlocal pos
        pos = JSON_WS.match(t, pos).end()

    def value(path, depth):
        nonlocal pos
        ws()
        if depth > max_depth or pos >= len(t):
            raise ValueError("too deep or truncated")
        c = t[pos]
        if c == "{":
            n = JNode("obj", pos, path)
            nodes.append(n)
            pos += 1
            ws()
            if pos < len(t) and t[pos] == "}":
                pos += 1
            else:
                while True:
                    ws()
                    m = JSON_STRING.match(t, pos)
                    if not m:
                        raise ValueError("expected a key")
                    k = JNode("str", pos, path)
                    k.end = pos = m.end()
                    ws()
                    if pos >= len(t) or t[pos] != ":":
                        raise ValueError("expected ':'")
                    pos += 1
                    key = json.loads(m.group(0))
                    n.members.append((k, value("%s.%s" % (path, key), depth + 1)))
                    ws()
                    if pos < len(t) and t[pos] == ",":
                        pos += 1
                        continue
                    if pos < len(t) and t[pos] == "}":
                        pos += 1
                        break
                    raise ValueError("expected ',' or '}'")
        elif c == "[":
            n = JNode("arr", pos, path)
            nodes.append(n)
            pos += 1
            ws()
            if pos < len(t) and t[pos] == "]":
                pos += 1
            else:
                while True:
                    n.items.append(value(path + "[]", depth + 1))
                    ws()
                    if pos < len(t) and t[pos] == ",":
                        pos += 1
                        continue
                    if pos < len(t) and t[pos] == "]":
                        pos += 1
                        break
                    raise ValueError("expected ',' or ']'")
        elif c == '"':
            m = JSON_STRING.match(t, pos)
            if not m:
                raise ValueError("bad string")
            n = JNode("str", pos, path)
            nodes.append(n)
            pos = m.end()
        elif c == "-" or c.isdigit():
            m = JSON_NUMBER.match(t, pos)
            if not m:
                raise ValueError("bad number")
            n = JNode("float" if re.search(r"[.eE]", m.group(0)) else "int", pos, path)
            nodes.append(n)
            pos = m.end()
        else:
            for word, kind in (("true", "bool"), ("false", "bool"), ("null", "null")):
                if t.startswith(word, pos):
                    n = JNode(kind, pos, path)
                    nodes.append(n)
                    pos += len(word)
                    break
            else:
                raise ValueError("unexpected character")
        n.end = pos
        return n

    root = value("$", 0)
    ws()
    if pos != len(t):
        raise ValueError("text after the document")
    return root, nodes


def strict_json(raw):
    """Why the bytes raw are not JSON as RFC 8259 has it (UTF-8 without a
    BOM, no NaN or Infinity, nothing after the document), or None."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    if text.startswith("\ufeff"):
        return "a byte order mark"

    def no_constant(name):
        raise ValueError("the constant " + name)
    try:
        json.loads(text, parse_constant=no_constant)
    except RecursionError:
        return None  # JSON, only deep
    except json.JSONDecodeError as e:
        return re.sub(r"\d+", "N", e.msg)
    except ValueError as e:
        return str(e)
    return None


class Schema:
    """The shape of a valid document: the JSON kinds seen at each path and
    the keys every object at a path has."""

    def __init__(self, text):
        _, nodes = jparse(text)
        self.kinds = {}
        self.required = {}
        for n in nodes:
            self.kinds.setdefault(n.path, set()).add(n.kind)
            if n.kind == "obj":
                keys = {json.loads(text[k.start:k.end]) for k, _ in n.members}
                self.required[n.path] = self.required.get(n.path, keys) & keys

    FREE = ("$.signals.",)  # paths whose members a reader takes as they come (checkpoint.c: any
    # signal the program declared, each a number, null or an array of them)

    def breach(self, text):
        """The first way a JSON text departs from this shape (a key missing
        or given twice, a value of another kind), or None; the members of
        FREE's objects aside."""
        try:
            _, nodes = jparse(text)
        except (ValueError, RecursionError):
            return None
        for n in nodes:
            if n.path.startswith(self.FREE):
                continue
            want = self.kinds.get(n.path)
            if want and n.kind not in want:
                return "%s is %s, was %s" % (n.path, n.kind, "/".join(sorted(want)))
            if n.kind == "obj":
                keys = [json.loads(text[k.start:k.end]) for k, _ in n.members]
                dup = [k for k in keys if keys.count(k) > 1]
                if dup:
                    return "%s.%s given twice" % (n.path, dup[0])
                missing = sorted(self.required.get(n.path, set()) - set(keys)) \
                    if not (n.path + ".").startswith(self.FREE) else []
                if missing:
                    return "%s.%s missing" % (n.path, missing[0])
        return None


# ---- .npy files --------------------------------------------------------------------------

NPY_MAGIC = b"\x93NUMPY"


def npy_bytes(descr, shape, payload):
    """A .npy file as numpy.save writes it (version 1.0, header padded so
    that the data starts at a multiple of 64)."""
    dims = "(%s)" % ("%d," % shape[0] if len(shape) == 1 else ", ".join(str(d) for d in shape))
    return npy_join(1, 0, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims),
                    payload)


def npy_join(major, minor, dict_text, data, hlen=None, pad=True):
    h = dict_text.encode("latin-1")
    width = 2 if major == 1 else 4
    if pad:
        total = 8 + width + len(h) + 1
        h += b" " * (-total % 64) + b"\n"
    n = len(h) if hlen is None else hlen
    pre = NPY_MAGIC + bytes([major & 255, minor & 255])
    pre += struct.pack("<H", n & 0xFFFF) if width == 2 else struct.pack("<I", n & 0xFFFFFFFF)
    return pre + h + data


def npy_split(raw):
    """(major, minor, header text without its padding, data), or None."""
    if len(raw) < 10 or raw[:6] != NPY_MAGIC:
        return None
    major, minor = raw[6], raw[7]
    if major == 1:
        n, off = struct.unpack("<H", raw[8:10])[0], 10
    else:
        n, off = struct.unpack("<I", raw[8:12])[0], 12
    return major, minor, raw[off:off + n].decode("latin-1").rstrip(" \n"), raw[off + n:]


NPY_DESCRS = ["'<f4'", "'<i4'", "'<f8'", "'>f4'", "'>i4'", "'|u1'", "'<i8'", "'<u4'", "'O'", "''",
              "'<f2'", "\"<f4\"", "<f4", "'<f4", "None", "'<f4\\n'", "'<f\n4'", "'<\x00f4'",
              "'" + "f" * 40 + "'", "'" + "<f4" * 2000 + "'", "[('a', '<f4')]", "'<c8'"]
NPY_ORDERS = ["False", "True", "0", "1", "'False'", "None", "Fals", "False False", "FalseX", ""]
NPY_DIMS = [0, 1, 2, 3, 7, 255, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 32 + 2, 2 ** 62,
            2 ** 63 - 1, 2 ** 63, 2 ** 64, 10 ** 30]


class NpyMutator:
    """Mutations of a .npy file's header and data."""

    def __init__(self, rng):
        self.rng = rng

    def mutate(self, raw, int_limit=None):
        """A mutant of the .npy bytes raw and what was done. int_limit: the
        exclusive bound of valid i32 values (token ids), if any."""
        rng = self.rng
        parts = npy_split(raw)
        if parts is None:
            return self.bytes_op(raw)
        major, minor, text, data = parts
        entries = re.findall(r"'(\w+)': (\([^)]*\)|'[^']*'|\w+)", text)
        shape = [int(d) for d in re.findall(r"\d+", dict(entries).get("shape", ""))]
        i32 = "<i4" in text
        parsed = bool(entries)
        done = []
        hlen, pad, text_ops, bytes_op = None, True, [], False
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            op = rng.randrange(14)
            if op == 0:
                entries = [(k, rng.choice(NPY_DESCRS) if k == "descr" else v) for k, v in entries]
                done.append("descr")
            elif op == 1:
                entries = [(k, rng.choice(NPY_ORDERS) if k == "fortran_order" else v)
                           for k, v in entries]
                done.append("fortran_order")
            elif op == 2:
                s = list(shape)
                how = rng.randrange(6)
                if how == 0 and s:
                    s[rng.randrange(len(s))] = rng.choice(NPY_DIMS)
                elif how == 1:
                    s.insert(rng.randrange(len(s) + 1), rng.choice([1, 1, 2, 3]))
                elif how == 2 and s:
                    del s[rng.randrange(len(s))]
                elif how == 3:
                    s = [1] * rng.choice([7, 8, 9, 33, 64, 1000])
                elif how == 4:
                    s = []
                else:
                    s = [rng.choice(NPY_DIMS) for _ in s]
                dims = "(%s)" % ("%d," % s[0] if len(s) == 1 else ", ".join(str(d) for d in s))
                entries = [(k, dims if k == "shape" else v) for k, v in entries]
                done.append("shape %s" % dims[:40])
            elif op == 3:
                weird = rng.choice(["(-1,)", "(3.5,)", "('a',)", "((2, 3),)", "[3, 2, 3]",
                                    "(3 2 3)", "(3,,2)", "(,)", "(3L, 2L, 3L)", "( 3 , 2 , 3 , )",
                                    "(3, 2, 3", "3", "(0x3, 2, 3)", "(+3, 2, 3)", "(" * 500])
                entries = [(k, weird if k == "shape" else v) for k, v in entries]
                done.append("shape %s" % weird[:20])
            elif op == 4 and entries:
                how = rng.randrange(4)
                i = rng.randrange(len(entries))
                if how == 0:
                    del entries[i]
                elif how == 1:
                    entries.insert(i, entries[i])
                elif how == 2:
                    rng.shuffle(entries)
                else:
                    entries.insert(i, (rng.choice(["x", "descr ", "DESCR", "shape\n", "a" * 100]),
                                       rng.choice(["1", "'<f4'", "()", "None"])))
                done.append(("key deleted", "key repeated", "keys shuffled", "key added")[how])
            elif op == 5:
                hlen = rng.choice([0, 1, 2, 9, 65535, 2 ** 20, 2 ** 20 + 1, 2 ** 31, 2 ** 32 - 1])
                done.append("header length %d" % hlen)
            elif op == 6:
                major, minor = rng.choice([(0, 0), (1, 1), (2, 0), (3, 0), (4, 0), (255, 255),
                                           (2, 1), (1, 0)])
                done.append("version %d.%d" % (major, minor))
            elif op == 7:
                pad = False
                done.append("unpadded")
            elif op == 8:
                cut = rng.randrange(1, 1 + min(len(data), 64)) if data else 0
                if rng.randrange(2):
                    data = data[:len(data) - cut]
                    done.append("data %d bytes short" % cut)
                else:
                    data = data + bytes(cut + 1)
                    done.append("data %d bytes long" % (cut + 1))
            elif op == 9 and len(data) >= 4:
                k = rng.randrange(len(data) // 4)
                if i32:
                    lim = int_limit if int_limit is not None else 8
                    v = rng.choice([-1, lim, lim + 1, 2 ** 31 - 1, -2 ** 31, 1000000])
                    b = struct.pack("<i", v)
                else:
                    b = rng.choice([b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\x80\xff",
                                    struct.pack("<f", 3.4e38), b"\x01\x00\x00\x00",
                                    b"\x00\x00\x00\x80"])
                data = data[:4 * k] + b + data[4 * k + 4:]
                done.append("element %d = %s" % (k, struct.unpack("<i" if i32 else "<f", b)[0]))
            elif op == 10:
                text_ops.append(self.text_op)
                done.append("header text")
            elif op == 11:
                junk = rng.choice([" junk", "}", "\x00", "{}", "\n\n\n"])
                text_ops.append(lambda t, junk=junk: t + junk)
                done.append("after the dict %r" % junk)
            else:
                bytes_op = True
        text = self.dict_text(entries) if parsed else text
        for f in text_ops:
            text = f(text)
        raw = npy_join(major, minor, text, data, hlen, pad)
        if bytes_op:
            raw, what = self.bytes_op(raw)
            done.append(what)
        return raw, ", ".join(done)

    @staticmethod
    def dict_text(entries):
        return "{" + "".join("'%s': %s, " % kv for kv in entries) + "}"

    def text_op(self, text):
        rng = self.rng
        if not text:
            return "{"
        i = rng.randrange(len(text))
        op = rng.randrange(3)
        if op == 0:
            return text[:i] + chr(ord(text[i]) ^ (1 << rng.randrange(8))) + text[i + 1:]
        if op == 1:
            return text[:i] + rng.choice("{}(),:'\"\x00\n\t\xff ") + text[i:]
        return text[:i] + text[i + 1:]

    def bytes_op(self, raw):
        rng = self.rng
        b = bytearray(raw)
        op = rng.randrange(4)
        if op == 0 and b:
            cut = rng.choice([rng.randrange(len(b)), rng.randrange(min(len(b), 140))])
            return bytes(b[:cut]), "truncated at %d" % cut
        if op == 1 and b:
            i = rng.randrange(min(len(b), 140))
            b[i] ^= 1 << rng.randrange(8)
            return bytes(b), "bit flip at %d" % i
        if op == 2:
            i = rng.randrange(6)
            b[i:i + 1] = bytes([rng.randrange(256)])
            return bytes(b), "magic byte %d" % i
        return bytes(b[:rng.randrange(12)]), "cut in the preamble"


# ---- the run-time mode ---------------------------------------------------------------------

RUNTIME_PROGRAM = """\
# The run-time fuzzer's program (scripts/fuzz.py --runtime): params of f32
# and i32, adam's f32 states, an i32 token input read by gather and an f32
# input, split over d on a mesh of D devices (1 or 2).
const D = 1
mesh [d = D]
param table: f32[8, 4] = normal(0.1)
param w: f32[2, 4] split(0) = normal(0.1)
param count: i32[2] split(0) = ones()
input tok: i32[2, 3] split(0)
input x: f32[2, 3, 4] split(0)
let e = gather(table, tok) * x
train mean(e * reshape(w, [2, 1, 4])) + sum(cast(count, f32)) * 0.0 with adam(lr = 0.01)
output e
"""
VOCAB = 8  # table's rows: token ids are 0..VOCAB-1
GEN_PROGRAM = """\
# The run-time fuzzer's generating program (scripts/fuzz.py --runtime): it
# maps windows of 5 tokens to the scores of 16 (man/gslrun.7 GENERATION),
# trained with a schedule and clipping to a checkpoint it generates from.
const D = 1
mesh [d = D]
input tokens: i32[2, 5] split(0)
param emb: f32[16, 8] = normal(0.5)
param w: f32[8, 16] = normal(0.5)
let x = slice(tokens, 1, 0, 4)
let y = slice(tokens, 1, 1, 5)
let logits = gather(emb, x) @ w
train 0.0 - mean(logits * one_hot(y, 16)) + 0.01 * mean(logits * logits) with adam(lr = 0.01, warmup = 1, decay = cosine, decay_steps = 4, min_lr = 0.001, clip = 1.0)
output logits
"""
GEN_VOCAB = 16  # its logits' V: generated bytes are below it
GEN_INFO = re.compile(r"^\S+: (generating|no --checkpoint)")  # its lines on stderr, not errors
USAGE_LINES = re.compile(r"^(\S+): error: [^\n]*\nTry '\1 --help'\.$")  # a usage error (exit status 2)
GEN_COUNTS = ["1", "2", "3", "8", "64", "300"]
GEN_BAD_COUNTS = ["0", "-1", "", "x", "1e3", "3.0", " 3", "3 ", "+3", "0x10", "99999999999999999999",
                  "9223372036854775808", "18446744073709551616"]
GEN_TEMPERATURES = ["0", "1", "0.8", "2", "100", "1e-3", "1e-30", "1e-45", "1e-300", "4.9e-324", "1e300",
                    "3.4e38", "3.5e38", ".5", "5.", "00000.5", "0.0000000000000000000000000000001"]
GEN_BAD_TEMPERATURES = ["1e301", "1e309", "inf", "nan", "-0", "-1", "", "x", "0x1p3", "1e", "1" * 400]
GEN_TOP_KS = ["1", "2", "15", "16", "01"]
GEN_BAD_TOP_KS = ["17", "0", "-1", "256", "257", "2147483647", "2147483648", "9223372036854775807",
                  "9223372036854775808", "", "x", "1.5"]
GEN_SEEDS = ["0", "1", "7", "18446744073709551615"]
GEN_BAD_SEEDS = ["18446744073709551616", "-1", "x", ""]
INPUTS = {  # name: (descr, shape of one batch)
    "tok": ("<i4", [2, 3]),
    "x": ("<f4", [2, 3, 4]),
}
ERROR_LINE = re.compile(r"^\S+: rank \d+: error: \S")
MPI_NOISE = re.compile(r"^Abort\(\d+\) on node \d+ ")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

JSON_NUMBERS = ["0", "-1", "1", "2", "3", "2.9", "2.0", "-2", "1e30", "-1e30", "1e308", "1e309",
                "1e-320", "-0", "-0.0", "0.5", "2147483647", "2147483648", "4294967295",
                "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                "-9223372036854775809", "18446744073709551615", "18446744073709551616",
                "99999999999999999999999999", "1" * 400, "2E0", "0.0000000000000000000000001"]
JSON_STRINGS = ['""', '"x"', '"/"', '".."', '"."', '"../w.npy"', '"sub/w.npy"', '"/etc/passwd"',
                '"/dev/zero"', '"manifest.json"', '"w.npy\\u0000x"', '"a\\nb"', '"a\\"b"',
                '"\\ud800"', '"\\u00e9"', '"\\\\"', '"\\/"', '"param"', '"state"', '"f32"', '"i32"',
                '"none"', '"\x01"', '"\xe9"', '"%s%n%x"', '"step-00000002"']
JSON_OTHERS = ["null", "true", "false", "[]", "{}", '"1"', "[1]", '{"a": 1}', "[[[[[]]]]]",
               "0", '"s"']
JSON_JUNK = [" x", "{}", "\n{}\n", "\x00", "]", "}", ",", "\n\n\n", "// c\n", "/* c */",
             "\xff", " null", "[]"]


def to_bytes(text):
    """Text read with surrogateescape back to its bytes; a lone surrogate
    that a mutation wrote (json.dumps of "\\ud800") as UTF-8 would have it."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def brief(text):
    """A value for the list of mutations: short, one line."""
    text = text if len(text) <= 40 else "%s... (%d bytes)" % (text[:30], len(text))
    return text.encode("unicode_escape", "backslashreplace").decode("ascii")


def json_string_choice(rng, strings):
    r = rng.randrange(10)
    if r < 4 and strings:
        return rng.choice(strings)
    if r < 6:
        return '"%s"' % ("a" * rng.choice([255, 256, 4096, 65536, 1 << 20]))
    return rng.choice(JSON_STRINGS)


class ManifestMutator:
    """Mutations of a JSON document that know JSON, not its fields."""

    def __init__(self, rng):
        self.rng = rng

    def mutate(self, text):
        done = []
        for _ in range(self.rng.choice([1, 1, 1, 2, 3])):
            try:
                root, nodes = jparse(text)
            except (ValueError, RecursionError):
                root = None
            if root is not None and self.rng.randrange(10) < 7:
                text, what = self.tree_op(text, root, nodes)
            else:
                text, what = self.text_op(text)
            done.append(what)
        return text, ", ".join(done)

    def pick(self, nodes):
        """A node of nodes, each path ($.tensors[].crc32) as likely as any
        other however many nodes it has."""
        paths = sorted({n.path for n in nodes})
        path = self.rng.choice(paths)
        return self.rng.choice([n for n in nodes if n.path == path])

    def tree_op(self, t, root, nodes):
        rng = self.rng
        op = rng.randrange(10)
        objs = [n for n in nodes if n.kind == "obj" and n.members]
        arrs = [n for n in nodes if n.kind == "arr" and n.items]
        if op == 0:
            nums = [n for n in nodes if n.kind in ("int", "float")] or nodes
            n = self.pick(nums)
            new = rng.choice(JSON_NUMBERS)
            return t[:n.start] + new + t[n.end:], "number at %s: %s" % (n.path, brief(new))
        if op == 1:
            strs = [n for n in nodes if n.kind == "str"] or nodes
            n = self.pick(strs)
            new = json_string_choice(rng, [t[s.start:s.end] for s in strs])
            return t[:n.start] + new + t[n.end:], "string at %s: %s" % (n.path, brief(new))
        if op == 2:
            n = self.pick(nodes)
            r = rng.randrange(6)
            if r == 0:
                k = rng.choice([100, 10000, 100000])
                new = "[" * k + "]" * k
            elif r == 1:
                k = rng.choice([100, 10000])
                new = '{"a": ' * k + "1" + "}" * k
            else:
                new = rng.choice(JSON_OTHERS)
            return t[:n.start] + new + t[n.end:], "type at %s: %s" % (n.path, brief(new))
        if op == 3 and objs:
            n = self.pick(objs)
            i = rng.randrange(len(n.members))
            k, v = n.members[i]
            if len(n.members) == 1:
                a, b = k.start, v.end
            elif i + 1 < len(n.members):
                a, b = k.start, n.members[i + 1][0].start
            else:
                a, b = n.members[i - 1][1].end, v.end
            return t[:a] + t[b:], "deleted %s" % t[k.start:k.end] + " of " + n.path
        if op == 4 and objs:
            n = self.pick(objs)
            k, v = rng.choice(n.members)
            value = t[v.start:v.end]
            if rng.randrange(2):
                value = rng.choice(JSON_NUMBERS + JSON_STRINGS + JSON_OTHERS)
            return (t[:v.end] + ", " + t[k.start:k.end] + ": " + value + t[v.end:],
                    "duplicated %s" % t[k.start:k.end] + " of " + n.path)
        if op == 5 and objs:
            n = self.pick(objs)
            texts = [t[k.start:v.end] for k, v in n.members]
            rng.shuffle(texts)
            for (k, v), new in reversed(list(zip(n.members, texts))):
                t = t[:k.start] + new + t[v.end:]
            return t, "reordered " + n.path
        if op == 6 and arrs:
            n = self.pick(arrs)
            i = rng.randrange(len(n.items))
            item = n.items[i]
            r = rng.randrange(4)
            if r == 0:
                copies = rng.choice([1, 1, 2, 1000])
                return (t[:item.end] + (", " + t[item.start:item.end]) * copies + t[item.end:],
                        "element of %s copied %d times" % (n.path, copies))
            if r == 1:
                if len(n.items) == 1:
                    a, b = item.start, item.end
                elif i + 1 < len(n.items):
                    a, b = item.start, n.items[i + 1].start
                else:
                    a, b = n.items[i - 1].end, item.end
                return t[:a] + t[b:], "element of %s deleted" % n.path
            if r == 2:
                j = rng.randrange(len(n.items))
                a, b = sorted((i, j), key=lambda x: n.items[x].start)
                if a == b:
                    return t, "nothing"
                ia, ib = n.items[a], n.items[b]
                return (t[:ia.start] + t[ib.start:ib.end] + t[ia.end:ib.start] +
                        t[ia.start:ia.end] + t[ib.end:], "elements of %s swapped" % n.path)
            return t[:n.start] + "[]" + t[n.end:], "emptied " + n.path
        if op == 7 and objs:
            n = self.pick(objs)
            key = json_string_choice(rng, [])
            value = rng.choice(JSON_NUMBERS + JSON_STRINGS + JSON_OTHERS)
            return t[:n.start + 1] + " %s: %s," % (key, value) + t[n.start + 1:], "added a key"
        if op == 8:
            return self.reindent(t), "re-indented"
        return self.text_op(t)

    def reindent(self, t):
        rng = self.rng
        try:
            tree = json.loads(t, object_pairs_hook=lambda pairs: ("obj", pairs))
        except (ValueError, RecursionError):
            return t
        indent = rng.choice([None, 0, 1, 4, "\t"])
        sep = rng.choice([(",", ":"), (", ", ": "), (" , ", " : ")])
        ascii_only = rng.randrange(2) == 0

        def dump(v, level):
            nl = "" if indent is None else "\n" + (indent if isinstance(indent, str) else " " * indent) * (level + 1)
            end = "" if indent is None else "\n" + (indent if isinstance(indent, str) else " " * indent) * level
            if isinstance(v, tuple):
                if not v[1]:
                    return "{}"
                return "{" + sep[0].join(nl + json.dumps(k, ensure_ascii=ascii_only) + sep[1] +
                                         dump(x, level + 1) for k, x in v[1]) + end + "}"
            if isinstance(v, list):
                if not v:
                    return "[]"
                return "[" + sep[0].join(nl + dump(x, level + 1) for x in v) + end + "]"
            return json.dumps(v, ensure_ascii=ascii_only)
        try:
            return dump(tree, 0) + rng.choice(["", "\n", "\r\n", "   "])
        except RecursionError:
            return t

    def text_op(self, t):
        rng = self.rng
        op = rng.randrange(7)
        if op == 0 or not t:
            b = bytearray(to_bytes(t))
            i = rng.randrange(len(b) + 1)
            r = rng.randrange(3)
            if r == 0 and i < len(b):
                b[i] ^= 1 << rng.randrange(8)
            elif r == 1:
                b.insert(i, rng.choice(b'{}[],:"\\ \n0\x00\xff\xc3'))
            elif i < len(b):
                del b[i]
            return b.decode("utf-8", "surrogateescape"), "byte at %d" % i
        if op == 1:
            i = rng.randrange(len(t))
            return t[:i], "truncated at %d" % i
        if op == 2:
            return t + rng.choice(JSON_JUNK + [t]), "junk after the document"
        if op == 3:
            return "\ufeff" + t, "a byte order mark"
        if op == 4:
            return t.replace("\n", "\r\n"), "CRLF"
        if op == 5:
            nums = [m for m in JSON_NUMBER.finditer(t)]
            if nums:
                m = rng.choice(nums)
                return (t[:m.start()] + rng.choice(["NaN", "Infinity", "-Infinity", "0x10", "+1",
                                                     "01", "1.", ".5", "1e", "--1"]) + t[m.end():],
                        "a number that JSON has not")
        i = rng.randrange(len(t) + 1)
        return t[:i] + " " * rng.choice([1, 4096, 1 << 20]) + t[i:], "whitespace"


def runtime_setup(o):
    """Compiles the program for 1 and 2 devices, writes the inputs and a
    valid checkpoint in o.work/base: (base directory, program paths)."""
    work = os.path.abspath(o.work)
    os.makedirs(work, exist_ok=True)
    progs = {}
    for d, name, text in ((1, "fuzzrt", RUNTIME_PROGRAM), (2, "fuzzrt2", RUNTIME_PROGRAM),
                          ("gen1", "fuzzgen", GEN_PROGRAM), ("gen2", "fuzzgen2", GEN_PROGRAM)):
        src = os.path.join(work, name.rstrip("2") + ".gsl")
        with open(src, "w") as fh:
            fh.write(text)
        obj = os.path.join(work, name + ".o")
        out = os.path.join(work, name)
        for args in ([o.gslc, "-D", "D=%d" % (d if d in (1, 2) else int(d[-1])), "-c", src, "-o", obj],
                     shlex.split(o.cc) + shlex.split(o.ldflags) +
                     ["-o", out, obj, o.libgslrt] + shlex.split(o.libs)):
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                sys.stderr.write(p.stdout.decode("utf-8", "replace"))
                sys.exit("fuzz.py: cannot build the run-time program: " + " ".join(args))
        progs[d] = out
    base = os.path.join(work, "base")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    data = random.Random(12345)  # the same valid files whatever --seed
    for name, (descr, shape) in INPUTS.items():
        for suffix, batches in (("", 3), ("_e", 2)):
            n = batches
            for d in shape:
                n *= d
            if descr == "<i4":
                payload = struct.pack("<%di" % n, *[data.randrange(VOCAB) for _ in range(n)])
            else:
                payload = struct.pack("<%df" % n, *[data.gauss(0, 1) for _ in range(n)])
            with open(os.path.join(base, name + suffix + ".npy"), "wb") as fh:
                fh.write(npy_bytes(descr, [batches] + shape, payload))
    n = 3 * 2 * 5  # the generating program's tokens: 3 batches of 2 windows of 5
    with open(os.path.join(base, "gtok.npy"), "wb") as fh:
        fh.write(npy_bytes("<i4", [3, 2, 5], struct.pack("<%di" % n, *[data.randrange(GEN_VOCAB)
                                                                      for _ in range(n)])))
    env = runtime_env(o)
    inputs = [a for name in INPUTS for a in ("--input", "%s=%s.npy" % (name, name))]
    for args in ([progs[1], "--checkpoint", "ck", "--steps", "2", "--quiet"] + inputs,
                 [progs["gen1"], "--checkpoint", "gck", "--steps", "3", "--quiet", "--input", "tokens=gtok.npy"]):
        rc, _, err = run(args, base, env, 120)
        if rc != 0:
            sys.stderr.write(err)
            sys.exit("fuzz.py: the run-time program could not write its checkpoint (status %d): %s" %
                     (rc, " ".join(args)))
    out = os.path.join(work, "gen.out")
    args = [progs["gen1"], "--checkpoint", "gck", "--generate", "5", "--prompt", "\x01\x02", "--top-k", "3"]
    rc, _, err = run(args, base, env, 120, out)
    with open(out, "rb") as fh:
        text = fh.read()
    if rc != 0 or len(text) != 5 or max(text) >= GEN_VOCAB:
        sys.stderr.write(err)
        sys.exit("fuzz.py: generating from the valid checkpoint failed (status %d, %d bytes): %s" %
                 (rc, len(text), " ".join(args)))
    with open(os.path.join(newest_checkpoint(os.path.join(base, "ck")), "manifest.json")) as fh:
        version = json.load(fh).get("version")
    print("fuzz.py: the programs wrote checkpoints of manifest format version %s" % version, flush=True)
    # the unmutated runs must pass, or every mutant would fail alike
    for np in (1, 2):
        scratch = tempfile.mkdtemp(prefix="gslfuzz.", dir=o.scratch)
        try:
            shutil.rmtree(scratch)
            shutil.copytree(base, scratch)
            args = runtime_args(o, progs, np, "resume")
            rc, _, err = run(args, scratch, env, 120)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if rc != 0:
            sys.stderr.write(err)
            sys.exit("fuzz.py: resuming the valid checkpoint failed on %d rank%s (status %d): %s" %
                     (np, "s" if np > 1 else "", rc, " ".join(args)))
    return base, progs


def runtime_env(o):
    """The run-time runs' environment: the sanitizers', one BLAS thread."""
    env = sanitizer_env(o.leaks)
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def runtime_args(o, progs, np, how, extra=()):
    inputs = [a for name in INPUTS for a in ("--input", "%s=%s.npy" % (name, name))]
    evals = [a for name in INPUTS for a in ("--eval-input", "%s=%s_e.npy" % (name, name))]
    if how == "resume":
        args = ["--checkpoint", "ck", "--resume", "--steps", "3"] + inputs
    elif how == "eval":
        args = ["--checkpoint", "ck", "--resume", "--steps", "2"] + evals
    elif how == "train-eval":
        args = ["--steps", "2", "--eval-every", "1"] + inputs + evals
    else:
        args = ["--steps", "2"] + inputs
    prog = [progs[np]] if np == 1 else shlex.split(o.mpiexec) + ["-n", str(np), progs[np]]
    return prog + args + list(extra)


def gen_prompt(rng, where):
    """A prompt for --generate: (options, what). Its bytes tokens of the
    program, or with one at or past V, 0xff, a UTF-8 sequence or a NUL
    (these in a file only), of 1 byte to 1 MB; or a file that is empty, a
    directory, missing or another file of the run's."""
    n = rng.choice([1, 1, 2, 3, 4, 5, 6, 17, 100, 4096, 100000, 1 << 20])
    b = bytearray(rng.randrange(GEN_VOCAB) for _ in range(n))
    r = rng.randrange(8)
    if r == 0:
        b[rng.randrange(n)] = rng.choice([GEN_VOCAB, GEN_VOCAB + 1, 127, 128, 255])
        what = "a byte past V"
    elif r == 1:
        i = rng.randrange(n + 1)
        b[i:i] = rng.choice([b"\xc3\xa9", b"\xff\xfe", b"\x00", b"\n", b"\x1b[31m", b"\x7f"])
        what = "other bytes"
    else:
        what = "tokens"
    if rng.randrange(2) and b"\x00" not in b and len(b) < 100000:
        return ["--prompt", bytes(b).decode("utf-8", "surrogateescape")], "--prompt: %d bytes, %s" % (len(b), what)
    r = rng.randrange(12)
    if r == 0:
        return ["--prompt-file", rng.choice(["missing", ".", "gck", "/dev/null", "gtok.npy", "p\nq"])], \
            "--prompt-file: not a prompt"
    if r == 1:
        b = b""
    with open(os.path.join(where, "prompt"), "wb") as fh:
        fh.write(b)
    return ["--prompt-file", "prompt"], "--prompt-file: %d bytes, %s" % (len(b), what)


def gen_options(rng, where):
    """The options of a --generate run, the value of each drawn from a list
    of good ones or of bad ones, sometimes with an option generation
    refuses, one given twice or in the --opt=value form: (options, what)."""
    valid = rng.randrange(2)  # every value a good one, or each bad one time in six

    def pick(good, bad):
        return rng.choice(good) if valid or rng.randrange(6) else rng.choice(bad)
    opts = ["--generate", pick(GEN_COUNTS, GEN_BAD_COUNTS)]
    prompt, what = gen_prompt(rng, where)
    opts += prompt
    done = [what]
    if rng.randrange(2):
        opts += ["--temperature", pick(GEN_TEMPERATURES, GEN_BAD_TEMPERATURES)]
    if rng.randrange(2):
        opts += ["--top-k", pick(GEN_TOP_KS, GEN_BAD_TOP_KS)]
    if rng.randrange(4) == 0:
        opts += ["--seed", pick(GEN_SEEDS, GEN_BAD_SEEDS)]
    r = rng.randrange(16)
    if r == 0:
        opts += rng.choice([["--steps", "2"], ["--input", "tokens=gtok.npy"], ["--resume"], ["--prompt", "x"],
                            ["--output", "logits=o.npy"], ["--eval-input", "tokens=gtok.npy"], ["--max-time", "1"],
                            ["--generate"], ["--top-k"], ["--unknown"], ["--prompt-file", "prompt"]])
        done.append("another option")
    elif r == 1:
        i = rng.randrange(0, len(opts), 2)
        opts += opts[i:i + 2]
        done.append("an option twice")
    elif r == 2:
        i = rng.randrange(0, len(opts), 2)
        opts[i:i + 2] = [opts[i] + "=" + opts[i + 1]]
        done.append("--opt=value")
    if rng.randrange(2):
        opts.append("--quiet")
    return opts, "; ".join(done)


def last_value(args, opt):
    """The value of the last opt in args (either form), or None."""
    v = None
    for i, a in enumerate(args):
        if a == opt and i + 1 < len(args):
            v = args[i + 1]
        elif a.startswith(opt + "="):
            v = a[len(opt) + 1:]
    return v


def newest_checkpoint(ck):
    """The newest step-N directory of ck holding a manifest.json."""
    best = None
    for name in os.listdir(ck):
        m = re.fullmatch(r"step-(\d+)", name)
        if m and os.path.isfile(os.path.join(ck, name, "manifest.json")):
            if best is None or int(m.group(1)) > best[0]:
                best = (int(m.group(1)), name)
    return os.path.join(ck, best[1])


def fix_sums(manifest, fname, old, new):
    """The manifest text with the size and crc32 of file fname changed from
    those of bytes old to those of new, in the innermost object that names
    fname (every object, if the text is no longer JSON)."""
    swaps = [(len(old), len(new)), (zlib.crc32(old), zlib.crc32(new))]
    try:
        _, nodes = jparse(manifest)
        spans = [(n.start, n.end) for n in nodes if n.kind == "obj" and
                 any(manifest[v.start:v.end] == json.dumps(fname) for _, v in n.members)]
    except (ValueError, RecursionError):
        spans = [(0, len(manifest))]
    for a, b in sorted(spans, reverse=True):
        part = manifest[a:b]
        for was, now in swaps:
            part = re.sub(r"(?<![\d.\-])%d(?![\d.eE])" % was, str(now), part)
        manifest = manifest[:a] + part + manifest[b:]
    return manifest


DIR_OPS = ["a file in DIR", "a leftover .tmp. directory", "a newer incomplete step directory",
           "a step directory whose manifest.json is a directory", "a tensor file replaced by a directory",
           "a tensor file replaced by a symbolic link", "a tensor file replaced by a FIFO",
           "a tensor file removed"]


def dir_op(what, rng, ck, step_dir):
    """Disturbs the checkpoint directory ck as DIR_OPS names it: what was
    done."""
    if what == DIR_OPS[0]:
        name = rng.choice(["lock", "LOCK", "junk.txt", "manifest.json", "step-00000002.lock"])
        with open(os.path.join(ck, name), "wb") as fh:
            fh.write(bytes(rng.randrange(256) for _ in range(rng.randrange(64))))
        return "%s (%s)" % (what, name)
    if what == DIR_OPS[1]:
        tmp = os.path.join(ck, "step-%08d.tmp.%d" % (rng.choice([1, 3, 99]), rng.randrange(1 << 16)))
        shutil.copytree(step_dir, tmp)
        return "%s (%s)" % (what, os.path.basename(tmp))
    if what == DIR_OPS[2]:
        name = rng.choice(["step-99999999", "step-x", "step-", "step-00000003", "step-999999999999999999999"])
        os.makedirs(os.path.join(ck, name), exist_ok=True)
        return "%s (%s)" % (what, name)
    if what == DIR_OPS[3]:
        os.makedirs(os.path.join(ck, "step-00000077", "manifest.json"))
        return what
    files = sorted(f for f in os.listdir(step_dir) if f.endswith(".npy"))
    name = rng.choice(files)
    f = os.path.join(step_dir, name)
    os.unlink(f)
    if what == DIR_OPS[4]:
        os.mkdir(f)
    elif what == DIR_OPS[5]:
        target = rng.choice(["/dev/zero", "/dev/null", name, "nowhere", "../manifest.json"])
        os.symlink(target, f)
        name += " -> " + target
    elif what == DIR_OPS[6]:
        os.mkfifo(f)
    return "%s (%s)" % (what, name)


def copy_tree(src, dst):
    """Copies a directory as it is: symbolic links as links, FIFOs as new
    FIFOs (which shutil would open and wait on)."""
    def copy(a, b):
        if stat.S_ISFIFO(os.lstat(a).st_mode):
            os.mkfifo(b)
        else:
            shutil.copy2(a, b)
    shutil.copytree(src, dst, symlinks=True, copy_function=copy)


def judge_runtime(rc, timed_out, err, where, np, gen=False):
    """A run-time run's finding by its status and stderr: (kind,
    signature), or None. Exit status 1 must come with one line "PROG: rank
    R: error: CAUSE" (on several ranks, one per rank that found the error
    at once) and mpiexec's own lines about MPI_Abort. gen: a --generate
    run, whose options are mutated: exit status 2 must come with a usage
    error ("PROG: error: CAUSE" and "Try 'PROG --help'."), and its lines
    saying what it generates are not errors."""
    if gen and rc == 2 and not timed_out and not SANITIZER.search(err):
        lines = [ln for ln in err.split("\n") if ln.strip() and not MPI_NOISE.match(ln)]
        if USAGE_LINES.match("\n".join(lines[:2])) and not CONTROL.search("".join(lines)) and \
                (len(lines) == 2 or np > 1):
            return None
        return "unclean", "unclean usage error: " + shape_of(lines[0] if lines else "(none)", where)
    found = classify_crash(rc, timed_out, err)
    if found:
        return found
    lines = [ln for ln in err.split("\n") if ln.strip() and not MPI_NOISE.match(ln) and
             not (gen and GEN_INFO.match(ln))]
    errors = [ln for ln in lines if ERROR_LINE.match(ln)]
    if rc == 0:
        if errors:
            return "status0", "exit status 0 with an error: " + shape_of(errors[0], where)
        return None
    clean = [ln for ln in errors if not CONTROL.search(ln)]
    if lines and len(clean) == len(lines) and (len(lines) == 1 or np > 1):
        return None
    if not lines:
        why = "no message"
    elif not errors:
        why = "not 'PROG: rank R: error: ...'"
    elif len(clean) < len(errors):
        why = "a control character"
    else:
        why = "%d lines" % len(lines)
    first = errors[0] if errors else (lines[0] if lines else "")
    return "unclean", "unclean message (%s): %s" % (why, shape_of(first, where))


def shape_of(line, where):
    """A message with what varies (the scratch directory, quoted text,
    numbers) taken out, for a signature."""
    line = line.replace(where, "S")
    line = re.sub(r"^\S+: rank \d+: error: ", "", line)
    line = re.sub(r"'[^']*'", "'..'", line)
    line = re.sub(r"\d+", "N", line)
    return CONTROL.sub("?", line)[:90]


def fuzz_runtime(o, rng, findings):
    base, progs = runtime_setup(o)
    env = runtime_env(o)
    base_ck = newest_checkpoint(os.path.join(base, "ck"))
    with open(os.path.join(base_ck, "manifest.json"), encoding="utf-8") as fh:
        schema = Schema(fh.read())
    with open(os.path.join(newest_checkpoint(os.path.join(base, "gck")), "manifest.json"), encoding="utf-8") as fh:
        gen_schema = Schema(fh.read())
    mm = ManifestMutator(rng)
    nm = NpyMutator(rng)
    root = tempfile.mkdtemp(prefix="gslfuzz.", dir=o.scratch)
    mutant = os.path.join(root, "m")  # the mutated files, kept as they were for saving
    where = os.path.join(root, "r")   # a copy (hard links) the program runs in
    hangs = {}                        # DIR_OPS entry -> its runs that timed out
    tally = {}                        # targets -> outcome -> runs
    log = open(o.log, "w") if o.log else None
    print("fuzz.py: run-time mode, programs %s and %s, %.0f s, random seed %d, findings in %s" %
          (progs[1], progs[2], o.seconds, o.seed, o.findings), flush=True)

    def step():
        for d in (mutant, where):
            shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, mutant, symlinks=True)
        targets = [rng.choice(["manifest"] * 8 + ["tensor"] * 5 + ["input"] * 5 + ["dir"] * 2 +
                              ["generate"] * 8)]
        gen = targets[0] == "generate"
        ck = os.path.join(mutant, "gck" if gen else "ck")
        step_dir = newest_checkpoint(ck)
        manifest_path = os.path.join(step_dir, "manifest.json")
        if gen and rng.randrange(4) == 0:  # from a mutated checkpoint of its own
            targets.append(rng.choice(["manifest", "tensor"]))
        elif not gen and rng.randrange(8) == 0:
            targets.append(rng.choice(["manifest", "tensor", "input"]))
        done = []
        how = None
        manifest_mutated = None
        dir_what = None
        for target in targets:
            if target == "generate":
                gen_opts, what = gen_options(rng, mutant)
                done.append("generate: " + what)
                how = "generate"
            elif target == "manifest":
                with open(manifest_path, encoding="utf-8", errors="surrogateescape") as fh:
                    text, what = mm.mutate(fh.read())
                manifest_mutated = to_bytes(text)
                with open(manifest_path, "wb") as fh:
                    fh.write(manifest_mutated)
                done.append("manifest.json: " + what)
                how = how or rng.choice(["resume"] * 3 + ["eval"])
            elif target == "tensor":
                files = sorted(f for f in os.listdir(step_dir) if f.endswith(".npy"))
                fname = rng.choice(files)
                path = os.path.join(step_dir, fname)
                with open(path, "rb") as fh:
                    old = fh.read()
                new, what = nm.mutate(old)
                with open(path, "wb") as fh:
                    fh.write(new)
                fixed = rng.randrange(4) != 0
                if fixed:
                    with open(manifest_path, encoding="utf-8", errors="surrogateescape") as fh:
                        text = fix_sums(fh.read(), fname, old, new)
                    with open(manifest_path, "wb") as fh:
                        fh.write(to_bytes(text))
                done.append("%s: %s%s" % (fname, what, " (size and crc32 fixed)" if fixed else ""))
                how = how or rng.choice(["resume"] * 3 + ["eval"])
            elif target == "input":
                name = rng.choice(sorted(INPUTS))
                held = rng.randrange(4) == 0
                fname = name + ("_e" if held else "") + ".npy"
                path = os.path.join(mutant, fname)
                with open(path, "rb") as fh:
                    new, what = nm.mutate(fh.read(), VOCAB)
                with open(path, "wb") as fh:
                    fh.write(new)
                done.append("%s: %s" % (fname, what))
                if held:
                    how = how if how in ("eval", "train-eval") else rng.choice(["eval", "train-eval"])
                else:
                    how = how if how == "resume" else rng.choice(["fresh", "fresh", "resume"])
            else:
                # a disturbance that hung the program three times is not tried again
                dir_what = rng.choice([d for d in DIR_OPS if hangs.get(d, 0) < 3])
                done.append("DIR: " + dir_op(dir_what, rng, ck, step_dir))
                how = how or rng.choice(["resume"] * 3 + ["eval"])
        np = 2 if rng.randrange(6) == 0 else 1
        if gen:
            ckpt = rng.choice([["--checkpoint", "gck"]] * 6 + [[], ["--checkpoint", "ck"], ["--checkpoint", "none"]])
            prog = [progs["gen1"]] if np == 1 else shlex.split(o.mpiexec) + ["-n", "2", progs["gen2"]]
            args = prog + ckpt + gen_opts
        else:
            extra = []
            if rng.randrange(2):
                extra.append("--quiet")
            if rng.randrange(4) == 0:
                extra += ["--output", "e=out.npy"]
            args = runtime_args(o, progs, np, how, extra)
        shutil.copytree(mutant, where, symlinks=True, copy_function=os.link)
        out = os.path.join(root, "stdout") if gen else None
        rc, timed_out, err = run(args, where, env, o.timeout, out)
        if timed_out and dir_what:
            hangs[dir_what] = hangs.get(dir_what, 0) + 1
        found = judge_runtime(rc, timed_out, err, where, np, gen)
        if found is None and gen and rc == 0:  # N bytes, each a token of the program
            with open(out, "rb") as fh:
                text = fh.read()
            n = last_value(args, "--generate")
            if not (n or "").isdigit():
                found = "generated", "--generate %s accepted" % brief(n or "(none)")
            elif len(text) != int(n):
                found = "generated", "%s bytes written for --generate N" % ("fewer" if len(text) < int(n) else "more")
            elif text and max(text) >= GEN_VOCAB:
                found = "generated", "a byte past V generated"
        if found and found[0] == "timeout":  # which mutation hangs it: details aside
            found = "timeout", "timeout after " + "; ".join(
                re.sub(r"\d+", "N", re.sub(r" \(.*", "", d)) for d in done)
        key = "+".join(targets)
        tally.setdefault(key, {})
        outcome = "timeout" if timed_out else "status %d" % rc
        tally[key][outcome] = tally[key].get(outcome, 0) + 1
        if log:
            first = err.strip().split("\n")[0] if err.strip() else ""
            log.write("%s | %s | %s | %s\n" % (outcome, how, "; ".join(done), first[:300]))
        read = how in ("resume", "eval") or (gen and "gck" in args)  # the mutated manifest was read
        if found is None and rc == 0 and manifest_mutated is not None and read:
            why = strict_json(manifest_mutated)
            if why:
                found = "accepted", "manifest.json that is not JSON accepted (%s)" % why
            else:
                breach = (gen_schema if gen else schema).breach(manifest_mutated.decode("utf-8"))
                if breach:
                    found = "lenient", "manifest.json accepted with " + breach
        if found is None:
            return

        def save(stem):
            copy_tree(mutant, stem)
            with open(os.path.join(stem, "stderr"), "w") as fh:
                fh.write(err)
            with open(os.path.join(stem, "mutations"), "w") as fh:
                fh.write("\n".join(done) + "\n")
            with open(os.path.join(stem, "run.sh"), "w", errors="surrogateescape") as fh:
                fh.write("#!/bin/sh\n# %s\n# %s\n# runs the program on a copy of this directory\n"
                         "d=$(mktemp -d) || exit\ntrap 'rm -rf \"$d\"' EXIT\n"
                         "cp -a \"$(dirname \"$0\")\"/. \"$d\" && cd \"$d\" || exit\n"
                         "ASAN_OPTIONS=detect_leaks=%d %s\n" %
                         (found[1], "\n# ".join(done), o.leaks,
                          " ".join(shlex.quote(a) for a in args)))
            os.chmod(os.path.join(stem, "run.sh"), 0o755)
            return os.path.join(stem, "run.sh")
        findings.add(found[0], found[1], save)

    try:
        return fuzz_loop(o, findings, step)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if log:
            log.close()
        print("runs by what was mutated, and their outcomes:")
        for key in sorted(tally):
            print("  %-16s %s" % (key, ", ".join("%s: %d" % kv for kv in sorted(tally[key].items()))))


def main():
    ap = argparse.ArgumentParser(description="mutation fuzzer for gslc and the runtime's readers")
    ap.add_argument("--gslc", required=True, help="the (sanitized) gslc to run")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz")
    ap.add_argument("--findings", required=True, help="directory for the findings")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per run")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    ap.add_argument("--keep", type=int, default=3, help="inputs saved per signature")
    ap.add_argument("--server", help="a fork server (scripts/fuzz_server.c) linked with the target: "
                    "gslc (scripts/gslc_server) in the compile-time mode")
    ap.add_argument("--exec-every", type=int, default=256,
                    help="with --server, one run in N by exec all the same (0: none)")
    ap.add_argument("--no-persistent", dest="persistent", action="store_false",
                    help="with --server, fork a child for every run (no persistent child)")
    ap.add_argument("--leak-every", type=int, default=64,
                    help="with --server, a forked run with LeakSanitizer's check one time in N "
                    "(default 64; 1: every run): it costs a small run more than the rest together")
    ap.add_argument("--runtime", action="store_true",
                    help="fuzz the files a compiled program reads (manifest, .npy), not gslc")
    ap.add_argument("--libgslrt", help="--runtime: the (sanitized) libgslrt.a to link")
    ap.add_argument("--cc", default="mpicc", help="--runtime: the compiler driver that links")
    ap.add_argument("--ldflags", default="-fsanitize=address,undefined",
                    help="--runtime: its flags (the sanitizers libgslrt.a was built with)")
    ap.add_argument("--libs", default="-lopenblas -lz -lm", help="--runtime: libraries after libgslrt")
    ap.add_argument("--mpiexec", default="mpiexec", help="--runtime: runs the two-rank program")
    ap.add_argument("--work", help="--runtime: where the program and its valid files are made "
                    "(default: beside the findings directory)")
    ap.add_argument("--scratch", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None,
                    help="where mutants are written and run (default /dev/shm: fsync and open are cheap)")
    ap.add_argument("--leaks", type=int, default=1, choices=(0, 1),
                    help="--runtime: LeakSanitizer on (1, the default) or off (0)")
    ap.add_argument("--log", help="--runtime: write a line per run (outcome, what was mutated, "
                    "the first line of stderr) to this file")
    ap.add_argument("corpus", nargs="*", help="directories (searched recursively) or files of "
                    ".gsl seeds; none with --runtime")
    o = ap.parse_args()
    if o.runtime and not o.libgslrt:
        ap.error("--runtime needs --libgslrt")
    if not o.runtime and not o.corpus:
        ap.error("the compile-time mode needs a corpus")
    for f in ("gslc", "libgslrt", "server"):  # the runs start in scratch directories
        if getattr(o, f) and "/" in getattr(o, f):
            setattr(o, f, os.path.abspath(getattr(o, f)))
    o.seed = o.seed if o.seed is not None else int(time.time())

    def stop(signum, frame):  # SIGTERM (and SIGINT, which a background job ignores) end the run with its report
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    o.work = o.work or os.path.join(os.path.dirname(os.path.abspath(o.findings)), "runtime")
    rng = random.Random(o.seed)
    findings = Findings(o.findings, o.keep)
    if o.runtime:
        execs, elapsed = fuzz_runtime(o, rng, findings)
    else:
        execs, elapsed = fuzz_compile(o, rng, findings)
    findings.report(execs, elapsed)
    return 1 if findings.total() else 0


if __name__ == "__main__":
    sys.exit(main())
