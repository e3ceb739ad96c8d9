#!/usr/bin/env bash
# gpu-test hook: sparse checkpoints written by sparrow, read back by an independent client
# (Python's safetensors package, installed on the GPU machine). Synthesises a tiny Llama, prunes
# it into several formats and checks each with scripts/check_safetensors.py against the source.
set -euo pipefail
BUILD=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HERE=$(cd "$(dirname "$0")/.." && pwd)
"$BUILD/sparrow" synth --arch llama --preset tiny --out "$WORK/dense" --seed 7
python3 "$HERE/check_safetensors.py" "$WORK/dense"
for fmt in auto csr macko tca_bme tiled_csl; do
  "$BUILD/sparrow" prune --model "$WORK/dense" --out "$WORK/$fmt" --sparsity 0.5 --format "$fmt" >/dev/null
  python3 "$HERE/check_safetensors.py" "$WORK/$fmt" --reference "$WORK/dense"
done
"$BUILD/sparrow" prune --model "$WORK/dense" --out "$WORK/nm" --sparsity 0.5 --structure 2:4 --format nm >/dev/null
python3 "$HERE/check_safetensors.py" "$WORK/nm" --reference "$WORK/dense"
echo "checkpoints: every sparrow checkpoint read back by safetensors"
