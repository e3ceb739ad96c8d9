#!/usr/bin/env bash
# The perf branch's GPU run (bench/NOTES-decode.md runs P1-P3): macko + tca_bme GPU tests,
# compute-sanitizer memcheck on the small shapes, then `sparrow bench` lines; ~100 s on an H100.
#   bash scripts/perf-decode-gpu.sh [BIN_DIR]   (default .carry/perf/bin: sparrow, sparrow_gpu_tests)
# Output under $OUT; the last lines are a short table.
set -uo pipefail
B=${1:-.carry/perf/bin}
O=${OUT:-out}; mkdir -p "$O"
t0=$SECONDS
st() { echo "== $1 ($((SECONDS - t0)) s)"; }
st tests
timeout 60 $B/sparrow_gpu_tests --gtest_filter='MackoWarpRow*:TcaBmeDecode*' >"$O/tests.log" 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |tests ran|FAILED  \]|Failure|error" "$O/tests.log" | head -12
st memcheck
timeout 30 compute-sanitizer --tool memcheck $B/sparrow_gpu_tests --gtest_filter='MackoWarpRow*:TcaBmeDecode*-*Large*:*Llama*:*SmallShapesBf*' >"$O/memcheck.log" 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/memcheck.log" | tail -4
bench() { local name=$1 lim=$2; shift 2; st "$name"; timeout "$lim" $B/sparrow bench --reps 50 "$@" --csv "$O/$name.csv" >"$O/$name.log" 2>&1; echo "$name rc=$?"; }
bench main 50 --shapes 11008x4096,4096x11008,28672x8192 --n 1,8 --sparsity 0.5,0.7,0.9 --pattern random --formats macko,tca_bme,csr
SPARROW_MACKO_ONE_TOKEN=persistent bench persistent 15 --shapes 11008x4096 --n 1 --sparsity 0.5,0.7,0.9 --pattern random --formats macko
bench magnitude 20 --shapes 11008x4096 --n 1 --sparsity 0.5,0.7 --pattern magnitude --formats macko,tca_bme,csr
st done
grep -h "read bandwidth" "$O"/main.csv
for f in main persistent magnitude; do echo "--- $f (shape,kernel,N,sparsity,us,%floor,x cublas,status)"; grep -v "^#" "$O/$f.csv" 2>/dev/null | grep -v "^shape" | grep -v -E "cusparse|stream_read" | cut -d, -f1,3,6,7,12,17,18,21 | sed -e 's/macko.warp_row/mk/' -e 's/tca_bme.decode/tca/' -e 's/csr.vector/csr/' -e 's/dense.cublas/cub/' | head -100; done
