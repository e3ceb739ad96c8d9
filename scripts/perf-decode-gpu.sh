#!/usr/bin/env bash
# A kernel-development run on the GPU machine (bench/NOTES-decode.md): the GPU tests of the
# kernels being worked on, compute-sanitizer memcheck on their small shapes, then `sparrow bench`
# on the shapes. Not a substitute for scripts/gpu-test.sh (the full run).
#   bash scripts/perf-decode-gpu.sh [BIN_DIR]        (default .carry/bin: sparrow, sparrow_gpu_tests)
# Environment (defaults in brackets):
#   TESTS    gtest filter of the GPU tests                     [TcaBmeDecode*]
#   MEMCHECK gtest filter for memcheck ('' skips it)           [TcaBmeDecode*-*Large*:*Llama*]
#   FORMATS  kernels to time                                   [tca_bme.decode,macko.warp_row,csr.vector]
#   SHAPES, NS, SPARSITIES                                     [the four issue shapes; 1,8,16; 0.5,0.7,0.9]
#   MAG_SHAPES  shapes of the magnitude pass ('' skips it)     [11008x4096]
# Output under $OUT: tests.log, memcheck.log, main.csv/.log, magnitude.csv/.log; a short table last.
set -uo pipefail
B=${1:-.carry/bin}
O=${OUT:-out}
mkdir -p "$O"
TESTS=${TESTS:-'TcaBmeDecode*'}
MEMCHECK=${MEMCHECK-'TcaBmeDecode*-*Large*:*Llama*'}
FORMATS=${FORMATS:-tca_bme.decode,macko.warp_row,csr.vector}
SHAPES=${SHAPES:-4096x4096,11008x4096,4096x11008,28672x8192}
NS=${NS:-1,8,16}
SPARSITIES=${SPARSITIES:-0.5,0.7,0.9}
MAG_SHAPES=${MAG_SHAPES-11008x4096}
t0=$SECONDS
st() { echo "== $1 ($((SECONDS - t0)) s)"; }
st tests
timeout 240 "$B/sparrow_gpu_tests" --gtest_filter="$TESTS" >"$O/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |tests ran|FAILED  \]|Failure" "$O/tests.log" | head -12
if [ -n "$MEMCHECK" ]; then
  st memcheck
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$B/sparrow_gpu_tests" \
    --gtest_filter="$MEMCHECK" >"$O/memcheck.log" 2>&1
  echo "memcheck rc=$?"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$O/memcheck.log" | tail -4
fi
bench() {
  local name=$1 lim=$2
  shift 2
  st "$name"
  timeout "$lim" "$B/sparrow" bench --reps 50 "$@" --csv "$O/$name.csv" >"$O/$name.log" 2>&1
  echo "$name rc=$?"
}
bench main 200 --shapes "$SHAPES" --n "$NS" --sparsity "$SPARSITIES" --pattern random --formats "$FORMATS"
[ -n "$MAG_SHAPES" ] && bench magnitude 120 --shapes "$MAG_SHAPES" --n 1,8 --sparsity "$SPARSITIES" \
  --pattern magnitude --formats "$FORMATS"
st done
grep -h "read bandwidth" "$O"/main.csv
for f in main magnitude; do
  [ -f "$O/$f.csv" ] || continue
  echo "--- $f (shape,kernel,N,sparsity,us,%floor,x cublas,status)"
  grep -v "^#" "$O/$f.csv" | grep -v "^shape" | grep -v -E "cusparse|stream_read" |
    cut -d, -f1,3,6,7,12,17,18,21 | sed -e 's/macko.warp_row/mk/' -e 's/tca_bme.decode/tca/' \
    -e 's/csr.vector/csr/' -e 's/dense.cublas/cub/' | head -150
done
