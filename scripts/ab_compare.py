#!/usr/bin/env python3
"""Time ratios of two builds (or two settings) from `sparrow bench` CSV files of one device call.

    scripts/ab_compare.py A.csv[,A2.csv...] B.csv[,B2.csv...] [KERNEL,KERNEL...] [--rows]

Each side's time of a problem is the mean over its files (runs alternated in one call: A, B, A,
B, so drift between machines does not enter). Prints a markdown table of B / A per kernel and
sparsity, one column per N: the minimum and maximum over the benchmarked shapes. --rows also
prints every problem. Only rows with status ok count; kernels default to all but the baselines.
"""
import sys
from collections import defaultdict

import bench_csv


def load(paths):
    times = defaultdict(list)
    for path in paths.split(","):
        for r in bench_csv.ok_rows(path):
            times[(r["kernel"], r["shape"], int(r["N"]), r["sparsity"])].append(float(r["us"]))
    return {k: sum(v) / len(v) for k, v in times.items()}


def main():
    args = [a for a in sys.argv[1:] if a != "--rows"]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = load(args[0]), load(args[1])
    kernels = args[2].split(",") if len(args) > 2 else sorted(
        {k[0] for k in a if k[0] not in ("stream_read", "dense.cublas")})
    ratios = defaultdict(list)
    for key in sorted(a.keys() & b.keys()):
        if key[0] in kernels:
            ratios[(key[0], key[3], key[2])].append((key[1], b[key] / a[key], a[key], b[key]))
    ns = sorted({k[2] for k in ratios})
    print("Time of B / time of A (below 1: B is faster), min–max over shapes:")
    print()
    print("| kernel | sparsity | " + " | ".join(f"N = {n}" for n in ns) + " |")
    print("|---|---|" + "---|" * len(ns))
    for kernel in kernels:
        for sp in sorted({k[1] for k in ratios if k[0] == kernel}):
            cells = []
            for n in ns:
                v = [r[1] for r in ratios.get((kernel, sp, n), [])]
                cells.append(f"{min(v):.2f}–{max(v):.2f}" if v else "")
            print(f"| {kernel} | {sp} | " + " | ".join(cells) + " |")
    if "--rows" in sys.argv:
        for (kernel, sp, n), rs in sorted(ratios.items()):
            for shape, ratio, ta, tb in rs:
                print(f"{kernel} {shape} N={n} {sp}: A {ta:.2f} -> B {tb:.2f} us (B / A {ratio:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
