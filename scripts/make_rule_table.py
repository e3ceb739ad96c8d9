#!/usr/bin/env python3
"""Builds one GPU's rule table (src/dispatch/rule_table_<gpu>.inc) from `sparrow bench` CSV files.

Each output row is one (format, kernel, N, sparsity, shape) cell: the kernel's speedup against
cuBLAS measured in the same run on that M x K (the median of its rows), plus one cell per
(format, kernel, N, sparsity) with shape 0 x 0: the median over the benchmarked shapes. The
dispatcher reads these rows to pick a kernel per (format, N, shape) and a format per layer: a
weight near a measured shape (rule_table.cpp says how near) takes that shape's cells, any other
weight the medians. Only rows with status ok are used. Every file must come from one GPU (its
`# gpu:` header line): the table says which GPU it was measured on, and src/dispatch/
shipped_tables.cpp answers a lookup from the table of the GPU it runs on.

usage: scripts/make_rule_table.py --self-test
       scripts/make_rule_table.py OUT.inc [--leave-out KERNEL:NMAX:REASON ...]
           [--leave-out-dependent KERNEL:NMAX:REASON ...] [--dependent-up-to NMAX:REASON]
           FILE.csv [FILE.csv ...]
       (later files win per cell)

--leave-out drops KERNEL's cells at N <= NMAX, so the dispatcher never picks it there, and writes
the reason into the generated file: for a choice the kernel benchmark makes but a measured client
(the engine) contradicts. --leave-out-dependent marks those plain-launch cells plain-launch only
(a trailing `true`): a dependent launch (MatmulOptions::dependent_launch, the engine's) skips
them, a plain launch (what those runs measured) keeps them; the same kernel's cells from a
dependent-launch run (below) at N <= NMAX are dropped, so a dependent launch never picks it there.

A file whose header says `# dependent launch: on` (`sparrow bench --dependent-launch`) gives
cells of their own, marked `false, true`: dependent launches read them first where they cover
the query (rule_table.cpp), plain launches never. Such a run should time every kernel of the
formats it covers (`--formats best`), since a dependent launch then chooses among those alone,
and dense.gemv, whose cells become the bar a sparse format must beat on a dependent launch.
--dependent-up-to keeps such cells only at N <= NMAX and has them answer dependent launches of
N <= NMAX only (the table's kDependentMaxN); above it dependent launches read the
plain-launch cells, as before those runs: for where the engine contradicted them.
"""
import statistics
import sys

import bench_csv


