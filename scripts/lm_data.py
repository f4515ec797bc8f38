#!/usr/bin/python3
"""scripts/lm_data.py — byte-level language-model data from the English
text of four Debian packages, as int32 .npy token windows that a GSL
program reads with --input and --eval-input (batch cycling).

    python3 scripts/lm_data.py [--out DIR] [--batch B] [--seq S] [--root DIR]
    python3 scripts/lm_data.py --fortunes [--out DIR] [--batch B] [--seq S]
    python3 scripts/lm_data.py --input FILE... [--out DIR] [--batch B] [--seq S]

The corpus (the default). Four sources, in this order, each cut into
documents (the table SOURCES states each one once):
  python    python3.11-doc: /usr/share/doc/python3.11/html/_sources/**/*.rst.txt,
            the reStructuredText sources of Python's manuals; a document
            is a file, keyed by its path under _sources.
  linux     linux-doc-6.1: /usr/share/doc/linux-doc-6.1/html/_sources/**/*.rst.txt,
            the kernel's documentation, without translations/ (Chinese,
            Japanese, Korean and Italian; the corpus is English); a
            document is a file, keyed by its path under _sources.
  gcide     dict-gcide: /usr/share/dictd/gcide.dict.dz, the Collaborative
            International Dictionary of English (Webster's 1913 and
            WordNet). A dictzip file is a gzip file, read with gzip. Its
            dictd index gcide.index lists headword, offset and length (in
            dictd's base 64); a document is one distinct (offset, length)
            block, an entry, keyed by the first headword the index gives
            it and its ordinal among the blocks of that key in file order.
            The bytes no block covers (the blank line between entries,
            one entry the index misses) are left out.
  fortunes  fortunes, fortunes-min: the files they install in
            /usr/share/games/fortunes (dpkg-query -L; not the .dat indexes
            nor the .u8 links), by name. A document is one fortune: the
            lines between two lines "%", without them, keyed by the file's
            name and its ordinal in the file. One fortune, not one file,
            because 2 % of 43 files is one file or none.
Files are read in sorted path order. A document is its bytes as stored:
plain text, markup kept as it is. A source that is absent is an error
naming its package. --root DIR reads the same paths under DIR (a tree
laid out as the packages install, for tests; its fortunes are the
directory's files, dpkg-query being about /).

Duplicates. A document whose bytes (SHA-256) equal an earlier one's, in
the order above, is dropped: the same .rst.txt in two places, a fortune
in two files. Empty documents are not documents.

Split. A document is held out for evaluation when the SHA-256 of
"SOURCE:KEY", read as a big-endian integer, is 0 mod 50: about 2 % of each
source's documents, the same ones whatever else the corpus holds, and
no document is on both sides (nor a copy of one: duplicates are gone).

Order and windows. Each side's documents are concatenated in the order
of that same hash (a fixed order that mixes the sources: by source, the
B streams below would each hold one or two sources, and a run that
trains on a part of every stream would never reach the last source),
each document followed by one byte 0, which no source contains (a
document holding it is an error): the end of a document. Each side's byte stream is then cut as the fortunes'
was: non-overlapping windows of S + 1 bytes, a model reads bytes 0..S-1
of a window and predicts bytes 1..S; the W = floor(n / (S+1)) windows
are laid out as B streams of T = floor(W / B) consecutive windows (the
trailing W - T*B windows and the bytes of a partial window are dropped);
batch j is row b = window b*T + j. No held-out byte is in a training
window (the same text can recur in two documents, as a rule line or a
dictionary's attribution, and so can a window's bytes).

Cost: the whole corpus, some 75 MB of text, in about 3 s and 300 MB of
memory on this machine; train.npy is 4 bytes a byte, some 290 MB.

--fortunes (and --input). The earlier corpus, built exactly as before
this corpus existed: the fortunes' files concatenated as bytes in sorted
path order (with --input, the named files in the order given), one
stream cut into windows and batches as above, and batch j held out when
j % 20 == 19 (every 20th batch, 5 %: the files are concatenated by name,
so the last 5 % would be two files; every 20th batch samples them all).

Outputs DIR/train.npy [batches, B, S+1] and DIR/eval.npy [batches, B,
S+1], little-endian int32 ('<i4') with values 0..255 (the runtime reads
'<i4' and '<f4' only: a byte a value costs 4 bytes of file, read a tile
at a time), headers as the runtime's own writer pads them (64-byte
aligned), each written to a temporary name and renamed. The files
depend on the bytes read and B and S only. Prints per source its
documents and bytes (read, duplicates, held out, training), then each
file's counts. Exit status 0, 1 on a runtime error (a missing package or
file, too little text for one batch), 2 on a usage error.

Standard library only (no numpy).
"""
import argparse
import gzip
import hashlib
import os
import subprocess
import sys

