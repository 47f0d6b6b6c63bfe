#!/usr/bin/env python3
"""Which global loads a kernel issues before it waits for the kernel ahead, read off its machine code.

Kernels launched with programmatic dependent launch read what does not depend on the kernel ahead
(weights, parameters, their own state) before griddepcontrol.wait, so that those loads overlap that
kernel's tail. Whether they stay there is up to ptxas: it moves non-coherent loads (ld.global.nc)
past the wait (SASS ACQBULK) while it leaves coherent ones in place (docs/benchmarks/decode.md), and
nothing but the machine code shows it. This reads `cuobjdump -sass` output and counts, per kernel
that waits, the LDG instructions before its first ACQBULK.

  sass_wait_audit.py SASS_FILE...                     a table: kernel, loads before the wait, where
  sass_wait_audit.py SASS_FILE... --expect 'RE>=N'    and a check: every kernel whose mangled name
                                                      matches RE has at least N loads before its
                                                      wait; an RE that matches no waiting kernel is
                                                      an error too (repeatable)
Exit status 1 when a check fails or the input holds no kernel that waits.
"""
import argparse
import re
import sys

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,6}\*/\s+(.*?)\s*;")


def kernels(text):
    """(mangled name, [instruction text]) per function of a cuobjdump -sass listing."""
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        yield name, [m[1] for m in INSTRUCTION.finditer(part)]


def audit(text):
    """{name: (loads before the wait, index of the wait, instructions)} for the kernels that wait."""
    out = {}
    for name, code in kernels(text):
        waits = [i for i, ins in enumerate(code) if re.search(r"\bACQBULK\b", ins)]
        if waits:
            loads = sum(1 for ins in code[: waits[0]] if re.search(r"\bLDG\b", ins))
            out[name] = (loads, waits[0], len(code))
    return out


def parse_expect(spec):
    m = re.fullmatch(r"(.+)>=(\d+)", spec)
    if not m:
        raise argparse.ArgumentTypeError(f"'{spec}': expected REGEX>=COUNT")
    return re.compile(m[1]), int(m[2])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sass", nargs="+", help="cuobjdump -sass output")
    parser.add_argument("--expect", type=parse_expect, action="append", default=[], metavar="'RE>=N'")
    args = parser.parse_args(argv)
    found = {}
    for path in args.sass:
        with open(path) as f:
            found.update(audit(f.read()))
    if not found:
        print(f"sass_wait_audit: no kernel in {', '.join(args.sass)} waits for the kernel ahead (no ACQBULK)",
              file=sys.stderr)
        return 1
    print("| kernel | loads before the wait | wait at instruction | of |\n|---|---|---|---|")
    for name, (loads, at, size) in sorted(found.items()):
        print(f"| {name} | {loads} | {at} | {size} |")
    failures = []
    for pattern, least in args.expect:
        matched = {n: v for n, v in found.items() if pattern.search(n)}
        if not matched:
            failures.append(f"no kernel that waits matches '{pattern.pattern}'")
        for name, (loads, at, _) in sorted(matched.items()):
            if loads < least:
                failures.append(f"{name}: {loads} loads before its wait (instruction {at}), expected at least {least}")
    for failure in failures:
        print(f"sass_wait_audit: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
