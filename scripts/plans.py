#!/usr/bin/python3
"""scripts/plans.py — every plan gslc makes of the tree's programs, written
to files, so that two builds can be compared byte for byte (a refactor of
propagation, the partitioner or the search must change none of them).

usage: plans.py GSLC OUTDIR [JOBS [SOURCE_TREE]]  (the tree defaults to the working directory)

For each program of examples/, tests/auto/, tests/spmd/ and bench/, and
each mesh of 1, 2, 3, 4 and 64 devices that its mesh consts allow (every
split of the count over them, in sizes 1, 2, 3, 4, 8 and 64), writes
--explain, --stats and --emit-spmd, with and without --auto-shard, and
for the examples --emit-ir and --emit-spmd under --precision bf16; a
failed compile writes its exit status and message. Then, for example:

  /usr/bin/python3 scripts/plans.py OLD/gslc /tmp/old 2
  /usr/bin/python3 scripts/plans.py ./gslc /tmp/new 2
  diff -r /tmp/old /tmp/new

Both runs must read the same tree: the outputs name its paths."""
import itertools, os, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

gslc, out = sys.argv[1], sys.argv[2]
jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
root = sys.argv[4] if len(sys.argv) > 4 else os.getcwd()
os.makedirs(out, exist_ok=True)
progs = []
for d in ["examples", "tests/auto", "tests/spmd", "bench"]:
    for f in sorted(os.listdir(os.path.join(root, d))):
        if f.endswith(".gsl"):
            progs.append(os.path.join(d, f))

def meshes(path):
    text = open(os.path.join(root, path)).read()
    m = re.search(r"^mesh\s*\[([^\]]*)\]", text, re.M)
    if not m:
        return [[]]
    consts = []
    for part in m.group(1).split(","):
        v = part.split("=")[1].strip()
        if re.match(r"[A-Za-z_]\w*$", v):
            consts.append(v)
    if not consts:
        return [[]]
    res = []
    for n in [1, 2, 3, 4, 64]:
        for sizes in itertools.product([1, 2, 3, 4, 8, 64], repeat=len(consts)):
            p = 1
            for s in sizes:
                p *= s
            if p == n:
                res.append(["-D", "%s=%d" % (c, s)] for c, s in zip(consts, sizes))
    return [sum((list(x) for x in r), []) for r in res]

tasks = []
for p in progs:
    for ds in meshes(p):
        for mode in ["--explain", "--stats", "--emit-spmd"]:
            for auto in [[], ["--auto-shard"]]:
                name = "%s%s_%s%s" % (p.replace("/", "_"), "".join(x for x in ds if x != "-D"), mode[2:],
                                      "_auto" if auto else "")
                tasks.append((name, [gslc, mode] + auto + ds + [os.path.join(root, p)]))
        if p.startswith("examples/"):
            for mode in ["--emit-ir", "--emit-spmd"]:
                name = "%s%s_%s_bf16" % (p.replace("/", "_"), "".join(x for x in ds if x != "-D"), mode[2:])
                tasks.append((name, [gslc, mode, "--precision", "bf16"] + ds + [os.path.join(root, p)]))

def run(t):
    name, cmd = t
    r = subprocess.run(cmd, capture_output=True, text=True, cwd="/tmp")
    with open(os.path.join(out, name), "w") as f:
        f.write("rc=%d\n" % r.returncode)
        f.write(re.sub(r"search took [0-9.]+ s|in [0-9.]+ s", "TIME", r.stdout))
        f.write(r.stderr)

with ThreadPoolExecutor(jobs) as ex:
    list(ex.map(run, tasks))
print(len(tasks), "runs")
