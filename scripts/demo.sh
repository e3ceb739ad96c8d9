#!/usr/bin/env bash
# The main job (`make demo`): what sparrow does, on this machine. Grows with the project.
set -euo pipefail
BUILD=${1:-build/release}
SPARROW="$BUILD/sparrow"

echo "== sparrow formats: a Llama-2-7B MLP weight (11008 x 4096) at 50 % sparsity"
"$SPARROW" formats --rows 11008 --cols 4096 --sparsity 0.5 --pattern magnitude
