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
and for each order the loads as they are (four 2-byte loads per call: p, p + 1, q, q + 1) or as
three 4-byte loads of the words holding p .. p + 5 (bench/results/2026-11-25-s20-value-word-loads.diff).
Bitmaps are random at the given density; the tile's first value sits at a random 2-byte offset.
Prints the mean wavefronts of a tile's value loads (8 load instructions as they are, 6 as words;
each costs at least one wavefront).
"""
import sys

import numpy as np

ORDERS = {"current": lambda pair, call: 2 * pair + call,
          "swapped": lambda pair, call: 2 * pair + (call if pair == 0 else 1 - call)}


def wavefronts(bitmaps, first, order, words=False):
    counts = bitmaps.sum(axis=1)
    starts = first + np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = 0
    for call in range(2):
        addresses = [[] for _ in range(3 if words else 4)]  # per load instruction, one per lane
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            b = ORDERS[order](t >> 1, call)
            bits = bitmaps[b]
            high = g >= 4
            half = bits[32:] if high else bits[:32]
            shift = (g & 3) * 8 + (t & 1) * 4
            p = starts[b] + (bits[:32].sum() if high else 0) + half[:shift].sum()
            q = p + half[shift:shift + 2].sum()
            if words:
                for i in range(3):
                    addresses[i].append((2 * int(p)) // 4 * 4 + 4 * i)
            else:
                for i, v in enumerate((p, p + 1, q, q + 1)):
                    addresses[i].append(2 * int(v))
        for lanes in addresses:
            per_bank = {}
            for word in {a // 4 for a in lanes}:
                per_bank[word % 32] = per_bank.get(word % 32, 0) + 1
            total += max(per_bank.values())
    return total


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = np.random.default_rng(1)
    columns = [(o, w) for w in (False, True) for o in ORDERS]
    print("density  " + "  ".join(f"{o + (' words' if w else ''):>14}" for o, w in columns))
    for density in (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7):
        sums = dict.fromkeys(columns, 0.0)
        for _ in range(trials):
            bitmaps = rng.random((4, 64)) < density
            first = int(rng.integers(0, 64))
            for c in columns:
                sums[c] += wavefronts(bitmaps, first, *c)
        print(f"{density:7.2f}  " + "  ".join(f"{sums[c] / trials:14.1f}" for c in columns))


if __name__ == "__main__":
    main()
