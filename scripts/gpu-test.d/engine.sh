#!/usr/bin/env bash
# gpu-test hook: the inference engine on the GPU. bench-model on tinyllama-py (when
# SPARROW_TINYLLAMA points at it) dense vs 50 %, then a Llama-2-7B-shaped synthetic model built in
# memory, dense vs 50/70/90 % (issue 6's table). The GPU engine tests themselves run in the
# gpu-tests stage (GpuEngine.*). Since session 28 `--format fastest` (the default) builds one
# 7B model per batch size whose rule-table picks differ from the previous one's, ~25 s each: with
# batch 2 and 4 (since session 30) the 7B part took 432 s (session 30), 518 s (session 33) and more
# than 560 s (session 34, cut off before the last sparsity's batch 32): too close to a device
# call's 600 s. It can be split over two calls with SPARROW_ENGINE_BATCHES (default 1,2,4,8,32), e.g.
# 1,2,4 then 8,32, each with EXTRA_LIMIT=560 and SKIP="gpu-tests memcheck racecheck bench-random
# bench-tensor-core bench-prefill-best bench-magnitude bench-best-bf16 checkpoints" (then the carry
# needs no test binary); SPARROW_ENGINE_SPARSITIES (default 0,0.5,0.7,0.9) narrows it further.
# Since session 34 bench-model generates and prunes the synthetic weights once per sparsity (3-6 s
# on the GPU machine), each batch group only encodes them (~1 s), and since session 35 the GPU
# backend stacks and folds four layers at once: the whole stage took 191 s there (session 35, c4;
# over 380 s in c2 before the backend change), so it fits one call again. bench-model prints each
# group's backend load time and its parts: dense 7B ~18 s until session 36, ~5 s since (uploads
# without a host copy). Since session 36 the stage also runs issue 6's own test, tg128 at batch 1
# with a 16-token prompt (about 60 s; SPARROW_ENGINE_TG128=0 leaves it out).
set -euo pipefail
BUILD=$1
if [ -n "${SPARROW_TINYLLAMA:-}" ] && [ -f "$SPARROW_TINYLLAMA/config.json" ]; then
  "$BUILD/sparrow" run -m "$SPARROW_TINYLLAMA" --backend gpu -n 48 \
    --tokens 100,101,102,32,102,111,114,119,97,114,100,40,115,101,108,102,44,32,120,41,58,10,32,32,32,32
  "$BUILD/sparrow" bench-model -m "$SPARROW_TINYLLAMA" --sparsity 0,0.5 -p 256 -n 64 -b 1,8 -r 3
fi
"$BUILD/sparrow" bench-model --synth llama2-7b --sparsity "${SPARROW_ENGINE_SPARSITIES:-0,0.5,0.7,0.9}" \
  -p 512 -n 32 -b "${SPARROW_ENGINE_BATCHES:-1,2,4,8,32}" -r 2
if [ "${SPARROW_ENGINE_TG128:-1}" != 0 ]; then
  "$BUILD/sparrow" bench-model --synth llama2-7b --sparsity "${SPARROW_ENGINE_SPARSITIES:-0,0.5,0.7,0.9}" \
    -p 16 -n 128 -b 1 -r 2
fi