FORTUNES_DIR = "usr/share/games/fortunes"
FORTUNES_PACKAGES = ("fortunes", "fortunes-min")
HOLDOUT_EVERY = 20  # --fortunes: batch j is held out when j % 20 == 19: 5 %
HOLDOUT_MOD = 50    # the corpus: a document is held out when its hash is 0 mod 50: 2 %
END = b"\0"         # the byte after every document of the corpus
WRITE_CHUNK = 1 << 22  # bytes of .npy body built in memory before each write

# The corpus' sources, in their order: name (in the split's hash), the
# packages that install it, its path under the root, the reader that
# cuts it into documents, and the paths under its directory left out
# (their licences are in doc/lm.md).
SOURCES = (
    ("python", ("python3.11-doc",), "usr/share/doc/python3.11/html/_sources", "rst", ()),
    ("linux", ("linux-doc-6.1",), "usr/share/doc/linux-doc-6.1/html/_sources", "rst",
     ("translations/",)),
    ("gcide", ("dict-gcide",), "usr/share/dictd/gcide.dict.dz", "gcide", ()),
    ("fortunes", FORTUNES_PACKAGES, FORTUNES_DIR, "fortunes", ()),
)


def fail(msg, status=1):
    print("lm_data: error: " + msg, file=sys.stderr)
    sys.exit(status)


def fortune_files(root):
    """The English fortune text files of the packages fortunes and
    fortunes-min, sorted: under / those dpkg-query -L lists (files of other
    packages in the directory are not theirs); under another root, the
    directory's regular files. Without the .dat indexes and the links.
    None when the packages are not installed."""
    where = os.path.join(root, FORTUNES_DIR)
    if root == "/":
        try:
            listing = subprocess.run(["dpkg-query", "-L"] + list(FORTUNES_PACKAGES),
                                     capture_output=True, check=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
        paths = listing.splitlines()
    elif os.path.isdir(where):
        paths = [os.path.join(where, name) for name in os.listdir(where)]
    else:
        return None
    files = set()
    for path in paths:
        if (os.path.dirname(path) == where and not path.endswith(".dat")
                and not os.path.islink(path) and os.path.isfile(path)):
            files.add(path)
    return sorted(files) or None


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))


def rst_documents(where, skip):
    """(key, bytes) of every *.rst.txt under where, in sorted path order;
    key is the path under where, '/'-separated."""
    found = []
    for dirpath, dirnames, filenames in os.walk(where):
        for name in filenames:
            if name.endswith(".rst.txt"):
                rel = os.path.relpath(os.path.join(dirpath, name), where).replace(os.sep, "/")
                if not rel.startswith(skip):
                    found.append(rel)
    for rel in sorted(found):
        yield rel, read(os.path.join(where, rel))


B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def b64_number(text, path, line):
    """A dictd index number: base-64 digits, most significant first."""
    v = 0
    for c in text:
        d = B64.get(c)
        if d is None:
            fail("%s:%d: '%s' is not a dictd base-64 number" % (path, line, text))
        v = v * 64 + d
    return v


