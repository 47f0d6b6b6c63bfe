#!/usr/bin/env python3
"""Checks that transformers loads what `deltainfer make-tiny-model` writes, in every form and
preset, and that the deltainfer CPU engine agrees with it (float32, one prefill).

For each case it writes the model with the given binary, loads it with
AutoModelForCausalLM.from_pretrained (float32, CPU), runs a prompt, runs
`deltainfer score --precision f32` on the same prompt, and prints the max abs logit difference
at the last position and whether the argmax agrees. Exits non-zero on any failure.

usage: check_hf_compat.py --deltainfer BIN --work DIR [--threads N]
"""
import argparse
import json
import os
import random
import subprocess
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

CASES = [
    ("tiny flat", ["--preset", "tiny"]),
    ("tiny nested (model.language_model.*, mtp.*, model.visual.*)", ["--preset", "tiny", "--nested"]),
    ("4b-geometry, 4 layers", ["--preset", "4b-geometry", "--layers", "4"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deltainfer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(5)
    ids = [rng.randrange(0, 248044) for _ in range(70)]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failures = 0
    for i, (name, flags) in enumerate(CASES):
        model_dir = os.path.join(args.work, f"model{i}")
        subprocess.run([args.deltainfer, "make-tiny-model", model_dir, "--seed", "3", *flags], check=True,
                       stderr=subprocess.DEVNULL)
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            with torch.no_grad():
                ref = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
            cls = type(model).__name__
            del model
        except Exception as e:  # report and go on with the next case
            print(f"FAIL {name}: transformers could not load or run it: {type(e).__name__}: {e}")
            failures += 1
            continue
        out = os.path.join(args.work, f"score{i}.json")
        subprocess.run([args.deltainfer, "score", "--model", model_dir, "--precision", "f32", "--prompt-ids",
                        ",".join(map(str, ids)), "--logits-at", "-1", "--out", out], check=True,
                       stderr=subprocess.DEVNULL)
        ours = torch.tensor(json.load(open(out))["logits"][0]["values"])
        diff = float((ours - ref).abs().max())
        same = int(ours.argmax()) == int(ref.argmax())
        ok = same and diff < 1e-3 * max(1.0, float(ref.abs().max()))
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: loaded as {cls}; max |logit diff| {diff:.3g} "
              f"(max |logit| {float(ref.abs().max()):.3g}); argmax {'agrees' if same else 'differs'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
