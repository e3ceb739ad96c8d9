#!/usr/bin/env bash
# Installs what sparrow needs to build and test, from Debian's packages only, and only what is
# missing (so a second run is instant). Nothing is fetched at configure or run time.
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libcli11-dev; do
  have_pkg "$pkg" || need+=("$pkg")
done

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Optional: SentencePiece (text prompts for Llama-2-style tokenizer.model). A machine where it
# cannot be installed still builds and tests everything else.
if ! have_pkg libsentencepiece-dev; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  sp_install() {
    DEBIAN_FRONTEND=noninteractive timeout 300 $SUDO apt-get install -y -qq \
      --no-install-recommends libsentencepiece-dev >/dev/null 2>&1
  }
  if ! sp_install && ! { timeout 300 $SUDO apt-get update -qq >/dev/null 2>&1 && sp_install; }; then
    echo "setup: libsentencepiece-dev not installed (optional: SentencePiece tokenizers off)" >&2
  fi
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: the CUDA toolkit (nvcc, cuBLAS, cuSPARSE; CUDA 13) is required and was not found" >&2
  exit 1
fi
