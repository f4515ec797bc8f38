#!/usr/bin/python3
"""scripts/lm_data.py — byte-level language-model data from the English
text of Debian's `fortunes` package, as int32 .npy token windows that a
GSL program reads with --input (batch cycling).

    python3 scripts/lm_data.py [--out DIR] [--batch B] [--seq S] [--input FILE...]

Method. The corpus is the regular files that the packages `fortunes` and
`fortunes-min` (its dependency) install in /usr/share/games/fortunes —
without the binary .dat indexes and the .u8 symlinks; they hold no
offensive section, and files other packages put there (other languages,
fortunes-bofh-excuses, ...) are not theirs, so dpkg-query keeps them out —
concatenated as bytes in sorted path order. With --input, the named files
instead, in the order given.

The byte stream is cut into non-overlapping windows of S + 1 bytes
(window k is bytes k(S+1) .. k(S+1)+S): a model reads bytes 0..S-1 of a
window and predicts bytes 1..S, so inputs and targets come from one
window and no two windows share a byte. The W = floor(n / (S+1)) windows
are laid out as B streams of T = floor(W / B) consecutive windows each
(the trailing W - T*B windows, fewer than B, and the trailing bytes of a
partial window are dropped); batch j is row b = window b*T + j for
b = 0..B-1, so the rows of one batch come from B distant parts of the
corpus and consecutive batches continue each stream.

The split is by batch: batch j is held out for evaluation when
j % 20 == 19, exactly every 20th batch (floor(T / 20) of them, 5 %), and
every other batch is for training, in order. Every 20th rather than the
last 5 % because the files are concatenated in name order, so the last
5 % of the corpus is just two files (work, zippy): every 20th batch
samples every file alike, and the held-out loss is measured on text like
the training text, never on bytes it trained on.

Outputs DIR/train.npy [T - floor(T/20), B, S+1] and DIR/eval.npy
[floor(T/20), B, S+1], little-endian int32 ('<i4') with values 0..255,
headers as the runtime's own writer pads them (64-byte aligned), each
written to a temporary name and renamed. The files depend on the bytes
read and B and S only: the same corpus gives the same files byte for
byte. Prints the counts. Exit status 0, 1 on a runtime error (a missing
file, a corpus too small for one held-out batch), 2 on a usage error.

Standard library only (no numpy).
"""
import argparse
import os
import subprocess
import sys

CORPUS_DIR = "/usr/share/games/fortunes"
CORPUS_PACKAGES = ("fortunes", "fortunes-min")
HOLDOUT_EVERY = 20  # batch j is held out when j % 20 == 19: 5 %


def fail(msg, status=1):
    print("lm_data: error: " + msg, file=sys.stderr)
    sys.exit(status)


def corpus_files():
    """The English fortune text files the corpus packages install, sorted."""
    try:
        listing = subprocess.run(["dpkg-query", "-L"] + list(CORPUS_PACKAGES),
                                 capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        fail("the corpus is Debian's fortunes package, which is not installed "
             "(apt-get install fortunes, or sh scripts/quickstart.sh); "
             "or name files with --input")
    files = set()
    for path in listing.splitlines():
        if (os.path.dirname(path) == CORPUS_DIR and not path.endswith(".dat")
                and not os.path.islink(path) and os.path.isfile(path)):
            files.add(path)
    if not files:
        fail("no text files of %s in %s" % (" or ".join(CORPUS_PACKAGES), CORPUS_DIR))
    return sorted(files)


def npy_header(shape):
    """A version 1.0 .npy header for '<i4' data of this shape, padded with
    spaces and a final newline to a multiple of 64 bytes (as runtime/npy.c's
    gslrt_npy_header writes it)."""
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    text = "{'descr': '<i4', 'fortran_order': False, 'shape': (%s), }" % dims
    total = (10 + len(text) + 1 + 63) // 64 * 64
    hlen = total - 10
    return (b"\x93NUMPY\x01\x00" + hlen.to_bytes(2, "little") + text.encode("ascii")
            + b" " * (hlen - len(text) - 1) + b"\n")


def write_windows(path, data, batches, batch, seq1, steps):
    """Writes the windows of the given batches to path as [len(batches),
    batch, seq1] int32, through a temporary file renamed into place."""
    body = bytearray(4 * len(batches) * batch * seq1)
    pos = 0
    for j in batches:
        for b in range(batch):
            k = b * steps + j
            # little-endian int32 of a byte: the byte, then three zero bytes
            body[pos:pos + 4 * seq1:4] = data[k * seq1:(k + 1) * seq1]
            pos += 4 * seq1
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(npy_header((len(batches), batch, seq1)))
            f.write(body)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail("%s: %s" % (path, e.strerror))


def positive(text):
    try:
        v = int(text, 10)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError("must be a positive integer, not %r" % text)
    return v


def main():
    ap = argparse.ArgumentParser(
        prog="lm_data.py",
        description="Byte-level LM data: int32 .npy windows [batches, batch, seq + 1] of the "
                    "fortunes corpus, every 20th batch held out for evaluation.")
    ap.add_argument("--out", metavar="DIR", default="data/fortunes",
                    help="output directory, created if missing (default data/fortunes)")
    ap.add_argument("--batch", metavar="B", type=positive, default=8,
                    help="windows per batch (default 8)")
    ap.add_argument("--seq", metavar="S", type=positive, default=64,
                    help="sequence length: windows are S + 1 bytes (default 64)")
    ap.add_argument("--input", metavar="FILE", nargs="+", action="extend",
                    help="read these files, in this order, instead of the fortunes corpus")
    args = ap.parse_args()

    files = args.input or corpus_files()
    chunks = []
    for path in files:
        try:
            with open(path, "rb") as f:
                chunks.append(f.read())
        except OSError as e:
            fail("%s: %s" % (path, e.strerror))
    data = b"".join(chunks)

    seq1 = args.seq + 1
    windows = len(data) // seq1
    steps = windows // args.batch
    if steps < HOLDOUT_EVERY:
        fail("%d bytes make %d batches of %d windows of %d bytes; at least %d are needed "
             "to hold out one (every %dth)" % (len(data), steps, args.batch, seq1,
                                               HOLDOUT_EVERY, HOLDOUT_EVERY))
    held = [j for j in range(steps) if j % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    train = [j for j in range(steps) if j % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]

    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (args.out, e.strerror))
    train_path = os.path.join(args.out, "train.npy")
    eval_path = os.path.join(args.out, "eval.npy")
    write_windows(train_path, data, train, args.batch, seq1, steps)
    write_windows(eval_path, data, held, args.batch, seq1, steps)

    used = steps * args.batch
    print("lm_data: %d files, %d bytes: %d windows of %d bytes (seq %d + 1), %d batches of %d"
          % (len(files), len(data), windows, seq1, args.seq, steps, args.batch))
    print("lm_data: train %d batches (%d windows, %d bytes) -> %s [%d, %d, %d]"
          % (len(train), len(train) * args.batch, len(train) * args.batch * seq1, train_path,
             len(train), args.batch, seq1))
    print("lm_data: eval %d batches (%d windows, %d bytes; every %dth batch) -> %s [%d, %d, %d]"
          % (len(held), len(held) * args.batch, len(held) * args.batch * seq1, HOLDOUT_EVERY,
             eval_path, len(held), args.batch, seq1))
    print("lm_data: dropped the last %d bytes: %d whole windows (fewer than a batch) and %d bytes"
          % (len(data) - used * seq1, windows - used, len(data) - windows * seq1))


if __name__ == "__main__":
    main()
