#!/usr/bin/env bash
# Regenerates the shipped rule tables, one per GPU (src/dispatch/rule_table_<gpu>.inc; a lookup
# reads the table of the GPU it runs on, src/dispatch/shipped_tables.cpp): the measured runs each
# is made from (later files win per cell; one GPU's runs per table) and the kernels it leaves out
# where the engine contradicted the kernel bench. Edit the
# lists here, not the generated file, so the next regeneration keeps them. A leave-out for dependent
# launches only (--leave-out-dependent) keeps the kernel for plain launches, which the table's runs
# measured. A run made with `sparrow bench --dependent-launch --formats best` may be listed too:
# make_rule_table.py reads the launch mode from its header, and those cells answer dependent
# launches (the engine's) where they cover the query (src/dispatch/rule_table.cpp).
#
#   scripts/rule-table.sh            then rebuild; scripts/check_dispatch.py replays its choices
#
# The leave-outs were measured in the engine on the H100; the H200 table (same chip, faster memory)
# takes them too until the engine contradicts them there.
#
# After a rebuild the CPU test Dispatch.ShippedTableKeepsTheEngineMeasuredPicks names every engine
# pick (Llama-2-7B's four matmuls at batch 1..32) the new table changed: measure those in the engine
# (gpu-test.sh's engine stage, or bench-model with --format qkv=F,o=F,gate_up=F,down=F for the old
# picks) before changing the test. Session 34 added its runs below (the dependent-launch files
# `-s34-c3-dl-*.csv`, in `bench/results/2026-11-27-h100-s34-logs.tar.xz`, and session 33's c10
# decode run): qkv and gate_up at 70 % and batch 8 moved from tca_bme to macko, and the engine ran
# 1489 t/s against 1615, so they are not sources.
set -euo pipefail
cd "$(dirname "$0")/.."
R=bench/results
H100_SOURCES=(
  $R/2026-11-24-h100-s14-call6-bench-tca_bme.csv
  $R/2026-11-24-h100-s15-call13-bench-tc.csv
  $R/2026-11-25-h100-s18-c5-bench-random.csv
  $R/2026-11-25-h100-s20-c6-swap-base1.csv
  $R/2026-11-25-h100-s21-c2-swap-new1.csv
  $R/2026-11-25-h100-s21-c2-bench-best.csv
  $R/2026-11-25-h100-s23-c5-best-n234.csv
  # --dependent-launch --formats dense,macko,tca_bme, N = 1..32, one file per shape (the 7B
  # engine's stacked shapes, 11008x4096, 28672x8192)
  $R/2026-11-26-h100-s30-c[12]-dl-*.csv
  # macko's 2-token row instance (session 30): N = 2 plain, and N = 1, 2, 4 dependent again
  $R/2026-11-26-h100-s30-c7-best-n2.csv
  $R/2026-11-26-h100-s30-c7-dl-*.csv
  # tca_bme.decode's one-token bulk copies (session 41): N = 1 at 50 %, dependent launch, dense,
  # macko and tca_bme on the 7B engine's stacked shapes
  $R/2026-11-27-h100-s41-c5-dl-n1-s50.csv
  # the tensor-core table after tca_bme.mma's 2 x 2 warp tiles (session 43, c7): N = 8..512, the
  # tensor-core kernels and cuBLAS, plain launches; replaces session 15's cells of those kernels
  $R/2026-11-27-h100-s43-c7-bench-tc.csv.xz
  # the same table after the split-K cost with a block's fixed steps (session 44, c6)
  $R/2026-11-28-h100-s44-c6-bench-tc.csv.xz
  # the same table after tca_bme.mma's pushed split-K reduction at N <= 16 (session 45, c2)
  $R/2026-11-28-h100-s45-c2-bench-tc.csv.xz
  # the same table after tca_bme.decode's cluster epilogue by push (session 46, c2), and that
  # call's decode run (N = 1..16, every kernel, plain launches): tca_bme.decode's cells at
  # N = 2..16 had been measured before the push (0.75-0.97x the time since)
  $R/2026-11-28-h100-s46-c2-bench-tc.csv.xz
  $R/2026-11-28-h100-s46-c2-bench-random.csv.xz
)
# NVIDIA H200 (from session 47, when the lent GPU became an H200): the decode run (N = 1..16, every
# kernel), the tensor-core run (N = 8..512) and the dependent-launch runs (N = 1, 2) on the 7B
# engine's stacked shapes and 11008x4096, 28672x8192, all of session 47's first call.
H200_SOURCES=(
  $R/2026-11-28-h200-s47-c1-bench-random.csv.xz
  $R/2026-11-28-h200-s47-c1-bench-tc.csv.xz
  $R/2026-11-28-h200-s47-c1-dl-*.csv.xz
  # dense.gemv with the 128-byte L2 prefetch (session 49, c5, the final code): dense.gemv and
  # cuBLAS at N = 1..16 on 4096x11008, 28672x8192 and 11008x4096, plain and dependent launches
  # (plain launches: 0.85-0.98x the time of session 47's dense.gemv cells above)
  $R/2026-11-29-h200-s49-c5-long-plain.csv.xz
  $R/2026-11-29-h200-s49-c5-long-dl.csv.xz
  # the decode run after that (session 50, c3: N = 1..16, every kernel, plain launches, every
  # launch naming its shared-memory carveout): dense.gemv's cells on the other shapes had been
  # measured before its prefetch (tca_bme.decode on 4096x11008 at N = 4 / 50 %: 27.2 us against
  # dense.gemv's 24.0)
  $R/2026-11-29-h200-s50-c3-bench-random.csv.xz
  # the decode run after dense.gemv's one-wave plans (session 51, c5: N = 1..16, every kernel,
  # plain launches): dense.gemv's cells 0.76-0.96x the time at 9..16 tokens. Since session 52 a
  # sparse format must beat the dense cell near its shape, not cuBLAS alone (pick_format), so a
  # slow cuBLAS row in one run no longer moves a format pick
  $R/2026-11-29-h200-s51-c5-bench-random.csv.xz
)
MMA8="the 7B engine (dependent launch throughout) at batch 8 ran slower with it than with \
tca_bme.decode three times: on every layer 1289 / 1544 / 1697 t/s against 1427 at 50 % (H100, \
session 13), on the 4096- and 11008-row layers 1325 / 1490 / 1651 against 1437 / 1576 / 1765 \
(session 21), on o_proj alone (4096 x 4096, no norm folded into it) 1406 / 1564 / 1734 against \
1445 / 1626 / 1768 at 50 / 70 / 90 % (session 22). Plain launches, which the table's runs \
measured, keep it (0.75-0.78x tca_bme.decode's time on 4096 x 4096 at N = 8); under \
sparrow bench --dependent-launch it took 0.97-1.44x tca_bme.decode's time (session 22)"
WGMMA32="the kernel bench puts it ahead of tca_bme.mma on 4096-row weights at N = 32 (o_proj, \
down_proj of the 7B; 0.94-0.98x the time), but the 7B engine at batch 32 ran 4546 / 4619 / 5242 \
t/s with it there against 4601 / 4886 / 5431 with tca_bme.mma at 50 / 70 / 90 % (H100, session \
21); at N <= 8 it takes no input_rms and was never measured in the engine, where tca_bme.decode \
runs"
DEP2="the 7B engine (H100, session 30, -p 512 -n 32 tg32, the same machine per pair) agreed with \
these cells at batch 1 (o_proj tca_bme.decode: 254.1 -> 259.1 t/s at 50 %, 350.7 -> 356.9 at \
70 %) and 2 (o / down tca_bme.decode at 70 %: 476.7 -> 550.0; gate_up too at 50 %: 431.9 -> \
427.2; after macko's 2-token instance, with N = 1, 2, 4 re-run (c7), 426.7 / 553.7 / 668.4 -> \
478.2 / 565.0 / 770.2 at 50 / 70 / 90 %, c8), not above: at batch 4 their 50 % picks ran 784.1 against 801.6, at batch 8 (tca_bme.decode \
on qkv / gate_up / down) 1477.8 against dense 1531.7 where the bench put tca_bme.decode 1.03-1.19x \
ahead of dense.gemv, at batch 32 (tca_bme.mma on qkv / gate_up at 90 %) 4814.8 against dense \
5120.7 where the bench put it 1.04-1.12x ahead of cuBLAS; with the norm not folded (c4) the \
batch-8 and batch-32 losses stayed"
# One GPU's table: OUT.inc, then that GPU's runs.
table() {
  local out=$1
  shift
  python3 scripts/make_rule_table.py "$out" \
    --dependent-up-to "2:$DEP2" \
    --leave-out-dependent "tca_bme.mma:8:$MMA8" \
    --leave-out "tca_bme.wgmma:32:$WGMMA32" \
    --leave-out "tca_bme.wgmma_smem:8:as tca_bme.wgmma at N <= 8" \
    "$@"
}
table src/dispatch/rule_table_h100.inc "${H100_SOURCES[@]}"
table src/dispatch/rule_table_h200.inc "${H200_SOURCES[@]}"
