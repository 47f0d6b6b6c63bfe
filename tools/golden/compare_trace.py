#!/usr/bin/env python3
"""Compares two traces of named intermediates (deltainfer score --trace-out, make_golden.py
--trace-out) and prints, in forward order, each name's max and mean absolute difference and the
share of elements that differ. The first name whose difference jumps is where two runs part.

usage: compare_trace.py A.json B.json
"""
import json
import re
import sys

import numpy as np


def order(name):
    m = re.match(r"layers\.(\d+)\.", name)
    stage = ["input_norm", "gdn.mixed", "attn.q_norm", "attn.k_norm", "gdn.core", "gdn.normed", "attn.gated",
             "mixer", "post_norm", "mlp", "out"]
    if name == "embed":
        return (-1, 0)
    if not m:
        return (10**6, 0)
    rest = name[m.end():]
    return (int(m.group(1)), stage.index(rest) if rest in stage else 99)


def main():
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    for name in sorted(set(a) & set(b), key=order):
        x = np.array(a[name]["values"], dtype=np.float64)
        y = np.array(b[name]["values"], dtype=np.float64)
        if x.size != y.size:
            print(f"{name:28s} size {x.size} vs {y.size}")
            continue
        d = np.abs(x - y)
        print(f"{name:28s} max {d.max():10.3g}  mean {d.mean():10.3g}  differ {np.mean(d > 0):6.1%}  |ref| {np.abs(y).max():8.3g}")
    only = sorted(set(a) ^ set(b))
    if only:
        print("only in one trace:", ", ".join(only))


if __name__ == "__main__":
    main()
