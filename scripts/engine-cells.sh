#!/usr/bin/env bash
# Whole-model runs for the engine cells (src/dispatch/engine_layer.cpp) in one device call: runs
# `sparrow bench-model ARGS --format F` once per assignment F (each with the dense model in its own
# process: ARGS' --sparsity must start with 0), then scripts/engine_cells.py's table of t/s over
# dense, pick_engine_layer's choice per sparsity and batch, and the cell entries. Logs:
# OUT/<n>.log, each starting with `# format: F`.
#
#   scripts/engine-cells.sh BIN OUT "tca_bme macko qkv=macko,o=tca_bme,gate_up=macko,down=tca_bme" \
#       -- --synth llama2-7b --sparsity 0,0.5,0.7,0.9 -p 512 -n 32 -b 4,8 -r 2
# (~50 s per assignment at four sparsities and two batch sizes on an H100.) ENGINE_LIMIT (default
# 200) bounds each run in seconds.
set -uo pipefail
if [ $# -lt 4 ] || [ "$4" != "--" ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
BIN=$1 OUT=$2 ASSIGNMENTS=$3
shift 4
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
logs=()
i=0
for f in $ASSIGNMENTS; do
  i=$((i + 1))
  log="$OUT/$i.log"
  echo "# format: $f" >"$log"
  timeout "${ENGINE_LIMIT:-200}" "$BIN" bench-model "$@" --format "$f" >>"$log" 2>&1
  echo "[engine-cells] $f rc=$? at ${SECONDS}s"
  logs+=("$log")
done
python3 "$HERE/engine_cells.py" "${logs[@]}"
