#!/usr/bin/env python3
"""Instruction counts of the SASS functions whose name contains a pattern.

    cuobjdump -sass -arch sm_90 BINARY | python3 scripts/sass_count.py PATTERN

Prints, per matching function: total static instructions and the counts of the opcodes that
matter to a decode loop (HMMA, LDS, LDG, POPC, PRMT, SHFL, and local-memory traffic). Static
counts, not executed ones: a comparison of two builds of one kernel, not a profile.
"""
import re
import sys
from collections import Counter

pattern = sys.argv[1]
name = None
ops = Counter()


def flush():
    if name is not None and pattern in name:
        keys = ["HMMA", "LDS", "LDG", "POPC", "PRMT", "SHFL", "LDL", "STL", "BRA"]
        total = sum(ops.values())
        print(f"{name[:90]}: {total} instructions; " +
              ", ".join(f"{k} {ops[k]}" for k in keys))


for line in sys.stdin:
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        flush()
        name, ops = m.group(1), Counter()
        continue
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
    if m and name is not None:
        ops[m.group(2)] += 1
flush()
