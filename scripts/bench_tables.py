#!/usr/bin/env python3
"""Markdown tables for bench/RESULTS.md from `sparrow bench --json` files (standard library only).

usage: scripts/bench_tables.py RANDOM.json [MAGNITUDE.json|MAGNITUDE.csv]   (or FILE.json.xz)

Prints: the run's header, the stream-read rows, cuBLAS per shape and N, every kernel at N = 1
(us, % of floor, speedup vs cuBLAS), the fastest sparse kernel per problem, and, given a
magnitude file, each sparse kernel's magnitude/random time ratio.
"""
import csv
import json
import sys

from bench_csv import open_text


def number(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def load(path):
    """A bench --json file, or a --csv file as {"rows": [...]} (empty cells left out); either may
    be xz-compressed (FILE.json.xz)."""
    with open_text(path) as f:
        if not path.removesuffix(".xz").endswith(".csv"):
            return json.load(f)
        lines = [line for line in f if not line.startswith("#")]
    return {"rows": [{k: number(v) for k, v in r.items() if v != ""} for r in csv.DictReader(lines)]}


def header(d):
    dev = d["device"]
    return (f"- GPU: {dev['name']}, {dev['sm_count']} SMs, L2 {dev['l2_bytes'] / 2**20:.0f} MiB, "
            f"SM clock {dev['sm_clock_now_mhz']} MHz, memory clock {dev['mem_clock_now_mhz']} MHz, "
            f"driver {dev['driver']}\n"
            f"- date: {d['date']}, sparrow git {d['git_revision']}, {d['dtype']}, reps {d['reps']}\n"
            f"- measured read bandwidth (ceiling): {d['read_bandwidth_gbps']:.0f} GB/s\n"
            f"- command: `{d['command']}`\n")


def ok_rows(d):
    return [r for r in d["rows"] if "us" in r and r["kernel"] != "stream_read"]


def shapes(rows):
    seen = []
    for r in rows:
        if (r["M"], r["K"]) not in seen:
            seen.append((r["M"], r["K"]))
    return seen


def stream_table(d):
    out = ["| M×K | dense bytes | stream_read µs | GB/s | % of ceiling |", "|---|---|---|---|---|"]
    for r in d["rows"]:
        if r["kernel"] == "stream_read" and "us" in r:
            out.append(f"| {r['M']}×{r['K']} | {r['bytes'] / 1e6:.1f} MB | {r['us']:.2f} | "
                       f"{r['gbps']:.0f} | {r['pct_floor']:.1f} |")
    return "\n".join(out)


def cublas_table(d):
    rows = [r for r in ok_rows(d) if r["kernel"] == "dense.cublas"]
    ns = sorted({r["N"] for r in rows})
    out = ["| M×K | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for m, k in shapes(rows):
        cells = []
        for n in ns:
            us = [r["us"] for r in rows if (r["M"], r["K"], r["N"]) == (m, k, n)]
            cells.append(f"{min(us):.2f}–{max(us):.2f}" if us and max(us) - min(us) > 0.05 * min(us)
                         else (f"{sum(us) / len(us):.2f}" if us else "-"))
        out.append(f"| {m}×{k} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def n1_table(d, n=1):
    rows = [r for r in d["rows"] if r["kernel"] != "stream_read" and r["N"] == n]
    kernels = []
    for r in rows:
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
    out = ["| M×K | sparsity | " + " | ".join(kernels) + " |", "|---|---|" + "---|" * len(kernels)]
    keys = []
    for r in rows:
        key = (r["M"], r["K"], r["sparsity"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        cells = []
        for kern in kernels:
            r = next((r for r in rows if (r["M"], r["K"], r["sparsity"]) == key and r["kernel"] == kern), None)
            if r is None or "us" not in r:
                cells.append(r["status"] if r else "-")
            else:
                mark = "**" if r.get("best") else ""
                sp = r.get("speedup_vs_cublas")
                cells.append(f"{mark}{r['us']:.1f}{mark} ({r['pct_floor']:.0f}%, {sp:.2f}×)"
                             + ("" if r["status"] == "ok" else f" {r['status']}"))
        out.append(f"| {key[0]}×{key[1]} | {key[2]:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def best_table(d):
    rows = [r for r in ok_rows(d) if r["status"] == "ok"]
    out = ["| M×K | sparsity | N | cuBLAS µs | fastest sparse kernel | µs | × cuBLAS | % floor |",
           "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["M"], r["K"], r["sparsity"], r["N"]) for r in rows})
    for key in keys:
        g = [r for r in rows if (r["M"], r["K"], r["sparsity"], r["N"]) == key]
        cub = next((r for r in g if r["kernel"] == "dense.cublas"), None)
        sparse = [r for r in g if r["format"] not in ("dense", "-")]
        if not sparse or not cub:
            continue
        b = min(sparse, key=lambda r: r["us"])
        out.append(f"| {key[0]}×{key[1]} | {key[2]:.1f} | {key[3]} | {cub['us']:.2f} | {b['kernel']} | "
                   f"{b['us']:.2f} | {b.get('speedup_vs_cublas', 0):.2f} | {b['pct_floor']:.1f} |")
    return "\n".join(out)


def magnitude_table(rand, mag):
    rr = {(r["M"], r["K"], r["sparsity"], r["N"], r["kernel"]): r for r in ok_rows(rand)}
    rows = [r for r in ok_rows(mag) if r["format"] not in ("dense", "-")]
    kernels = []
    for r in rows:
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
    out = ["| M×K | sparsity | N | " + " | ".join(kernels) + " |", "|---|---|---|" + "---|" * len(kernels)]
    keys = sorted({(r["M"], r["K"], r["sparsity"], r["N"]) for r in rows})
    for key in keys:
        cells = []
        for kern in kernels:
            m = next((r for r in rows if (r["M"], r["K"], r["sparsity"], r["N"]) == key and r["kernel"] == kern), None)
            r = rr.get(key + (kern,))
            cells.append(f"{m['us'] / r['us']:.2f}" if m and r else "-")
        out.append(f"| {key[0]}×{key[1]} | {key[2]:.1f} | {key[3]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    rand = load(argv[1])
    print("### Run\n")
    print(header(rand))
    print("### Streaming read of the dense weight's bytes under the protocol\n")
    print(stream_table(rand) + "\n")
    print("### dense.cublas (µs per call)\n")
    print(cublas_table(rand) + "\n")
    print("### N = 1, every kernel: µs (% of floor, speedup vs cuBLAS); bold = fastest\n")
    print(n1_table(rand, 1) + "\n")
    print("### N = 8, every kernel\n")
    print(n1_table(rand, 8) + "\n")
    print("### Fastest sparse kernel per problem\n")
    print(best_table(rand) + "\n")
    if len(argv) == 3:
        mag = load(argv[2])
        print("### Magnitude pattern: time(magnitude) / time(random), same kernel and problem\n")
        if "device" in mag:
            print(header(mag))
        print(magnitude_table(rand, mag) + "\n")


if __name__ == "__main__":
    main(sys.argv)
