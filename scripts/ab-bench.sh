#!/usr/bin/env bash
# A/B of two sparrow binaries (or one binary under two environments) in one device call: runs
# `sparrow bench ARGS` as A, B, A, B (alternated, so a drifting machine does not favour one side;
# only same-call comparisons are reliable on the lent GPUs) and writes a1/b1/a2/b2.csv and .log
# under OUT, then the ratio table of scripts/ab_compare.py.
#
#   scripts/ab-bench.sh A_BIN B_BIN OUT -- --shapes ... --n ... --formats ...
#   A_ENV="SPARROW_X=0" B_ENV="SPARROW_X=1" scripts/ab-bench.sh BIN BIN OUT -- ...   (settings)
#
# ENGINE="bench-model --synth llama2-7b --sparsity 0.5 -b 32 -p 16 -n 32 -r 2" adds that run per
# side after the benches (engine-a.log, engine-b.log; their tg rows are printed).
set -uo pipefail
if [ $# -lt 4 ] || [ "$4" != "--" ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
A=$1 B=$2 OUT=$3
shift 4
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
run() {  # side bin env tag
  local side=$1 bin=$2 env=$3 tag=$4
  shift 4
  # shellcheck disable=SC2086
  env $env timeout "${BENCH_LIMIT:-200}" "$bin" bench "$@" --csv "$OUT/$tag.csv" >"$OUT/$tag.log" 2>&1
  echo "[ab-bench] $tag ($side: $bin $env) rc=$? at ${SECONDS}s"
}
for i in 1 2; do
  run A "$A" "${A_ENV:-}" "a$i" "$@"
  run B "$B" "${B_ENV:-}" "b$i" "$@"
done
if [ -n "${ENGINE:-}" ]; then
  for side in a b; do
    if [ $side = a ]; then bin=$A env=${A_ENV:-}; else bin=$B env=${B_ENV:-}; fi
    # shellcheck disable=SC2086
    env $env timeout "${ENGINE_LIMIT:-200}" "$bin" $ENGINE >"$OUT/engine-$side.log" 2>&1
    echo "[ab-bench] engine $side rc=$? at ${SECONDS}s: $(grep -E '\| (tg|pp)[0-9]+ ' "$OUT/engine-$side.log" | tr '\n' ' ')"
  done
fi
python3 "$HERE/ab_compare.py" "$OUT/a1.csv,$OUT/a2.csv" "$OUT/b1.csv,$OUT/b2.csv"
