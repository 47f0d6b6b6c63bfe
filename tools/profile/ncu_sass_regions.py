#!/usr/bin/env python3
"""Where a warp-specialised kernel's stall samples fall, region by region.

Reads the SASS page that scripts/ncu_profile.sh writes (NAME.source.csv: one row per instruction,
with the warp-state samples and instructions executed) and cuts the instruction stream at every
barrier or wait (BAR.SYNC, BAR.ARV, WARPGROUP.DEPBAR, SYNCS): between two of them a warpgroup runs
one stage. For each region with enough samples it prints the samples, the instructions executed per
warp and per `--per` unit (e.g. chunks x warps of the warpgroup), the leading stall reasons and the
commonest opcodes. A marker opcode (--split-at, default the auxiliary warpgroups' register release)
names where the second role's code starts.

usage: ncu_sass_regions.py NAME.source.csv [--min-samples N] [--per N] [--split-at OPCODE]
"""
import argparse
import collections
import sys

from ncu_page import read_page


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--min-samples", type=int, default=300)
    ap.add_argument("--per", type=float, default=0.0, help="divide instructions executed by this (warp-chunks)")
    ap.add_argument("--split-at", default="USETMAXREG.DEALLOC")
    args = ap.parse_args()

    page = read_page(args.csv, lambda r: r and r[0] == "Address", "'Address' header row (not an ncu SASS source page?)")
    if page is None:
        return 1
    header, body = page
    col = {name: i for i, name in enumerate(header)}
    for needed in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if needed not in col:
            print(f"{args.csv}: no column '{needed}'", file=sys.stderr)
            return 1
    stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def number(text: str) -> int:
        try:
            return int(float(text))
        except ValueError:
            return 0

    instructions = []
    for r in body:
        if len(r) != len(header):
            continue
        source = r[col["Source"]].strip()
        opcode = source.split()[1] if source.startswith("@") and len(source.split()) > 1 else source.split(" ")[0]
        instructions.append((source, opcode, number(r[col["Warp Stall Sampling (All Samples)"]]),
                             number(r[col["Instructions Executed"]]),
                             {s[len("stall_"):]: number(r[col[s]]) for s in stall_cols}))
    if not instructions:
        print(f"{args.csv}: no instructions", file=sys.stderr)
        return 1

    split = next((i for i, x in enumerate(instructions) if args.split_at and args.split_at in x[0]), None)
    total = sum(x[2] for x in instructions)
    print(f"{len(instructions)} instructions, {total} samples"
          + (f"; second role from instruction {split} ({sum(x[2] for x in instructions[split:])} samples)"
             if split is not None else ""))
    boundaries = ("BAR.SYNC", "BAR.ARV", "WARPGROUP.DEPBAR", "SYNCS")
    cuts = [i for i, x in enumerate(instructions) if any(b in x[0] for b in boundaries) or i == split]
    begin = 0
    for end in cuts + [len(instructions) - 1]:
        if end < begin:
            continue
        region = instructions[begin:end + 1]
        first, begin = begin, end + 1
        samples = sum(y[2] for y in region)
        if samples < args.min_samples:
            continue
        stalls = collections.Counter()
        for y in region:
            stalls.update(y[4])
        executed = sum(y[3] for y in region)
        opcodes = collections.Counter(y[1] for y in region)
        role = " (second role)" if split is not None and first >= split else ""
        per = f", {executed / args.per:.0f} per unit" if args.per > 0 else ""
        print(f"\n[{first}, {end}]{role} ends at '{region[-1][0][:48]}'")
        print(f"  samples {samples} ({100 * samples / total:.1f}%), warp instructions executed {executed}{per}")
        print("  stalls: " + ", ".join(f"{k} {v}" for k, v in stalls.most_common(6) if v))
        print("  opcodes: " + ", ".join(f"{k} {v}" for k, v in opcodes.most_common(8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
