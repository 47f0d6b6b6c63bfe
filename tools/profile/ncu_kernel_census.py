#!/usr/bin/env python3
"""Where a run's GPU time goes, kernel by kernel: the census of one profiled window.

Reads the raw page that scripts/profile_decode.sh has Nsight Compute write (`--page raw --csv
--print-units base`: one row per kernel launch, with its duration and DRAM bytes) and groups the
launches by kernel (its name without namespaces and arguments, its template arguments kept) and
grid. For each group it prints the launches, the time in all and per launch, the DRAM bytes per
launch and the rate they were moved at; last, the sum over every launch. The profiler runs the
kernels one at a time, so the sum is the step's kernel time without the overlap of early launch,
and the step's measured time less this sum is what its launches and gaps cost.

With --against OTHER.csv (the other side of an A/B round), each group also shows the other page's
time per launch and the change, and the groups only the other page has are listed after.

usage: ncu_kernel_census.py RAW.csv [--json OUT] [--top N] [--against OTHER.csv]
"""
import argparse
import collections
import json
import re
import sys

from ncu_page import read_page

DURATION = "gpu__time_duration.sum"
READ = "dram__bytes_read.sum"
WRITE = "dram__bytes_write.sum"


def short_name(name: str) -> str:
    """'void a::(anonymous namespace)::k<1, (a::E)3>(a::P, long)' -> 'k<1, 3>'."""
    name = re.sub(r"^void ", "", name.strip())
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous", i):
            cut = i
            break
    name = name[:cut]
    name = re.sub(r"\([\w:]+\)(-?\d+)", r"\1", name)  # enum casts in template arguments
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    return re.sub(r"\b[\w]+::", "", name)


def census(path):
    """The page's launches grouped by (kernel, grid): {key: {launches, ns, bytes}}, or None after
    saying on stderr why the page cannot be read."""
    page = read_page(path, lambda r: "Kernel Name" in r, "'Kernel Name' header row (not an ncu raw page?)")
    if page is None:
        return None
    header, data = page
    col = {name: i for i, name in enumerate(header)}
    for needed in ("Kernel Name", "Grid Size", DURATION):
        if needed not in col:
            print(f"{path}: no '{needed}' column", file=sys.stderr)
            return None
    if data and data[0][col["Kernel Name"]] == "":  # the units row
        units = data.pop(0)
        if units[col[DURATION]] not in ("ns", "nsecond"):
            print(f"{path}: durations in '{units[col[DURATION]]}', expected ns (--print-units base)", file=sys.stderr)
            return None
        for metric in (READ, WRITE):
            if metric in col and units[col[metric]] not in ("byte", "B"):
                print(f"{path}: {metric} in '{units[col[metric]]}', expected bytes (--print-units base)",
                      file=sys.stderr)
                return None

    def number(row, metric):
        if metric not in col or row[col[metric]] in ("", "n/a"):
            return 0.0
        return float(row[col[metric]].replace(",", ""))

    groups = collections.defaultdict(lambda: {"launches": 0, "ns": 0.0, "bytes": 0.0})
    for row in data:
        if len(row) < len(col):
            continue
        g = groups[(short_name(row[col["Kernel Name"]]), row[col["Grid Size"]])]
        g["launches"] += 1
        g["ns"] += number(row, DURATION)
        g["bytes"] += number(row, READ) + number(row, WRITE)
    if not groups:
        print(f"{path}: no kernel launches in the page", file=sys.stderr)
        return None
    return dict(groups)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--json", help="write the groups and totals here")
    ap.add_argument("--top", type=int, default=40, help="print this many groups, longest first")
    ap.add_argument("--against", help="another page (the other side of an A/B): its time per launch beside each")
    args = ap.parse_args()
    groups = census(args.csv)
    if groups is None:
        return 1
    other = census(args.against) if args.against else {}
    if other is None:
        return 1
    launches = sum(g["launches"] for g in groups.values())
    total_ns = sum(g["ns"] for g in groups.values())
    total_bytes = sum(g["bytes"] for g in groups.values())

    order = sorted(groups.items(), key=lambda kv: -kv[1]["ns"])
    print(f"{launches} launches, {len(groups)} kernels x grids, {total_ns / 1e3:.1f} us in all, "
          f"{total_bytes / 1e6:.1f} MB of DRAM traffic ({total_bytes / total_ns:.0f} GB/s over the kernel time)")
    if args.against:
        other_ns = sum(g["ns"] for g in other.values())
        print(f"against {args.against}: {sum(g['launches'] for g in other.values())} launches, "
              f"{other_ns / 1e3:.1f} us in all")
    extra = " us each against | change |" if args.against else ""
    print(f"\n| kernel | grid | launches | us | of all | us each | MB each | GB/s |{extra}\n"
          f"|---|---|---|---|---|---|---|---|{'---|---|' if args.against else ''}")
    for (name, grid), g in order[: args.top]:
        each = g["ns"] / g["launches"]
        rate = g["bytes"] / g["ns"] if g["ns"] > 0 else 0.0
        line = (f"| {name} | {grid} | {g['launches']} | {g['ns'] / 1e3:.1f} | {100 * g['ns'] / total_ns:.1f}% | "
                f"{each / 1e3:.2f} | {g['bytes'] / g['launches'] / 1e6:.2f} | {rate:.0f} |")
        if args.against:
            o = other.get((name, grid))
            if o:
                o_each = o["ns"] / o["launches"]
                line += f" {o_each / 1e3:.2f} | {100 * (each / o_each - 1):+.1f}% |"
            else:
                line += " - | |"
        print(line)
    if len(order) > args.top:
        rest = sum(g["ns"] for _, g in order[args.top:])
        print(f"| ({len(order) - args.top} more) | | | {rest / 1e3:.1f} | {100 * rest / total_ns:.1f}% | | | |")
    if args.against:
        for (name, grid), o in sorted(other.items(), key=lambda kv: -kv[1]["ns"]):
            if (name, grid) not in groups:
                print(f"only against: {name} {grid}, {o['launches']} launches, {o['ns'] / 1e3:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"launches": launches, "kernel_ns": total_ns, "dram_bytes": total_bytes,
                       "groups": [{"kernel": n, "grid": gr, **g} for (n, gr), g in order]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
