#!/usr/bin/env python3
"""Short decode summary of a `sparrow bench --json` file: per problem, cuBLAS, the fastest kernel
and the fastest sparse kernel, with speedups and % of the bandwidth floor. Standard library only.

usage: scripts/bench_summary.py BENCH.json   (or BENCH.json.xz)
"""
import json
import lzma
import sys


def main(path):
    # Standard library only and no imports of its own: carry.sh copies this file to the GPU alone.
    with (lzma.open(path, "rt") if path.endswith(".xz") else open(path)) as f:
        data = json.load(f)
    rows = data["rows"]
    print(f"{path}: {data['device']['name']}, read bandwidth {data['read_bandwidth_gbps']:.0f} GB/s, "
          f"{data['dtype']}, git {data['git_revision']}, {data['date']}")
    failed = [r for r in rows if r["status"] == "FAIL"]
    problems = {}
    for r in rows:
        if r["kernel"] == "stream_read" or "us" not in r or r["status"] != "ok":
            continue
        key = (r["M"], r["K"], r["pattern"], r["sparsity"], r["N"])
        problems.setdefault(key, []).append(r)
    print(f"{'MxK':>12} {'pattern':>9} {'spars':>5} {'N':>3} {'cuBLAS us':>9} "
          f"{'best sparse kernel':>20} {'us':>8} {'x cuBLAS':>8} {'%floor':>6}")
    for key in sorted(problems):
        group = problems[key]
        cublas = next((r for r in group if r["kernel"] == "dense.cublas"), None)
        sparse = [r for r in group if r["format"] not in ("dense", "-")]
        best = min(sparse, key=lambda r: r["us"]) if sparse else None
        m, k, pattern, sparsity, n = key
        print(f"{m:>6}x{k:<5} {pattern:>9} {sparsity:>5.2f} {n:>3} "
              f"{cublas['us'] if cublas else float('nan'):>9.2f} "
              f"{best['kernel'] if best else '-':>20} "
              f"{best['us'] if best else float('nan'):>8.2f} "
              f"{best.get('speedup_vs_cublas', float('nan')) if best else float('nan'):>8.2f} "
              f"{best['pct_floor'] if best else float('nan'):>6.1f}")
    print(f"{len(rows)} rows, {len(failed)} failed")
    for r in failed[:10]:
        print(f"  FAIL {r['kernel']} {r['M']}x{r['K']} N={r['N']} s={r['sparsity']}: {r.get('note', '')}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
