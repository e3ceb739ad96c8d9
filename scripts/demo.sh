#!/usr/bin/env bash
# The main job (`make demo`): a pruned model that is smaller and still works, end to end, on
# whatever this machine has. On a machine without a GPU the engine runs its CPU backend.
#   1. prune the real trained model ../shared/models/tinyllama-py (or a synthetic one) to 50 %
#   2. generate with the dense and the pruned model
#   3. perplexity of dense, 50 % magnitude and 50 % random pruning on a Python sample
#   4. bench-model dense vs sparse
#   5. sparrow formats on a Llama-2-7B MLP weight, and `sparrow bench` when a GPU is present
set -euo pipefail
BUILD=${1:-build/release}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SPARROW="$BUILD/sparrow"
WORK="$BUILD/demo"
mkdir -p "$WORK"

MODEL="$ROOT/../shared/models/tinyllama-py"
if [ ! -f "$MODEL/config.json" ]; then
  echo "== tinyllama-py not found at $MODEL: using a synthetic tiny Llama instead"
  MODEL="$WORK/synth-tiny"
  # A 256-entry vocabulary and no tokenizer file make it byte-level like tinyllama-py, so the text
  # prompt and the perplexity sample below work on it too (its output is noise: untrained).
  "$SPARROW" synth --arch llama --preset custom --hidden 256 --layers 2 --heads 4 --kv-heads 2 \
    --intermediate 688 --vocab 256 --max-positions 1024 --out "$MODEL" --force
fi

echo "== 1. prune $MODEL to 50 % (magnitude, smallest format per layer)"
"$SPARROW" prune --model "$MODEL" --out "$WORK/pruned-50" --sparsity 0.5 --method magnitude \
  --format auto --force
"$SPARROW" prune --model "$MODEL" --out "$WORK/random-50" --sparsity 0.5 --method random \
  --format auto --force >/dev/null
du -sh "$MODEL" "$WORK/pruned-50"

PROMPT=$'def forward(self, x):\n    '
echo "== 2. generate 48 tokens (greedy), dense then 50 % pruned"
"$SPARROW" run -m "$MODEL" -p "$PROMPT" -n 48
echo
"$SPARROW" run -m "$WORK/pruned-50" -p "$PROMPT" -n 48
echo

echo "== 3. perplexity on a Python sample (bits per byte: lower is better)"
for m in "$MODEL" "$WORK/pruned-50" "$WORK/random-50"; do
  echo "-- $m"
  "$SPARROW" perplexity -m "$m" --text "$ROOT/tests/data/perplexity_sample.py" --ctx 512
done

if nvidia-smi -L >/dev/null 2>&1; then BACKEND=gpu; else BACKEND=cpu; fi
echo "== 4. bench-model dense vs 50 % sparse ($BACKEND backend)"
"$SPARROW" bench-model -m "$MODEL" --sparsity 0,0.5 -p 128 -n 32 -b 1 -r 2 --backend "$BACKEND"

echo "== 5. sparrow formats: a Llama-2-7B MLP weight (11008 x 4096) at 50 % sparsity"
"$SPARROW" formats --rows 11008 --cols 4096 --sparsity 0.5 --pattern magnitude
if [ "$BACKEND" = gpu ]; then
  echo "== sparrow bench (decode shapes of Llama-2-7B)"
  "$SPARROW" bench --shapes 11008x4096,4096x11008 --n 1,8 --sparsity 0.5,0.7,0.9 --formats best
fi
