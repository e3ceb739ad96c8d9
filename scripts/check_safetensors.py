#!/usr/bin/env python3
"""Reads a checkpoint written by sparrow (synth or prune) with Hugging Face's `safetensors`
package, to show other tools can read it.

    python3 scripts/check_safetensors.py DIR [--reference DENSE_DIR]

Checks, per shard (model.safetensors or the shards of model.safetensors.index.json):
  * safetensors opens it; its tensor names equal the index's weight_map entries for that shard;
  * every tensor's values as loaded by safetensors equal the raw bytes at the header's offsets
    (parsed here independently), and dtypes/shapes agree;
  * `__metadata__` is a string map; each "sparrow:<name>" entry is JSON naming a known format,
    and the arrays "<name>.<format>.<array>" it lists exist;
  * csr tensors are decoded here and compared with the dense reference when one is given;
  * with --reference: every plain (dense) tensor equals the reference tensor of the same name,
    except zeros in pruned tensors (then the kept values must match and the pruned ones be zero).
Exit status 0 when everything checks out, 1 otherwise (the failures are printed).
Needs: safetensors, numpy (torch optional: used for BF16 tensors when present).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
from safetensors import safe_open

FORMATS = {"dense", "csr", "macko", "tca_bme", "tiled_csl", "nm"}
NP_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "U8": np.uint8,
             "I8": np.int8, "U16": np.uint16, "I16": np.int16, "U32": np.uint32,
             "I32": np.int32, "U64": np.uint64, "I64": np.int64, "BOOL": np.bool_,
             "BF16": np.uint16}  # bf16 compared as raw 16-bit patterns

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def shards_of(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        files = sorted(set(wm.values()))
        return [(os.path.join(d, s), {k for k, v in wm.items() if v == s}) for s in files]
    return [(os.path.join(d, "model.safetensors"), None)]


def raw_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def raw_tensor(path, info, base):
    b, e = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(base + b)
        raw = f.read(e - b)
    return np.frombuffer(raw, dtype=NP_DTYPES[info["dtype"]]).reshape(info["shape"])


def load_with_safetensors(handles, name, dtype):
    """A tensor through safetensors as a numpy array. numpy has no bfloat16, so BF16 tensors go
    through torch (when installed) and come back as their raw 16-bit patterns."""
    if dtype == "BF16":
        import torch
        return handles["pt"].get_tensor(name).view(torch.int16).numpy().view(np.uint16)
    return handles["np"].get_tensor(name)


def open_safetensors(path, header):
    handles = {"np": safe_open(path, framework="np")}
    if any(isinstance(v, dict) and v.get("dtype") == "BF16" for v in header.values()):
        try:
            import torch  # noqa: F401
            handles["pt"] = safe_open(path, framework="pt")
        except ImportError:
            print(f"note: {path} has BF16 tensors and torch is absent; numpy cannot load them, "
                  "checking them by raw bytes only")
    return handles


def reference_tensors(ref_dir):
    out = {}
    for path, _ in shards_of(ref_dir):
        header, base = raw_header(path)
        for k, v in header.items():
            if k != "__metadata__":
                out[k] = (path, v, base)
    return out


def decode_csr(get, name, meta):
    rows, cols = meta["shape"]
    pre = f"{name}.csr."
    row_ptr = get(pre + "row_ptr").astype(np.int64)
    cols_idx = get(pre + ("col16" if meta["params"]["index_bits"] == 16 else "col32")).astype(np.int64)
    values = get(pre + "values")
    dense = np.zeros((rows, cols), dtype=values.dtype)
    for r in range(rows):
        s, e = row_ptr[r], row_ptr[r + 1]
        dense[r, cols_idx[s:e]] = values[s:e]
    return dense


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--reference", help="the dense checkpoint the sparse one was pruned from")
    a = ap.parse_args()
    ref = reference_tensors(a.reference) if a.reference else None
    n_tensors = n_sparse = n_compared = 0
    for path, expected_names in shards_of(a.dir):
        header, base = raw_header(path)
        if (base % 8) != 0:
            fail(f"{path}: data section starts at {base}, not 8-byte aligned")
        handle = open_safetensors(path, header)
        names = set(handle["np"].keys())
        if expected_names is not None and names != expected_names:
            fail(f"{path}: tensors differ from the index ({len(names ^ expected_names)} differ)")
        meta = handle["np"].metadata() or {}
        arrays = {}

        def get(n):
            if n not in arrays:
                arrays[n] = raw_tensor(path, header[n], base)
            return arrays[n]

        for name in sorted(names):
            info = header[name]
            raw = get(name)
            n_tensors += 1
            if info["dtype"] != "BF16" or "pt" in handle:
                st = load_with_safetensors(handle, name, info["dtype"])
                if list(st.shape) != info["shape"]:
                    fail(f"{name}: safetensors shape {list(st.shape)} != header {info['shape']}")
                elif st.tobytes() != raw.tobytes():
                    fail(f"{name}: safetensors values differ from the raw bytes")
        for key, value in meta.items():
            if not key.startswith("sparrow:"):
                continue
            name = key[len("sparrow:"):]
            n_sparse += 1
            m = json.loads(value)
            if m.get("format") not in FORMATS:
                fail(f"{name}: unknown format {m.get('format')}")
                continue
            for arr in m.get("arrays", []):
                if f"{name}.{m['format']}.{arr}" not in names:
                    fail(f"{name}: array {arr} missing")
            if ref is not None and name in ref and m["format"] == "csr":
                want = raw_tensor(*ref[name])
                got = decode_csr(get, name, m)
                kept = got != 0
                if not np.array_equal(got[kept], want[kept]):
                    fail(f"{name}: csr kept values differ from the reference")
                n_compared += 1
        if ref is not None:
            for name in sorted(names):
                if name not in ref:
                    continue  # a sparse array
                want = raw_tensor(*ref[name])
                got = get(name)
                if got.shape != want.shape:
                    fail(f"{name}: shape {got.shape} != reference {want.shape}")
                    continue
                nz = got.view(np.uint16 if got.dtype.itemsize == 2 else got.dtype) != 0
                if np.array_equal(got, want):
                    n_compared += 1
                elif np.array_equal(got[nz], want[nz]):
                    n_compared += 1  # pruned: kept values identical
                else:
                    fail(f"{name}: values differ from the reference")
    print(f"{a.dir}: {n_tensors} tensors read with safetensors, {n_sparse} sparse tensors, "
          f"{n_compared} compared with the reference; "
          + ("OK" if not failures else f"{len(failures)} FAILURES"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
