#!/usr/bin/python3
"""scripts/lm_baselines.py — what simple models and compressors score on
the language model's held-out bytes, in nats per byte, for scale beside
the trained models' held-out cross-entropy.

    python3 scripts/lm_baselines.py [--data DIR] [--json]

Reads DIR/train.npy and DIR/eval.npy (scripts/lm_data.py's windows,
int32 [batches, B, S+1], default DIR data/fortunes) and prints one line per
baseline: its name and nats per byte (with --json, one JSON object).

The models score what the trained model does: each held-out window's bytes
1..S, each given the bytes before it in its window.
  unigram   p(c) = (n(c) + 1) / (N + 256): counts over every byte of the
            training windows, add-one smoothed;
  bigram    p(c | a) = (n(a, c) + t(a) p_uni(c)) / (n(a) + t(a)), Witten-Bell
            interpolation with the unigram: n(a, c) counts the pairs of
            adjacent bytes within the training windows, n(a) = sum over c,
            t(a) the number of distinct bytes seen after a (no parameter
            fitted, nothing learnt from the held-out bytes); the first
            target of a window is given byte 0 of it, as the model is.
The compressors are given the whole training text first:
  bzip2 -9, xz -9e   (compressed size of training text + held-out text)
            minus (compressed size of the training text), in bits, times
            ln 2, over the held-out bytes (Python's bz2 at level 9 and lzma
            at preset 9 | PRESET_EXTREME are bzip2 -9 and xz -9e). Their
            texts are the windows in corpus order: row b's windows, batch
            after batch (lm_data.py lays consecutive windows of one stream
            out along the batches), row after row; every byte of a held-out
            window counts.

Standard library only (no numpy). Exit status 0, 1 on a bad or missing
file, 2 on a usage error.
"""
import argparse
import ast
import bz2
import json
import lzma
import math
import os
import struct
import sys
from array import array


def fail(msg, status=1):
    print("lm_baselines: error: " + msg, file=sys.stderr)
    sys.exit(status)


def read_windows(path):
    """The int32 windows of an .npy file: (shape, flat array)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        fail("%s is not an .npy file" % path)
    major = data[6]
    if major == 1:
        hlen, start = struct.unpack("<H", data[8:10])[0], 10
    else:
        hlen, start = struct.unpack("<I", data[8:12])[0], 12
    try:
        header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    except (ValueError, SyntaxError):
        fail("%s has a malformed header" % path)
    shape = tuple(header.get("shape", ()))
    if header.get("descr") != "<i4" or header.get("fortran_order") or len(shape) != 3:
        fail("%s is not little-endian int32 windows [batches, B, S+1]" % path)
    body = data[start + hlen:]
    n = shape[0] * shape[1] * shape[2]
    if len(body) != 4 * n:
        fail("%s holds %d bytes of data, not %d" % (path, len(body), 4 * n))
    a = array("i")
    a.frombytes(body)
    if sys.byteorder != "little":
        a.byteswap()
    if any(v < 0 or v > 255 for v in a):
        fail("%s holds a value outside 0..255" % path)
    return shape, a


def windows(shape, a):
    """The windows as byte strings, in corpus order (row by row, batch by batch)."""
    nb, rows, w = shape
    out = []
    for b in range(rows):
        for j in range(nb):
            o = (j * rows + b) * w
            out.append(bytes(a[o:o + w].tolist()))
    return out


def unigram(train):
    n = [0] * 256
    for win in train:
        for c in win:
            n[c] += 1
    total = sum(n)
    return [(n[c] + 1) / (total + 256) for c in range(256)]


def model_nats(train, held):
    p1 = unigram(train)
    pairs = {}
    after = [0] * 256
    for win in train:
        for a, c in zip(win, win[1:]):
            pairs[(a, c)] = pairs.get((a, c), 0) + 1
            after[a] += 1
    kinds = [0] * 256
    for a, _ in pairs:
        kinds[a] += 1
    uni = bi = 0.0
    count = 0
    for win in held:
        for a, c in zip(win, win[1:]):
            uni -= math.log(p1[c])
            t = kinds[a]
            p2 = (pairs.get((a, c), 0) + t * p1[c]) / (after[a] + t) if after[a] else p1[c]
            bi -= math.log(p2)
            count += 1
    return uni / count, bi / count


def compressed_nats(compress, train_text, held_text):
    extra = len(compress(train_text + held_text)) - len(compress(train_text))
    return max(extra, 0) * 8 * math.log(2) / len(held_text)


def main():
    ap = argparse.ArgumentParser(description="Baselines for the LM's held-out bytes, in nats per byte.")
    ap.add_argument("--data", default="data/fortunes", help="the directory of train.npy and eval.npy")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = ap.parse_args()
    train = windows(*read_windows(os.path.join(args.data, "train.npy")))
    held = windows(*read_windows(os.path.join(args.data, "eval.npy")))
    if not held or len(held[0]) < 2:
        fail("no held-out bytes to score")
    uni, bi = model_nats(train, held)
    train_text, held_text = b"".join(train), b"".join(held)
    result = {
        "unigram": uni,
        "bigram": bi,
        "bzip2 -9": compressed_nats(lambda t: bz2.compress(t, 9), train_text, held_text),
        "xz -9e": compressed_nats(lambda t: lzma.compress(t, preset=9 | lzma.PRESET_EXTREME), train_text,
                                  held_text),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, v in result.items():
            print("%-10s %.6f nats/byte" % (name, v))


if __name__ == "__main__":
    main()
