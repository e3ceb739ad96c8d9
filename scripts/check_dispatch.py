#!/usr/bin/env python3
"""How good are the rule table's choices on measured rows?

For every benchmarked problem (shape, N, sparsity) of the given `sparrow bench` CSVs it replays
the dispatcher's lookup (scripts/make_rule_table.py cells, nearest N within 2x, nearest sparsity
within 0.1, then the nearest benchmarked shape with rows within 2x and columns within sqrt(2),
else the medians over shapes; src/dispatch/rule_table.cpp) and reports:
  * kernel choice: the picked kernel of each format vs that format's fastest kernel on this
    shape (within 5 % counts as right);
  * format choice: pick_format's format (dense unless a sparse kernel's cell beats cuBLAS and the
    dense cell of a benchmarked shape near it) vs the fastest of all candidates on this shape.
With the table generated from the same CSVs this is an in-sample check; against a run the table
was not made from (another session's run of the same shapes) it measures how well the choices
carry over between runs. A run made with --dependent-launch is replayed as dependent launches:
the table's dependent-launch cells first, up to its kDependentMaxN, and
there a sparse format must beat the fastest dense cell measured that way. --medians replays the lookup without shapes (every query takes the
medians over shapes), as tables before session 20 did.

With --measured (no table) it reads what a `--formats best` run measured instead of replaying:
each matmul(FORMAT) row against the fastest kernel row of that format on the same problem (the
kernel choice as the GPU ran it, with the table compiled into that binary).

usage: scripts/check_dispatch.py [--medians] TABLE.inc FILE.csv [FILE.csv ...]
       scripts/check_dispatch.py --measured FILE.csv [FILE.csv ...]
"""
import math
import re
import sys
from collections import defaultdict

import bench_csv


MAX_ROWS_LOG2, MAX_COLS_LOG2 = 1.0, 0.5  # rule_table.cpp's kMaxRowsLog2, kMaxColsLog2


def load_cells(path):
    """(format, kernel, n, sparsity, speedup, rows, cols, plain_only, dependent), and the largest N
    the dependent cells answer; rows = cols = 0: the median over shapes; plain_only: a dependent
    launch skips the cell; dependent: measured with dependent launches, read only by them, first
    (rule_cells.hpp's RuleCell, the table's kDependentMaxN)."""
    cells, dependent_max_n = [], float("inf")
    for line in open(path):
        m = re.match(r'\{Format::(\w+), "([\w.]+)", (\d+), ([\d.]+), (\d+), (\d+), ([\d.]+), (\d+)'
                     r'(?:, (true|false))?(?:, (true|false))?\},', line)
        if m:
            cells.append((m[1], m[2], int(m[3]), float(m[4]), float(m[7]), int(m[5]), int(m[6]),
                          m[9] == "true", m[10] == "true"))
        d = re.match(r"constexpr int64_t kDependentMaxN = (\d+);", line)
        if d:
            dependent_max_n = int(d[1])
    return cells, dependent_max_n


def dense_kernel(n, cells=None, rows=0, cols=0, dependent=False):
    """A dense weight (rule_table.cpp's deciding_cell): on a plain launch the fastest dense cell
    (sparsity 0: density 1) of a benchmarked shape near it, else, and always on a dependent launch,
    the registry's N ranges (kernels/registry.cpp: dense.gemv up to N = 8)."""
    if cells is not None and not dependent:
        k, _ = pick_kernel(cells, "dense", n, 0.0, rows, cols, shape_only=True)
        if k:
            return k
    return "dense.gemv" if n <= 8 else "dense.cublas"


def shape_distance(c, rows, cols):
    if c[5] <= 0 or rows <= 0:
        return None
    dr, dc = abs(math.log2(rows / c[5])), abs(math.log2(cols / c[6]))
    return None if dr > MAX_ROWS_LOG2 or dc > MAX_COLS_LOG2 else dr + dc


def pick_kernel(cells, fmt, n, s, rows=0, cols=0, shape_only=False):
    own = [c for c in cells if c[0] == fmt]
    if not own:
        return None, 0.0
    dn = min(abs(math.log2(c[2]) - math.log2(n)) for c in own)
    if dn > 1.0:
        return None, 0.0
    best_n = [c for c in own if abs(math.log2(c[2]) - math.log2(n)) == dn][0][2]
    at_n = [c for c in own if c[2] == best_n]
    ds = min(abs(c[3] - s) for c in at_n)
    if ds > 0.1:
        return None, 0.0
    here = [c for c in at_n if abs(c[3] - s) == ds]
    near = [(shape_distance(c, rows, cols), c[5], c[6]) for c in here]
    near = [x for x in near if x[0] is not None]
    if shape_only and not near:
        return None, 0.0
    shape = min(near)[1:] if near else (0, 0)
    c = max((c for c in here if (c[5], c[6]) == shape), key=lambda c: c[4])
    return c[1], c[4]


def read_runs(paths):
    """(row, dependent) for every ok row of a format in the CSVs (cuSPARSE's left out); dependent:
    the run used --dependent-launch (its `# command:` header line says so)."""
    for path in paths:
        header, rows = bench_csv.read(path)
        dependent = any(l.startswith("# command:") and "--dependent-launch" in l for l in header)
        for r in rows:
            if r["status"] == "ok" and r["format"] not in ("-", "") and not r["kernel"].startswith("cusparse"):
                yield r, dependent


