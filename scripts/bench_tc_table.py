#!/usr/bin/env python3
"""The tensor-core / expansion table of bench/RESULTS.md from a bench-tensor-core CSV.

usage: scripts/bench_tc_table.py BENCH_TC.csv [EARLIER_BENCH_TC.csv]

Prints one row per (shape, sparsity, N): every kernel's µs, the fastest sparse kernel in bold and
its speedup against cuBLAS of the same run. Given an earlier run, also prints (to stderr) each
kernel's time ratio earlier / this over the rows both runs have: median and range.
"""
import bench_csv
import statistics
import sys

KERNELS = ["dense.cublas", "tca_bme.mma", "tca_bme.wgmma", "tca_bme.wgmma_smem", "tiled_csl.mma",
           "csr.expand_cublas",
           "macko.expand_cublas", "tca_bme.expand_cublas"]


def load(path):
    return {(r["shape"], r["kernel"], r["N"], r["sparsity"]): float(r["us"])
            for r in bench_csv.ok_rows(path) if r["kernel"] in KERNELS}


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    t = load(sys.argv[1])
    shapes = sorted({k[0] for k in t}, key=lambda s: tuple(int(v) for v in s.split("x")))
    print("| M×K | sparsity | N | " + " | ".join(KERNELS) + " | best sparse vs cuBLAS |")
    print("|---" * (len(KERNELS) + 4) + "|")
    for shape in shapes:
        for s in sorted({k[3] for k in t if k[0] == shape}):
            for n in sorted({k[2] for k in t if k[0] == shape}, key=int):
                cublas = t.get((shape, "dense.cublas", n, s))
                sparse = [(t[(shape, k, n, s)], k) for k in KERNELS[1:] if (shape, k, n, s) in t]
                if cublas is None or not sparse:
                    continue
                best = min(sparse)
                cells = [f"{cublas:.1f}"]
                for k in KERNELS[1:]:
                    v = t.get((shape, k, n, s))
                    cells.append("-" if v is None else (f"**{v:.1f}**" if (v, k) == best else f"{v:.1f}"))
                print(f"| {shape.replace('x', '×')} | {s} | {n} | " + " | ".join(cells) +
                      f" | {best[1]} {cublas / best[0]:.2f}× |")
    if len(sys.argv) == 3:
        old = load(sys.argv[2])
        for k in KERNELS:
            r = [old[key] / t[key] for key in t if key[1] == k and key in old]
            if r:
                print(f"{k}: earlier / this median {statistics.median(r):.2f} "
                      f"({min(r):.2f}-{max(r):.2f}) over {len(r)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
