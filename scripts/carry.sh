#!/usr/bin/env bash
# Stages the minimum the GPU machine needs into a folder that git ignores, for the device tool's
# `carry`: the two binaries (stripped of host debug info; device code and line info stay) and the
# scripts gpu-test.sh uses. Prints the size; the limit for everything that travels is 64 MiB.
#
#   scripts/carry.sh [BUILD_DIR] [DEST]      defaults: build/release .carry
# then run on the device:  bash DEST/scripts/gpu-test.sh DEST/bin
# With CARRY_GZIP=1 the binaries travel gzipped (~6 MB each instead of ~22; unpack them there
# first: gunzip -f DEST/bin/*.gz), with CARRY_XZ=1 compressed by xz (~3.6 MB each; unxz -f
# DEST/bin/*.xz). CARRY_BINS="sparrow_gpu_tests" stages only the named binaries. CARRY_TINYLLAMA=1
# also stages tinyllama-py ($SPARROW_TINYLLAMA or ../shared/models/tinyllama-py) as
# DEST/tinyllama-py.tar.xz (41 MiB); there: tar xJf DEST/tinyllama-py.tar.xz -C DEST, then
# SPARROW_TINYLLAMA=DEST/tinyllama-py DEST/bin/sparrow_gpu_tests --gtest_filter='GpuEngine*'.
# The 64 MiB limit counts the working tree too (~6 MiB since session 24): with CARRY_XZ=1 the
# model fits next to both binaries (57 MiB) and one more xz'd binary (an A/B baseline, ~4.5 MB).
set -euo pipefail
BUILD=${1:-build/release}
DEST=${2:-.carry}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$DEST/bin" "$DEST/scripts"
mkdir -p "$DEST/bin" "$DEST/scripts"
BINS=${CARRY_BINS:-sparrow sparrow_gpu_tests}
for bin in $BINS; do
  if [ ! -x "$BUILD/$bin" ]; then
    echo "carry.sh: $BUILD/$bin is missing; build it first" >&2
    exit 1
  fi
  cp "$BUILD/$bin" "$DEST/bin/"
  strip --strip-debug "$DEST/bin/$bin" 2>/dev/null || true
  if [ "${CARRY_XZ:-0}" = 1 ]; then
    xz -f -9e -T2 "$DEST/bin/$bin"
  elif [ "${CARRY_GZIP:-0}" = 1 ]; then
    gzip -f -9 "$DEST/bin/$bin"
  fi
done
# Shared libraries the GPU machine may not have (libsentencepiece, when the build found it):
# next to the binaries in DEST/lib, where their RPATH ($ORIGIN/../lib) looks first.
rm -rf "$DEST/lib"
for bin in $BINS; do
  for lib in $(ldd "$BUILD/$bin" 2>/dev/null | awk '/sentencepiece/ {print $3}'); do
    mkdir -p "$DEST/lib"
    cp -L "$lib" "$DEST/lib/"
  done
done
rm -f "$DEST/tinyllama-py.tar.xz"
if [ "${CARRY_TINYLLAMA:-0}" = 1 ]; then
  MODEL=${SPARROW_TINYLLAMA:-$ROOT/../shared/models/tinyllama-py}
  if [ ! -f "$MODEL/config.json" ]; then
    echo "carry.sh: no tinyllama-py at $MODEL (set SPARROW_TINYLLAMA)" >&2
    exit 1
  fi
  tar chf - -C "$(dirname "$MODEL")" --transform "s|^$(basename "$MODEL")|tinyllama-py|" \
    "$(basename "$MODEL")" | xz -9e -T2 >"$DEST/tinyllama-py.tar.xz"
fi
cp "$ROOT"/scripts/gpu-test.sh "$ROOT"/scripts/bench_summary.py "$DEST/scripts/"
[ -f "$ROOT/scripts/check_safetensors.py" ] && cp "$ROOT/scripts/check_safetensors.py" "$DEST/scripts/"
[ -d "$ROOT/scripts/gpu-test.d" ] && cp -r "$ROOT/scripts/gpu-test.d" "$DEST/scripts/"
# Bytes, not disk blocks: the tree's ~400 small result files take twice their size in blocks.
size_kib=$(($(du -sb "$DEST" | cut -f1) / 1024))
# The device tool's limit counts the working tree (tracked files here) and the carry together.
tree_bytes=$( (cd "$ROOT" && git ls-files -z 2>/dev/null | xargs -0 -r cat 2>/dev/null | wc -c) ||
  true)
tree_kib=$((${tree_bytes:-0} / 1024))  # 0 outside a git checkout
echo "carry.sh: staged $DEST ($((size_kib / 1024)) MiB; with the tree's $((tree_kib / 1024)) MiB," \
  "$(((size_kib + tree_kib) / 1024)) of the 64 MiB limit):"
ls -la "$DEST/bin" "$DEST/scripts" $([ -d "$DEST/lib" ] && echo "$DEST/lib")
if [ $((size_kib + tree_kib)) -gt $((64 * 1024)) ]; then
  echo "carry.sh: $DEST and the tree are larger than 64 MiB together: they cannot travel" \
    "(CARRY_BINS stages fewer binaries)" >&2
  exit 1
fi
