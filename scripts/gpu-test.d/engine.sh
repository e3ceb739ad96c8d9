#!/usr/bin/env bash
# gpu-test hook: the inference engine on the GPU. bench-model on tinyllama-py (when
# SPARROW_TINYLLAMA points at it) dense vs 50 %, then a Llama-2-7B-shaped synthetic model built in
# memory, dense vs 50/70/90 % (issue 6's table). The GPU engine tests themselves run in the
# gpu-tests stage (GpuEngine.*). Since session 28 `--format fastest` (the default) builds one
# 7B model per batch size whose rule-table picks differ from the previous one's (at 50 %: three,
# for batch 1, 8 and 32), ~25 s each: with batch 2 and 4 (since session 30) expect ~440 s for
# the 7B part (c9 of session 30: 432 s; 184 s in session 26 with one model per sparsity); give it
# EXTRA_LIMIT=540 and a device call of its own, e.g. SKIP="gpu-tests
# memcheck racecheck bench-random bench-tensor-core bench-prefill-best bench-magnitude
# bench-best-bf16 checkpoints" (then the carry needs no test binary).
set -euo pipefail
BUILD=$1
if [ -n "${SPARROW_TINYLLAMA:-}" ] && [ -f "$SPARROW_TINYLLAMA/config.json" ]; then
  "$BUILD/sparrow" run -m "$SPARROW_TINYLLAMA" --backend gpu -n 48 \
    --tokens 100,101,102,32,102,111,114,119,97,114,100,40,115,101,108,102,44,32,120,41,58,10,32,32,32,32
  "$BUILD/sparrow" bench-model -m "$SPARROW_TINYLLAMA" --sparsity 0,0.5 -p 256 -n 64 -b 1,8 -r 3
fi
"$BUILD/sparrow" bench-model --synth llama2-7b --sparsity 0,0.5,0.7,0.9 -p 512 -n 32 -b 1,2,4,8,32 -r 2