def self_test() -> int:
    """Writes tables from small runs in a temporary folder: one GPU's cells, the later file winning
    per cell, and runs of two GPUs refused (the CTest scripts.make_rule_table)."""
    import os
    import subprocess
    import tempfile

    cols = "format,kernel,M,K,N,sparsity,pattern,dtype,status,speedup_vs_cublas"

    def run(gpu, speedup):
        return ("# gpu: %s (sm_90, 132 SMs)\n# date: 2026-11-28T00:00:00Z\n%s\n"
                "macko,macko.warp_row,4096,4096,1,0.5,random,fp16,ok,%s\n" % (gpu, cols, speedup))

    with tempfile.TemporaryDirectory() as d:
        files = {}
        for name, gpu, speedup in (("a", "NVIDIA H200", "1.25"), ("b", "NVIDIA H200", "1.40"),
                                   ("c", "NVIDIA H100 80GB HBM3", "1.50")):
            files[name] = os.path.join(d, name + ".csv")
            with open(files[name], "w") as f:
                f.write(run(gpu, speedup))
        out = os.path.join(d, "t.inc")
        me = [sys.executable, os.path.abspath(__file__), out]
        r = subprocess.run(me + [files["a"], files["b"]], capture_output=True, text=True)
        text = open(out).read() if r.returncode == 0 else ""
        checks = [
            ("one GPU's runs make a table", r.returncode == 0),
            ("the table names its GPU", 'constexpr const char* kGpu = "NVIDIA H200";' in text),
            ("the later file wins per cell",
             '{Format::macko, "macko.warp_row", 1, 0.50, 4096, 4096, 1.4000, 1},' in text),
            ("the medians over shapes",
             '{Format::macko, "macko.warp_row", 1, 0.50, 0, 0, 1.4000, 1},' in text),
            ("no dependent limit without --dependent-up-to",
             "constexpr int64_t kDependentMaxN = INT64_MAX;" in text),
        ]
        r2 = subprocess.run(me + [files["a"], files["c"]], capture_output=True, text=True)
        checks.append(("runs of two GPUs are refused",
                       r2.returncode == 1 and "one table holds one GPU's runs" in r2.stderr))
    failed = [name for name, ok in checks if not ok]
    for name, ok in checks:
        print("%s: %s" % ("ok" if ok else "FAILED", name))
    return 1 if failed else 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_path, args = sys.argv[1], sys.argv[2:]
    leave_out, plain_only, paths = [], [], []
    dependent_up_to = None  # (NMAX, REASON)
    while args:
        a = args.pop(0)
        if a == "--dependent-up-to":
            nmax, reason = args.pop(0).split(":", 1)
            dependent_up_to = (int(nmax), reason)
        elif a in ("--leave-out", "--leave-out-dependent"):
            kernel, nmax, reason = args.pop(0).split(":", 2)
            (leave_out if a == "--leave-out" else plain_only).append((kernel, int(nmax), reason))
        else:
            paths.append(a)
    cells = {}
    gpu, dates = None, set()
    for path in paths:  # a later file's cells replace an earlier file's (newer measurements win)
        file_cells = {}
        header, rows = bench_csv.read(path)
        dependent = any(l.startswith("# dependent launch: on") for l in header)
        for l in header:
            if l.startswith("# gpu:"):
                file_gpu = l[len("# gpu:"):].strip().split(" (")[0]
                if gpu is not None and file_gpu != gpu:
                    print("make_rule_table.py: %s was measured on %s, the files before it on %s: "
                          "one table holds one GPU's runs" % (path, file_gpu, gpu), file=sys.stderr)
                    return 1
                gpu = file_gpu
            elif l.startswith("# date:"):
                dates.add(l[len("# date:"):].strip()[:10])
        for row in rows:
            if row["status"] != "ok" or row["format"] in ("-", "") or not row["speedup_vs_cublas"]:
                continue
            if row["kernel"].startswith("cusparse") or row["kernel"].startswith("matmul"):
                continue
            if row["pattern"] != "random" or row["dtype"] != "fp16":
                continue
            # A dense kernel's time does not depend on the problem's zeros: its rows of every
            # sparsity make one cell at sparsity 0, where a dense weight's density (1) looks.
            sparsity = 0.0 if row["format"] == "dense" else float(row["sparsity"])
            key = (row["format"], row["kernel"], int(row["N"]), sparsity, int(row["M"]),
                   int(row["K"]), dependent)
            file_cells.setdefault(key, []).append(float(row["speedup_vs_cublas"]))
        cells.update(file_cells)
    for kernel, nmax, _ in leave_out:
        cells = {k: v for k, v in cells.items() if not (k[1] == kernel and k[2] <= nmax)}
    if dependent_up_to:
        cells = {k: v for k, v in cells.items() if not (k[6] and k[2] > dependent_up_to[0])}
    for kernel, nmax, _ in plain_only:  # a dependent launch never picks it: no dependent cells
        cells = {k: v for k, v in cells.items() if not (k[6] and k[1] == kernel and k[2] <= nmax)}
    # Per shape: the median of that shape's rows; over shapes: the median of the shapes' values.
    shaped = {k: statistics.median(v) for k, v in cells.items()}
    over = {}
    for (fmt, kernel, n, s, _, _, dep), v in shaped.items():
        over.setdefault((fmt, kernel, n, s, 0, 0, dep), []).append(v)
    with open(out_path, "w") as out:
        out.write("// Generated by scripts/make_rule_table.py from: %s\n" % " ".join(paths))
        out.write("// Measured on %s, %s. Speedup vs cuBLAS per shape, and its median over shapes\n" % (gpu, ", ".join(sorted(dates))))
        out.write("// (rows, cols 0) (fp16, random pattern, cold L2, CUDA-graph replay). Do not edit by hand.\n")
        for kernel, nmax, reason in leave_out:
            out.write("// Left out: %s at N <= %d: %s\n" % (kernel, nmax, reason))
        for kernel, nmax, reason in plain_only:
            out.write("// Left out on a dependent launch (plain-launch cells marked true, no dependent"
                      " cells): %s at N <= %d: %s\n"
                      % (kernel, nmax, reason))
        if dependent_up_to:
            out.write("// Dependent-launch cells answer N <= %d only (above: the plain-launch cells): %s\n"
                      % dependent_up_to)
        out.write('constexpr const char* kGpu = "%s";\n' % (gpu or "unknown"))
        out.write('constexpr const char* kDate = "%s";\n' % ",".join(sorted(dates)))
        out.write("constexpr int64_t kDependentMaxN = %s;\n"
                  % (dependent_up_to[0] if dependent_up_to else "INT64_MAX"))
        out.write("const RuleCell kCells[] = {\n")
        rows = [(k, v, 1) for k, v in shaped.items()]
        rows += [(k, statistics.median(v), len(v)) for k, v in over.items()]
        for (fmt, kernel, n, s, m, kk, dep), v, count in sorted(rows):
            marked = not dep and any(kernel == k and n <= nmax for k, nmax, _ in plain_only)
            flags = ", false, true" if dep else (", true" if marked else "")
            out.write('{Format::%s, "%s", %d, %.2f, %d, %d, %.4f, %d%s},\n'
                      % (fmt, kernel, n, s, m, kk, v, count, flags))
        out.write("};\n")
    print("wrote %d cells (%d per shape, %d over shapes) to %s"
          % (len(rows), len(shaped), len(over), out_path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
