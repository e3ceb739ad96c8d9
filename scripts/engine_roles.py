#!/usr/bin/env python3
"""What each role of linear layer costs inside the engine's decode step, from bench-model logs:
one run as is and one per role with SPARROW_ENGINE_SKIP=<role> (scripts/engine-roles.sh makes
them). A role's cost is the step time with it minus the step time without it; per layer it is
that divided by the model's layer count.

  scripts/engine_roles.py BASE.log ROLE=SKIPPED.log [ROLE=SKIPPED.log ...] [--layers 32]
"""
import argparse
import re
import sys

ROW = re.compile(r"^\|\s*(?P<model>[^|]+?)\s*\|\s*(?P<size>[^|]+?)\s*\|\s*(?P<sparsity>[0-9.]+)\s*\|"
                 r"\s*(?P<backend>\w+)\s*\|\s*(?P<batch>\d+)\s*\|\s*(?P<test>tg\d+)\s*\|"
                 r"\s*(?P<tps>[0-9.]+)")


def read_tg(path):
    """{(sparsity, batch, test): tokens per second} of the log's tg rows."""
    out = {}
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"engine_roles.py: {e}")
    with f:
        for line in f:
            m = ROW.match(line)
            if m:
                out[(m["sparsity"], int(m["batch"]), m["test"])] = float(m["tps"])
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("skipped", nargs="+", help="ROLE=LOG")
    ap.add_argument("--layers", type=int, default=32)
    a = ap.parse_args(argv)
    base = read_tg(a.base)
    if not base:
        sys.exit(f"engine_roles.py: no tg rows in {a.base}")
    roles = []
    for item in a.skipped:
        role, sep, path = item.partition("=")
        if not sep or not role or not path:
            sys.exit(f"engine_roles.py: '{item}' is not ROLE=LOG")
        roles.append((role, read_tg(path)))
    head = "| sparsity | batch | test | step (ms) |" + "".join(
        f" {r}: ms per step, us per layer |" for r, _ in roles)
    print(head)
    print("|" + "---|" * (4 + len(roles)))
    for key in sorted(base):
        sparsity, batch, test = key
        step = batch / base[key] * 1e3  # ms: a step makes one token per sequence
        cells = []
        for _, rows in roles:
            if key not in rows:
                cells.append(" not run |")
                continue
            without = batch / rows[key] * 1e3
            cost = step - without
            cells.append(f" {cost:.3f}, {cost * 1e3 / a.layers:.1f} |")
        print(f"| {sparsity} | {batch} | {test} | {step:.3f} |" + "".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