def measured(paths):
    """matmul(FORMAT) rows of `--formats best` runs against their format's fastest kernel row."""
    rows = defaultdict(list)
    for r, _ in read_runs(paths):
        rows[(r["shape"], int(r["N"]), float(r["sparsity"]), r["pattern"], r["format"])].append(r)
    total = ok = 0
    misses = []
    for key, rs in sorted(rows.items()):
        picked = [r for r in rs if r["kernel"].startswith("matmul(")]
        own = {r["kernel"]: float(r["us"]) for r in rs if not r["kernel"].startswith("matmul(")}
        if not picked or not own:
            continue
        t, best = float(picked[0]["us"]), min(own.values())
        total += 1
        if t <= 1.05 * best:
            ok += 1
        else:
            misses.append(f"{key}: matmul {t:.1f} us, best {min(own, key=own.get)} {best:.1f} us ({t / best:.2f}x)")
    print(f"matmul within 5 % of its format's fastest kernel: {ok}/{total} = {100.0 * ok / max(total, 1):.1f} %")
    for m in misses:
        print("  miss:", m)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--measured":
        return measured(args[1:])
    medians = "--medians" in args
    args = [a for a in args if a != "--medians"]
    all_cells, dependent_max_n = load_cells(args[0])
    # A plain launch reads plain cells only; a dependent launch skips the plain-only ones and reads
    # the dependent cells first where they answer (rule_table.cpp's best_cell).
    plain = [c for c in all_cells if not c[8]]
    cells_for = {False: plain, True: [c for c in plain if not c[7]]}
    dependent_cells = [c for c in all_cells if c[8]]

    def pick(fmt, n, s, m, k, dep):
        if dep and n <= dependent_max_n and any(c[0] == fmt for c in dependent_cells):
            found = pick_kernel(dependent_cells, fmt, n, s, m, k)
            if found[0]:
                return found
        return pick_kernel(cells_for[dep], fmt, n, s, m, k)

    def dense_bar(n, m, k, dep):  # what a sparse format must beat (rule_table.cpp's pick_format)
        if dep and n <= dependent_max_n:
            _, sp = pick_kernel(dependent_cells, "dense", n, 0.0, m, k)
            return max(sp, 1.0)
        if not dep:  # the dense cell of a benchmarked shape near it, as a dense weight runs
            _, sp = pick_kernel(cells_for[False], "dense", n, 0.0, m, k, shape_only=True)
            return max(sp, 1.0)
        return 1.0
    rows = defaultdict(list)
    dependent = {}  # problem -> its run used --dependent-launch
    for r, dep in read_runs(args[1:]):
        if r["kernel"].startswith("matmul"):
            continue
        key = (r["shape"], int(r["N"]), float(r["sparsity"]), r["pattern"])
        rows[key].append(r)
        dependent[key] = dep
    k_total = k_ok = f_total = f_ok = 0
    misses = []
    for key, rs in sorted(rows.items()):
        shape, n, s, pattern = key
        m, k = (0, 0) if medians else (int(rs[0]["M"]), int(rs[0]["K"]))
        cells = cells_for[dependent[key]]
        us = {r["kernel"]: float(r["us"]) for r in rs}
        for fmt in sorted({r["format"] for r in rs}):
            own = {r["kernel"]: float(r["us"]) for r in rs if r["format"] == fmt}
            kname = (dense_kernel(n, cells, m, k, dependent[key]) if fmt == "dense"
                     else pick(fmt, n, s, m, k, dependent[key])[0])
            if kname is None or kname not in own or len(own) < 2:
                continue
            k_total += 1
            if own[kname] <= 1.05 * min(own.values()):
                k_ok += 1
            else:
                misses.append(f"kernel {key} {fmt}: picked {kname} {own[kname]:.1f} us, best {min(own, key=own.get)} {min(own.values()):.1f} us")
        best_fmt, best_sp = "dense", dense_bar(n, m, k, dependent[key])
        for fmt in ("csr", "macko", "tca_bme", "tiled_csl"):
            kname, sp = pick(fmt, n, s, m, k, dependent[key])
            if kname and sp > best_sp:
                best_fmt, best_sp, best_k = fmt, sp, kname
        chosen = dense_kernel(n, cells, m, k, dependent[key]) if best_fmt == "dense" else best_k
        if chosen in us:
            f_total += 1
            if us[chosen] <= 1.05 * min(us.values()):
                f_ok += 1
            else:
                misses.append(f"format {key}: picked {chosen} {us[chosen]:.1f} us, best {min(us, key=us.get)} {min(us.values()):.1f} us")
    print(f"kernel choice within 5 % of the format's best: {k_ok}/{k_total} = {100.0 * k_ok / max(k_total, 1):.1f} %")
    print(f"format choice within 5 % of the best candidate: {f_ok}/{f_total} = {100.0 * f_ok / max(f_total, 1):.1f} %")
    for m in misses:
        print("  miss:", m)


if __name__ == "__main__":
    main()