def gcide_documents(dz):
    """(key, bytes) of every entry of the dictd dictionary dz (its index
    beside it, .dict.dz -> .index), in file order: one per distinct
    (offset, length) block the index names, keyed HEADWORD#N, the first
    headword the index names for the block and N its ordinal among the
    blocks of that headword."""
    index = dz[:-len(".dict.dz")] + ".index"
    first = {}  # (offset, length) -> the first headword naming it
    try:
        with open(index, "r", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                fields = line.rstrip("\n").split("\t")
                if len(fields) != 3:
                    fail("%s:%d: %d fields, not headword, offset and length" % (index, n, len(fields)))
                block = (b64_number(fields[1], index, n), b64_number(fields[2], index, n))
                first.setdefault(block, fields[0])
    except OSError as e:
        fail("%s: %s" % (index, e.strerror))
    except UnicodeDecodeError:
        fail("%s: not UTF-8" % index)
    try:
        with gzip.open(dz, "rb") as f:
            text = f.read()
    except (OSError, EOFError) as e:
        fail("%s: %s" % (dz, getattr(e, "strerror", None) or e))
    ordinal = {}
    for offset, length in sorted(first):
        if offset + length > len(text):
            fail("%s: an entry at %d of %d bytes ends past the text's %d bytes"
                 % (index, offset, length, len(text)))
        head = first[(offset, length)]
        n = ordinal.get(head, 0)
        ordinal[head] = n + 1
        yield "%s#%d" % (head, n), text[offset:offset + length]


def fortune_documents(files):
    """(key, bytes) of every fortune of the files, in order: the lines
    between lines "%", keyed FILE#N, N its ordinal among the file's
    fortunes."""
    for path in files:
        name = os.path.basename(path)
        n = 0
        lines = []
        for line in read(path).splitlines(keepends=True) + [b"%"]:
            if line in (b"%\n", b"%"):
                if lines:
                    yield "%s#%d" % (name, n), b"".join(lines)
                    n += 1
                lines = []
            else:
                lines.append(line)


def locate(root):
    """Each source's readable place, or one error naming every missing package."""
    places, missing, absent = [], [], []
    for name, packages, path, kind, skip in SOURCES:
        where = os.path.join(root, path)
        if kind == "fortunes":
            where = fortune_files(root)
            ok = where is not None
        elif kind == "gcide":
            ok = os.path.isfile(where) and os.path.isfile(where[:-len(".dict.dz")] + ".index")
        else:
            ok = os.path.isdir(where)
        if not ok:
            missing.extend(packages)
            absent.append(os.path.join(root, path))
        places.append(where)
    if missing:
        fail("the corpus needs Debian's %s, not installed (no %s): apt-get install %s, or sh "
             "scripts/quickstart.sh; --fortunes builds the fortunes-only corpus"
             % (", ".join(missing), ", ".join(absent), " ".join(missing)))
    return places


def documents(kind, where, skip):
    if kind == "rst":
        return rst_documents(where, skip)
    if kind == "gcide":
        return gcide_documents(where)
    return fortune_documents(where)


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
    """Writes the windows of the given batches of data's layout (B streams
    of steps windows) to path as [len(batches), batch, seq1] int32, a few
    MB at a time, through a temporary file renamed into place."""
    per = max(1, WRITE_CHUNK // (4 * batch * seq1))  # batches a write
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(npy_header((len(batches), batch, seq1)))
            for c in range(0, len(batches), per):
                part = batches[c:c + per]
                body = bytearray(4 * len(part) * batch * seq1)
                pos = 0
                for j in part:
                    for b in range(batch):
                        k = b * steps + j
                        # little-endian int32 of a byte: the byte, then three zero bytes
                        body[pos:pos + 4 * seq1:4] = data[k * seq1:(k + 1) * seq1]
                        pos += 4 * seq1
                f.write(body)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail("%s: %s" % (path, e.strerror))


def make_out(out):
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (out, e.strerror))


def build_fortunes(args):
    """The fortunes-only corpus: one stream, every 20th batch held out."""
    files = args.input or fortune_files(args.root)
    if files is None:
        fail("the corpus is Debian's fortunes package, which is not installed "
             "(apt-get install fortunes, or sh scripts/quickstart.sh); "
             "or name files with --input")
    data = b"".join(read(path) for path in files)

    seq1 = args.seq + 1
    windows = len(data) // seq1
    steps = windows // args.batch
    if steps < HOLDOUT_EVERY:
        fail("%d bytes make %d batches of %d windows of %d bytes; at least %d are needed "
             "to hold out one (every %dth)" % (len(data), steps, args.batch, seq1,
                                               HOLDOUT_EVERY, HOLDOUT_EVERY))
    held = [j for j in range(steps) if j % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    train = [j for j in range(steps) if j % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]

    out = args.out or "data/fortunes"
    make_out(out)
    train_path = os.path.join(out, "train.npy")
    eval_path = os.path.join(out, "eval.npy")
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


def build_corpus(args):
    """The corpus: documents of every source, deduplicated, split by a hash
    of their keys, each side a stream of windows."""
    places = locate(args.root)
    seen = set()  # SHA-256 of every document kept so far
    sides = ([], [])  # (hash, document) of the training and the held-out documents
    rows = []
    for (name, packages, path, kind, skip), where in zip(SOURCES, places):
        count = [0] * 8  # documents and bytes: read, duplicates, held out, training
        for key, doc in documents(kind, where, skip):
            if not doc:
                continue
            count[0] += 1
            count[1] += len(doc)
            digest = hashlib.sha256(doc).digest()
            if digest in seen:
                count[2] += 1
                count[3] += len(doc)
                continue
            seen.add(digest)
            if END in doc:
                fail("%s: document %s holds the byte %d that ends documents" % (name, key, END[0]))
            h = hashlib.sha256(("%s:%s" % (name, key)).encode("utf-8")).digest()
            held = int.from_bytes(h, "big") % HOLDOUT_MOD == 0
            sides[held].append((h, doc))
            count[4 if held else 6] += 1
            count[5 if held else 7] += len(doc)
        if count[0] == 0:
            fail("%s (%s): no documents in %s" % (name, ", ".join(packages), os.path.join(args.root, path)))
        rows.append([name] + count)
    rows.append(["total"] + [sum(r[i] for r in rows) for i in range(1, 9)])
    seen = None

    seq1 = args.seq + 1
    plan = []
    for label, side in (("train", sides[0]), ("eval", sides[1])):
        side.sort(key=lambda hd: hd[0])
        data = END.join(doc for h, doc in side) + END
        side.clear()
        windows = len(data) // seq1
        steps = windows // args.batch
        if steps < 1:
            fail("the %s text, %d bytes, makes no batch of %d windows of %d bytes"
                 % (label, len(data), args.batch, seq1))
        plan.append((label, data, windows, steps))

    out = args.out or "data/corpus"
    make_out(out)
    print("lm_data: %-8s %9s %10s %9s %9s %9s %9s %9s %10s"
          % ("source", "documents", "bytes", "dups", "dup bytes", "held out", "bytes",
             "training", "bytes"))
    for r in rows:
        print("lm_data: %-8s %9d %10d %9d %9d %9d %9d %9d %10d" % tuple(r))
    for label, data, windows, steps in plan:
        parts = [(label, range(steps))]
        if label == "eval" and args.eval_batches < steps:
            # the evaluation during training reads a fixed subset, its
            # batches evenly spaced over the held-out stream; eval_all.npy
            # keeps every held-out batch for a final score
            n = args.eval_batches
            parts = [("eval", [i * steps // n for i in range(n)]), ("eval_all", range(steps))]
        used = steps * args.batch
        for name, batches in parts:
            path = os.path.join(out, name + ".npy")
            write_windows(path, data, batches, args.batch, seq1, steps)
            print("lm_data: %s: %d bytes with an end byte a document: %d windows of %d bytes "
                  "(seq %d + 1), %d batches of %d%s -> %s [%d, %d, %d]; dropped the last %d bytes"
                  % (name, len(data), windows, seq1, args.seq, steps, args.batch,
                     "" if len(batches) == steps else ", %d of them evenly spaced" % len(batches),
                     path, len(batches), args.batch, seq1, len(data) - used * seq1))


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
                    "English text of Python's and Linux's documentation, GCIDE and the fortunes, "
                    "about 2 % of the documents held out for evaluation.")
    ap.add_argument("--out", metavar="DIR",
                    help="output directory, created if missing (default data/corpus; "
                         "data/fortunes with --fortunes or --input)")
    ap.add_argument("--batch", metavar="B", type=positive, default=8,
                    help="windows per batch (default 8)")
    ap.add_argument("--seq", metavar="S", type=positive, default=64,
                    help="sequence length: windows are S + 1 bytes (default 64)")
    ap.add_argument("--eval-batches", metavar="N", type=positive, default=200,
                    help="the corpus: eval.npy holds N of the held-out batches, evenly spaced, "
                         "and eval_all.npy all of them, when there are more (default 200)")
    ap.add_argument("--root", metavar="DIR", default="/",
                    help="read the packages' files under DIR instead of / (a tree laid out "
                         "as they install)")
    ap.add_argument("--fortunes", action="store_true",
                    help="the fortunes-only corpus as before: one stream, every 20th batch held out")
    ap.add_argument("--input", metavar="FILE", nargs="+", action="extend",
                    help="as --fortunes, on these files in this order")
    args = ap.parse_args()
    if args.fortunes or args.input:
        build_fortunes(args)
    else:
        build_corpus(args)


if __name__ == "__main__":
    main()
