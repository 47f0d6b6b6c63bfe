#!/usr/bin/env python3
"""The logs of one A/B round (scripts/decode_ab_round.sh, scripts/gdn_ab_round.sh) as figures.

  ab_round.py means  decode|gdn LOG_DIR
      the table of means, A against B, that the round scripts print last;
  ab_round.py record decode|gdn LOG_DIR --into DATA.json --key NAME --what TEXT [--a REV] [--b REV]
      the round's every run, its machine and its tests, added to a data file of docs/benchmarks/data
      under NAME (refused when NAME is there already: a round is recorded once).

A decode round's runs are the files linear-{A,B}.txt (di_linear_bench tables), engine-{A,B}.txt
(di_engine_bench decode lines) and offline-{A,B}.txt (bench-offline summaries); a GDN round's are
bench-{A,B}.txt (di_gdn_bench lines) and, when the round ran one, timeline-B.txt. Both have
machine.txt and tests.log. A log that holds no run of a kind the round makes is an error, so that
a round that failed half-way is not recorded as a result.
"""
import argparse
import collections
import json
import re
import sys
from pathlib import Path

SIDES = "AB"


class RoundError(Exception):
    pass


# ---- the runs of each kind, per side: {measure: {key: [value per run]}} ---------------------------

def _collect(path, pattern, key, value):
    runs = collections.defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            m = re.search(pattern, line)
            if m:
                runs[key(m)].append(float(m[value]))
    return runs


DECODE_MEASURES = {
    # measure: (file stem, pattern, key, value group, unit, title)
    "linear_small_batch_us": ("linear", r"^\| ([^|]+?) \| (\d+) \| [\d.]+ \| ([\d.]+) \|",
                              lambda m: f"{m[1]}, {m[2]} rows", 3, "us", "layer, rows"),
    "decode_step_ms": ("engine", r"^(\d+)\s+(graph|eager)\s+[\d.]+\s+([\d.]+)\s",
                       lambda m: f"{m[2]} batch {m[1]}", 3, "ms", "decode step, batch"),
    "offline_output_tok_s": ("offline", r"output tokens/s ([\d.]+).*\[concurrency (\d+)\]",
                             lambda m: f"concurrency {m[2]}", 1, "output tok/s", "bench-offline"),
    # di_engine_bench's prefill lines: "LENxSEQS tok/s ms MFU%", where the round ran prefill shapes.
    "prefill_ms": ("engine", r"^\s*(\d+x\d+)\s+\d+\s+([\d.]+)\s+[\d.]+%", lambda m: f"prefill {m[1]}", 2, "ms",
                   "prefill step"),
}
# Measures a round makes only when asked (decode_ab_round.sh --prefill).
OPTIONAL_MEASURES = {"prefill_ms"}
GDN_MEASURES = {
    "median_ms": ("bench", r"^(\S+)\s+(\d+/\d+)\s+(\d+x\d+|\d+(?:\+\d+)+)\s+([\d.]+)\s", lambda m: f"{m[2]} {m[3]}", 4, "ms",
                  "heads shape"),
}


def read_runs(kind, log_dir):
    measures = DECODE_MEASURES if kind == "decode" else GDN_MEASURES
    runs = {}
    for side in SIDES:
        runs[side] = {}
        for measure, (stem, pattern, key, value, _, _) in measures.items():
            runs[side][measure] = dict(_collect(log_dir / f"{stem}-{side}.txt", pattern, key, value))
    for measure, (stem, *_rest) in measures.items():
        if not runs["A"][measure] and measure not in OPTIONAL_MEASURES:
            raise RoundError(f"{log_dir / (stem + '-A.txt')}: no {measure} runs (the round did not reach them)")
    return runs, measures


