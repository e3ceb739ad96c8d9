#!/usr/bin/env bash
# Stages the minimum the GPU machine needs into a folder that git ignores, for the device tool's
# `carry`: the two binaries (stripped of host debug info; device code and line info stay) and the
# scripts gpu-test.sh uses. Prints the size; the limit for everything that travels is 64 MiB.
#
#   scripts/carry.sh [BUILD_DIR] [DEST]      defaults: build/release .carry
# then run on the device:  bash DEST/scripts/gpu-test.sh DEST/bin
# With CARRY_GZIP=1 the binaries travel gzipped (~5 MB each instead of ~16, room for
# tinyllama-py in DEST/tinyllama); unpack them there first: gunzip -f DEST/bin/*.gz
set -euo pipefail
BUILD=${1:-build/release}
DEST=${2:-.carry}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$DEST/bin" "$DEST/scripts"
mkdir -p "$DEST/bin" "$DEST/scripts"
for bin in sparrow sparrow_gpu_tests; do
  if [ ! -x "$BUILD/$bin" ]; then
    echo "carry.sh: $BUILD/$bin is missing; build it first" >&2
    exit 1
  fi
  cp "$BUILD/$bin" "$DEST/bin/"
  strip --strip-debug "$DEST/bin/$bin" 2>/dev/null || true
  [ "${CARRY_GZIP:-0}" = 1 ] && gzip -f -9 "$DEST/bin/$bin"
done
# Shared libraries the GPU machine may not have (libsentencepiece, when the build found it):
# next to the binaries in DEST/lib, where their RPATH ($ORIGIN/../lib) looks first.
rm -rf "$DEST/lib"
for bin in sparrow sparrow_gpu_tests; do
  for lib in $(ldd "$BUILD/$bin" 2>/dev/null | awk '/sentencepiece/ {print $3}'); do
    mkdir -p "$DEST/lib"
    cp -L "$lib" "$DEST/lib/"
  done
done
cp "$ROOT"/scripts/gpu-test.sh "$ROOT"/scripts/bench_summary.py "$DEST/scripts/"
[ -f "$ROOT/scripts/check_safetensors.py" ] && cp "$ROOT/scripts/check_safetensors.py" "$DEST/scripts/"
[ -d "$ROOT/scripts/gpu-test.d" ] && cp -r "$ROOT/scripts/gpu-test.d" "$DEST/scripts/"
size_kib=$(du -sk "$DEST" | cut -f1)
echo "carry.sh: staged $DEST ($((size_kib / 1024)) MiB; the limit is 64 MiB):"
ls -la "$DEST/bin" "$DEST/scripts" $([ -d "$DEST/lib" ] && echo "$DEST/lib")
if [ "$size_kib" -gt $((64 * 1024)) ]; then
  echo "carry.sh: $DEST is larger than 64 MiB: it cannot travel" >&2
  exit 1
fi
