#!/usr/bin/env bash
# Builds the three fuzz targets with clang's libFuzzer + AddressSanitizer + UBSan and runs each
# for a third of the time on a generated seed corpus. Not part of the CMake build.
#   tests/fuzz/safetensors_fuzz.cpp    the safetensors reader and the config.json parser
#   tests/fuzz/sparse_weight_fuzz.cpp  sparse checkpoint loading: metadata -> Weight -> validate
#                                      -> decode, over every format's host code
#   tests/fuzz/tokenizer_fuzz.cpp      prompts through the tokenizer.json fixtures' pipelines
#                                      (NFC, pre-tokenizers, BPE, added tokens, decoders)
#   scripts/fuzz.sh [seconds=60] [build dir=build/fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
OUT=${2:-build/fuzz}
CXX=${CXX_FUZZ:-clang++}
mkdir -p "$OUT/corpus" "$OUT/artifacts"

# Only the reader, the config parser and what they use: instrumented from source.
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc \
  tests/fuzz/safetensors_fuzz.cpp src/io/safetensors_reader.cpp src/io/tensor_dtype.cpp \
  src/io/config.cpp src/io/json_file.cpp src/core/dtype.cpp src/core/status.cpp \
  src/core/matrix.cpp -o "$OUT/safetensors_fuzz"

# Sparse checkpoint loading: the reader, weight serialisation and every format's host code.
FORMAT_SOURCES=$(find src/formats -name '*.cpp' | sort)
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc \
  tests/fuzz/sparse_weight_fuzz.cpp src/io/safetensors_reader.cpp src/io/tensor_dtype.cpp \
  src/io/weight_serialization.cpp src/io/safetensors_writer.cpp $FORMAT_SOURCES src/core/dtype.cpp src/core/status.cpp \
  src/core/matrix.cpp src/core/parallel.cpp -o "$OUT/sparse_weight_fuzz"
mkdir -p "$OUT/sparse_corpus"

# Seeds: small valid files (several dtypes, metadata, zero-sized tensors, padded header) and a
# config.json.
python3 - "$OUT/corpus" <<'PY'
import json, struct, sys, os
out = sys.argv[1]
def st(tensors, meta=None, pad=0):
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data
seeds = {
  "one_f16": st([("w", "F16", [2, 3], bytes(range(12)))]),
  "mixed": st([("a", "U8", [3], b"abc"), ("b", "F32", [2], struct.pack("<2f", 1.5, -2)),
               ("c", "I64", [1], struct.pack("<q", -7)), ("e", "BF16", [0], b"")],
              {"format": "pt", "k": "v"}, pad=5),
  "sparse_like": st([("x.weight.csr.row_ptr", "U32", [3], struct.pack("<3I", 0, 1, 2)),
                     ("x.weight.csr.values", "F16", [2], b"\x00\x3c\x00\x40")],
                    {"sparrow:x.weight": json.dumps({"format": "csr", "shape": [2, 2]})}),
  "empty": st([]),
}
for k, v in seeds.items():
    open(os.path.join(out, k), "wb").write(v)
open(os.path.join(out, "config"), "w").write(json.dumps({
  "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}))
PY

# Sparse seeds: one small pruned layer per format, written by the sparrow CLI when it is built
# (SPARROW_BIN, default build/dev/sparrow).
BIN=${SPARROW_BIN:-build/dev/sparrow}
if [ -x "$BIN" ]; then
  tmp=$(mktemp -d)
  "$BIN" synth --preset custom --hidden 64 --heads 2 --layers 1 --intermediate 96 --vocab 16 \
    --out "$tmp/m" > /dev/null
  for f in dense csr macko tca_bme tiled_csl; do
    "$BIN" prune --model "$tmp/m" --out "$tmp/$f" --format "$f" --ignore 'mlp|k_proj|v_proj|o_proj' --quiet > /dev/null
    cp "$tmp/$f/model.safetensors" "$OUT/sparse_corpus/$f"
  done
  "$BIN" prune --model "$tmp/m" --out "$tmp/nm" --structure 2:4 --format nm --ignore 'mlp|k_proj|v_proj|o_proj' --quiet > /dev/null
  cp "$tmp/nm/model.safetensors" "$OUT/sparse_corpus/nm"
  rm -rf "$tmp"
else
  echo "note: $BIN not built; the sparse target starts from the generic seeds only" >&2
fi
cp "$OUT/corpus/"* "$OUT/sparse_corpus/" 2>/dev/null || true

# Prompts: the tokenizer fixtures' test texts (one per fixture byte) as seeds.
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iinclude -Isrc \
  tests/fuzz/tokenizer_fuzz.cpp src/engine/tokenizer_json.cpp src/engine/bpe.cpp \
  src/engine/split_patterns.cpp src/engine/unicode.cpp src/engine/unicode_tables.cpp \
  src/io/json_file.cpp src/core/status.cpp -o "$OUT/tokenizer_fuzz"
mkdir -p "$OUT/prompt_corpus"
python3 - "$OUT/prompt_corpus" <<'PY'
import json, os, sys
out, n = sys.argv[1], 0
for i, name in enumerate(["llama2", "llama2-metaspace", "llama2-metaspace-split", "llama3",
                          "qwen2", "gpt2"]):
    with open(os.path.join("tests", "data", "tokenizers", name, "expected.json")) as f:
        for case in json.load(f)["cases"][:60]:
            open(os.path.join(out, "p%d" % n), "wb").write(bytes([i]) + case["text"].encode())
            n += 1
PY

THIRD=$(( (SECONDS_TO_RUN + 2) / 3 ))
echo "== safetensors_fuzz ($THIRD s)"
"$OUT/safetensors_fuzz" "$OUT/corpus" -max_total_time="$THIRD" -max_len=4096 \
  -artifact_prefix="$OUT/artifacts/" -print_final_stats=1
echo "== sparse_weight_fuzz ($THIRD s)"
"$OUT/sparse_weight_fuzz" "$OUT/sparse_corpus" -max_total_time="$THIRD" -max_len=131072 \
  -artifact_prefix="$OUT/artifacts/" -print_final_stats=1
echo "== tokenizer_fuzz ($THIRD s)"
"$OUT/tokenizer_fuzz" "$OUT/prompt_corpus" -max_total_time="$THIRD" -max_len=512 \
  -artifact_prefix="$OUT/artifacts/" -print_final_stats=1