def means_tables(kind, log_dir):
    runs, measures = read_runs(kind, log_dir)
    lines = []
    for measure, (_, _, _, _, unit, title) in measures.items():
        if not runs["A"][measure]:
            continue  # an optional measure the round did not make
        if kind == "gdn":
            lines += ["", f"| heads | shape | A {unit} | B {unit} | B / A |", "|---|---|---|---|---|"]
        else:
            lines += ["", f"| {title} | A {unit} | B {unit} | B / A |", "|---|---|---|---|"]
        for key, a in runs["A"][measure].items():
            b = runs["B"][measure].get(key, [])
            ma = sum(a) / len(a)
            mb = sum(b) / len(b) if b else float("nan")
            label = " | ".join(key.split(" ", 1)) if kind == "gdn" else key
            lines.append(f"| {label} | {ma:.3f} ({len(a)}) | {mb:.3f} ({len(b)}) | {mb / ma:.3f} |")
    return "\n".join(lines)


# ---- provenance ------------------------------------------------------------------------------------

def machine(log_dir):
    path = log_dir / "machine.txt"
    if not path.exists():
        raise RoundError(f"{path}: missing (the round writes its source commit, GPU and toolchain there)")
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def tests_summary(log_dir):
    path = log_dir / "tests.log"
    if not path.exists():
        return "no tests.log"
    text = path.read_text()
    passed = re.findall(r"\[  PASSED  \] (\d+) tests?", text)
    failed = re.findall(r"\[  FAILED  \] (\d+) tests?", text)
    if failed:
        return f"{failed[-1]} failed" + (f", {passed[-1]} passed" if passed else "")
    return f"{passed[-1]} passed" if passed else "no gtest summary"


def timeline(log_dir):
    path = log_dir / "timeline-B.txt"
    out, case = {}, None
    if path.exists():
        for line in path.read_text().splitlines():
            m = re.match(r"^\S+\s+(\d+/\d+)\s+(\d+x\d+)\s", line)
            if m:
                case = f"{m[1]} {m[2]}"
                out[case] = []
            elif line.strip().startswith("timeline") and case:
                out[case].append(line.strip())
    return out


def record(kind, log_dir, into, key, what, a_rev, b_rev):
    runs, _ = read_runs(kind, log_dir)
    entry = {"what": what, "A": a_rev, "B": b_rev, "machine": machine(log_dir), "tests_on_B": tests_summary(log_dir),
             "runs": runs}
    if kind == "gdn":
        entry["timeline_B"] = timeline(log_dir)
    data = json.loads(into.read_text()) if into.exists() else {}
    rounds = data.setdefault("rounds", {})
    if key in rounds or key in data:
        raise RoundError(f"{into}: a round named '{key}' is there already")
    rounds[key] = entry
    into.write_text(json.dumps(data, indent=1) + "\n")
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("means", help="the table of means, A against B")
    m.add_argument("kind", choices=["decode", "gdn"])
    m.add_argument("log_dir", type=Path)
    r = sub.add_parser("record", help="add the round to a data file")
    r.add_argument("kind", choices=["decode", "gdn"])
    r.add_argument("log_dir", type=Path)
    r.add_argument("--into", type=Path, required=True)
    r.add_argument("--key", required=True)
    r.add_argument("--what", required=True, help="what B changed, and whether it was kept")
    r.add_argument("--a", default="", help="A's revision")
    r.add_argument("--b", default="", help="B's revision, or what it is when uncommitted")
    args = parser.parse_args(argv)
    try:
        if not args.log_dir.is_dir():
            raise RoundError(f"{args.log_dir}: not a directory")
        if args.command == "means":
            print(means_tables(args.kind, args.log_dir))
        else:
            entry = record(args.kind, args.log_dir, args.into, args.key, args.what, args.a, args.b)
            counts = {m: sum(len(v) for v in entry["runs"]["B"][m].values()) for m in entry["runs"]["B"]}
            print(f"{args.into}: round '{args.key}' recorded (B runs: {counts}; tests {entry['tests_on_B']})")
    except RoundError as e:
        print(f"ab_round: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
