#!/usr/bin/env python3
"""Tokenizer benchmark: single-threaded encode throughput of deltainfer's tokenizer and of Hugging Face
tokenizers on the same ~1 MB of mixed text (English, source code, CJK, emoji), in one run, plus the
load time of tokenizer.json for both. Not a test; the figures go to docs/benchmarks/tokenizer.md.

The text comes from the deterministic generators of tests/tokenizer/hf_equality.py. tokenizers runs
with one thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false) and Tokenizer.encode; ours is
bench/tokenizer_bench.cpp (di_tokenizer_bench). Both report the median of several runs, and the ids
of both are compared.

usage: tokenizer_bench.py --bench build/bench/di_tokenizer_bench [--tokenizer-dir DIR] [--venv DIR]
                          [--runs N] [--mb 1.0]
"""
import os

# Before tokenizers is imported anywhere (and inherited by the venv's re-executed interpreter).
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
import hf_equality  # noqa: E402  (the corpus generators and the venv set-up)


def bench_text(mb, seed=7):
    rng = random.Random(seed)
    gens = [(hf_equality.english, 0.50), (hf_equality.code, 0.25), (hf_equality.cjk, 0.15),
            (hf_equality.emoji, 0.05), (hf_equality.rtl_indic_thai, 0.05)]
    parts, size = [], 0
    while size < mb * 1e6:
        r, acc = rng.random(), 0.0
        for gen, p in gens:
            acc += p
            if r < acc:
                break
        s = gen(rng) + "\n"
        parts.append(s)
        size += len(s.encode("utf-8"))
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path of di_tokenizer_bench")
    ap.add_argument("--tokenizer-dir", default=os.path.join(ROOT, ".deps", "qwen35-tokenizer"))
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "tests", "hf_venv"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--mb", type=float, default=1.0)
    args = ap.parse_args()
    hf_equality.ensure_venv(os.path.abspath(args.venv))

    import tokenizers
    from tokenizers import Tokenizer

    text = bench_text(args.mb)
    nbytes = len(text.encode("utf-8"))
    lines = [l + "\n" for l in text.split("\n")[:-1]]  # the text ends with "\n"
    assert "".join(lines) == text
    results = {}
    path = os.path.join(args.tokenizer_dir, "tokenizer.json")
    loads = []
    for _ in range(3):
        t0 = time.perf_counter()
        Tokenizer.from_file(path)
        loads.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "text.txt")
        ids_path = os.path.join(tmp, "ids.txt")
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(text)
        for mode in ("whole", "lines"):
            r = subprocess.run([args.bench, args.tokenizer_dir, text_path, str(args.runs), ids_path, mode],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"tokenizer_bench: {args.bench} failed: {r.stderr}")
            ours = json.loads(r.stdout)
            ours_ids = [int(x) for x in open(ids_path).read().split()]
            times = []
            for _ in range(args.runs):
                hf = Tokenizer.from_file(path)  # an empty cache each run, as ours
                t0 = time.perf_counter()
                if mode == "whole":
                    hf_ids = hf.encode(text).ids
                else:
                    hf_ids = [i for e in hf.encode_batch(lines) for i in e.ids]
                times.append(time.perf_counter() - t0)
            results[mode] = (ours, ours_ids == hf_ids, statistics.median(times), times[0], len(hf_ids))

    print(f"text: {nbytes} bytes in {len(lines)} lines (English, code, CJK, emoji, Arabic/Indic/Thai), "
          f"{results['whole'][4]} tokens")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; tokenizers {tokenizers.__version__}, one thread")
    print(f"load of tokenizer.json (median of 3): deltainfer {results['whole'][0]['load_median_s']:.3f} s, "
          f"tokenizers {statistics.median(loads):.3f} s")
    ok = True
    for mode, label in (("whole", "one encode() of the whole text"), ("lines", "one encode() per line")):
        ours, equal, hf_med, hf_first, _ = results[mode]
        ok &= equal
        hf_mbs = nbytes / 1e6 / hf_med
        print(f"{label} (median of {args.runs}; ids equal: {equal}):")
        print(f"  deltainfer {ours['encode_median_s'] * 1e3:8.1f} ms {ours['mb_per_s']:8.2f} MB/s")
        print(f"  tokenizers {hf_med * 1e3:8.1f} ms {hf_mbs:8.2f} MB/s   -> {ours['mb_per_s'] / hf_mbs:.1f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
