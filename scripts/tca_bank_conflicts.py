#!/usr/bin/env python3
"""Shared-memory wavefronts of the tca_bme nibble decode's value loads, by weight density.

    python3 scripts/tca_bank_conflicts.py [TRIALS]      (needs numpy)

One warp decodes a 16x16 tile from the four 8x8 bitmaps of its group (stored in A-fragment order:
rows 0-7 / cols 0-7, rows 8-15 / cols 0-7, rows 0-7 / cols 8-15, rows 8-15 / cols 8-15), whose
values lie consecutively in shared memory. Lane (g, t) reads the nibble of row g % 4 of half g / 4,
columns 4 (t % 2) .. + 3, of one bitmap per call: lanes t < 2 (pair 0) the first two bitmaps,
lanes t >= 2 (pair 1) the last two. Each call issues four 2-byte loads per lane (the values at p,
p + 1, q, q + 1; nibble_decode.cuh). A load instruction costs one wavefront per distinct 4-byte
word in its busiest bank of 32.

Orders compared, for the bitmap a lane reads in call 0 / call 1:
  current  pair 0: 0 / 1, pair 1: 2 / 3   (one instruction reads bitmaps 0 and 2)
  swapped  pair 0: 0 / 1, pair 1: 3 / 2   (0 and 3, then 1 and 2)
Bitmaps are random at the given density; the tile's first value sits at a random 2-byte offset.
Prints the mean wavefronts per value-load instruction (1.0 = conflict-free).
"""
import sys

import numpy as np

ORDERS = {"current": lambda pair, call: 2 * pair + call,
          "swapped": lambda pair, call: 2 * pair + (call if pair == 0 else 1 - call)}


def wavefronts(bitmaps, first, order):
    counts = bitmaps.sum(axis=1)
    starts = first + np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = 0
    for call in range(2):
        addresses = [[] for _ in range(4)]  # per load instruction, one byte address per lane
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            b = ORDERS[order](t >> 1, call)
            bits = bitmaps[b]
            high = g >= 4
            half = bits[32:] if high else bits[:32]
            shift = (g & 3) * 8 + (t & 1) * 4
            p = starts[b] + (bits[:32].sum() if high else 0) + half[:shift].sum()
            q = p + half[shift:shift + 2].sum()
            for i, v in enumerate((p, p + 1, q, q + 1)):
                addresses[i].append(2 * int(v))
        for lanes in addresses:
            per_bank = {}
            for word in {a // 4 for a in lanes}:
                per_bank[word % 32] = per_bank.get(word % 32, 0) + 1
            total += max(per_bank.values())
    return total / 8  # 8 load instructions per tile


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = np.random.default_rng(1)
    print("density  " + "  ".join(f"{o:>8}" for o in ORDERS))
    for density in (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7):
        sums = dict.fromkeys(ORDERS, 0.0)
        for _ in range(trials):
            bitmaps = rng.random((4, 64)) < density
            first = int(rng.integers(0, 64))
            for o in ORDERS:
                sums[o] += wavefronts(bitmaps, first, o)
        print(f"{density:7.2f}  " + "  ".join(f"{sums[o] / trials:8.2f}" for o in ORDERS))


if __name__ == "__main__":
    main()
