#!/usr/bin/env bash
# What each role of linear layer costs inside the engine's decode step (one device call): runs
# `sparrow bench-model ARGS` as is and once per role with SPARROW_ENGINE_SKIP=<role> (that role's
# matmuls not launched; engine/role_overrides.hpp), then scripts/engine_roles.py's table of
# step-time differences. Logs: OUT/base.log, OUT/skip-<role>.log.
#
#   scripts/engine-roles.sh BIN OUT "o qkv gate_up down" -- --synth llama2-7b --sparsity 0.5 \
#       --format tca_bme -p 16 -n 32 -b 2,8 -r 2
# (~25 s to build the model plus ~8 s per batch size, per run.) ENV="SPARROW_X=1" applies to
# every run; LAYERS (default 32) divides the costs per layer.
set -uo pipefail
if [ $# -lt 4 ] || [ "$4" != "--" ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
BIN=$1 OUT=$2 ROLES=$3
shift 4
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# shellcheck disable=SC2086
env ${ENV:-} timeout "${ENGINE_LIMIT:-200}" "$BIN" bench-model "$@" >"$OUT/base.log" 2>&1
echo "[engine-roles] base rc=$? at ${SECONDS}s"
pairs=()
for role in $ROLES; do
  # shellcheck disable=SC2086
  env ${ENV:-} SPARROW_ENGINE_SKIP="$role" timeout "${ENGINE_LIMIT:-200}" "$BIN" bench-model "$@" \
    >"$OUT/skip-$role.log" 2>&1
  echo "[engine-roles] skip $role rc=$? at ${SECONDS}s"
  pairs+=("$role=$OUT/skip-$role.log")
done
python3 "$HERE/engine_roles.py" "$OUT/base.log" "${pairs[@]}" --layers "${LAYERS:-32}"
