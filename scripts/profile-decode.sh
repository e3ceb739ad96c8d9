#!/usr/bin/env bash
# Nsight Compute profile of the decode kernels on the GPU machine (not part of the tests): one
# launch of each kernel named below, cold caches (ncu flushes them before every replay pass),
# clocks left as the card runs them. Reads what the notes in bench/NOTES-decode.md could only
# guess: DRAM throughput, issue-slot use, L1/shared wavefronts per request, stall reasons.
#
#   bash scripts/profile-decode.sh [BIN_DIR]     (default .carry/bin: sparrow)
#   PROFILE="macko csr" bash scripts/profile-decode.sh     only these entries (names below)
# Output under $OUT: ncu.txt (every report), sass.txt.gz (cuobjdump -sass of the binary),
# smallreads.log (the streaming-read kernel on small sizes: the fixed cost of one launch).
set -uo pipefail
B=${1:-.carry/bin}
O=${OUT:-out/profile}
mkdir -p "$O"
SHAPE=${SHAPE:-11008x4096}
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
 --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy
 --section LaunchStats --section InstructionStats ${SECTIONS_EXTRA:-}"
# (SECTIONS_EXTRA="--section SourceCounters" adds the stall sampling per instruction.)
# name | kernel regex | bench arguments
ENTRIES=(
  "macko|macko_row_kernel|--formats macko.warp_row --n 1 --sparsity 0.5"
  "macko90|macko_row_kernel|--formats macko.warp_row --n 1 --sparsity 0.9"
  "csr|csr_kernel|--formats csr.vector --n 1 --sparsity 0.5"
  "tca1|tca_one_token_kernel|--formats tca_bme.decode --n 1 --sparsity 0.5"
  "tca8|spmm_kernel|--formats tca_bme.mma --n 8 --sparsity 0.5"
  "tca8s90|spmm_kernel|--formats tca_bme.mma --n 8 --sparsity 0.9"
  "tca32|spmm_kernel|--formats tca_bme.mma --n 32 --sparsity 0.5"
  "tcastream|tca_decode_kernel|--formats tca_bme.decode --n 2 --sparsity 0.5"
  "macko8|macko_kernel|--formats macko.warp_row --n 8 --sparsity 0.5"
  "macko8row|macko_row_kernel|--formats macko.warp_row --n 8 --sparsity 0.5"
  "macko8s90|macko_kernel|--formats macko.warp_row --n 8 --sparsity 0.9"
  "macko16s90|macko_kernel|--formats macko.warp_row --n 16 --sparsity 0.9"
  "tca16s90|spmm_kernel|--formats tca_bme.mma --n 16 --sparsity 0.9"
  "gemv|gemv_kernel|--formats dense.gemv --n 1 --sparsity 0.5"
  "stream|stream_read_kernel|--formats dense.gemv --n 1 --sparsity 0.5"
)
PROFILE=${PROFILE:-}
: >"$O/ncu.txt"
for e in "${ENTRIES[@]}"; do
  IFS='|' read -r name regex args <<<"$e"
  if [ -n "$PROFILE" ] && [[ " $PROFILE " != *" $name "* ]]; then continue; fi
  echo "===== $name: $regex ($args)" | tee -a "$O/ncu.txt"
  # shellcheck disable=SC2086
  timeout 120 ncu --clock-control none $SECTIONS -k "regex:$regex" --launch-skip 3 --launch-count 1 \
    "$B/sparrow" bench --shapes "$SHAPE" --reps 3 $args >>"$O/ncu.txt" 2>&1
  echo "rc=$?" >>"$O/ncu.txt"
done
# The kernels' machine code, for instruction counts per entry.
if command -v cuobjdump >/dev/null; then cuobjdump -sass "$B/sparrow" | gzip >"$O/sass.txt.gz"; fi
# Fixed cost per launch under the protocol: the streaming read on small byte counts.
timeout 120 "$B/sparrow" bench --shapes 1696x4096,1024x4096,3072x4096,4096x4096 --n 1 --sparsity 0.5 \
  --formats dense.gemv --reps 50 >"$O/smallreads.log" 2>&1
grep -E "stream_read|read bandwidth" "$O/smallreads.log" | head -20
grep -E "^=====|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy|No Eligible|L1/TEX Hit|Executed Ipc A" "$O/ncu.txt" | head -120
