#!/usr/bin/env python3
"""Records Hugging Face transformers' outputs for a deltainfer test checkpoint (the golden gates).

Runs where transformers and torch are installed (the GPU machine). The checkpoint is the one
`deltainfer make-tiny-model` writes, byte for byte: its SHA-256 goes into the manifest and the C++
test regenerates the model and checks the hash before comparing.

For each precision (float32 and bfloat16, both on the CPU so that the reference is deterministic)
and each prompt it records:
  - the full logits at chosen positions (.bin, rows in manifest order: little-endian float32 for the
    float32 run, bfloat16 bits for the bfloat16 run, whose logits are bf16 values);
  - for every position, the argmax, its top-two margin and the log-probability of the next token;
  - 32 greedy tokens from model.generate (with its cache), and at every step the top-5 ids and
    logits, so that the engine can be checked step by step under teacher forcing.

usage: make_golden.py --model DIR --out DIR [--threads N]
"""
import argparse
import hashlib
import importlib.util
import json
import os
import platform
import random
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

GREEDY_STEPS = 32


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prompts():
    # Short: at most 16 tokens. Long: 333 tokens, crossing five 64-token chunk boundaries.
    rng = random.Random(20261129)
    short = [9419, 374, 264, 1273, 315, 279, 13, 2023, 17, 88, 20, 151, 6004]
    long = [rng.randrange(0, 248044) for _ in range(333)]
    return {
        "short": {"ids": short, "logit_positions": [len(short) - 1]},
        "long": {"ids": long, "logit_positions": [63, 64, 128, len(long) - 1]},
    }


def top2_margin(row):
    top = torch.topk(row.float(), 2)
    return float(top.values[0] - top.values[1])


def logits_bytes(row, dtype_name):
    # A bf16 run's logits are bf16 values: stored as bf16 (the high half of each float32), exactly.
    if dtype_name == "bf16":
        return row.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    return row.numpy().astype("<f4").tobytes()


def trace(model, ids, path):
    """Writes every named intermediate of one forward pass, named as deltainfer's --trace-out."""
    values = {}

    def keep(name, t):
        if isinstance(t, tuple):
            t = t[0]
        t = t.detach().float()
        values[name] = {"shape": list(t.shape), "values": t.reshape(-1).tolist()}

    def out_hook(name):
        return lambda mod, args, out: keep(name, out)

    def in_hook(name):
        return lambda mod, args: keep(name, args[0])

    hooks = []
    inner = model.model
    hooks.append(inner.embed_tokens.register_forward_hook(out_hook("embed")))
    hooks.append(inner.norm.register_forward_hook(out_hook("final_norm")))
    for i, layer in enumerate(inner.layers):
        n = f"layers.{i}."
        hooks.append(layer.input_layernorm.register_forward_hook(out_hook(n + "input_norm")))
        hooks.append(layer.post_attention_layernorm.register_forward_hook(out_hook(n + "post_norm")))
        hooks.append(layer.mlp.register_forward_hook(out_hook(n + "mlp")))
        hooks.append(layer.register_forward_hook(out_hook(n + "out")))
        if hasattr(layer, "linear_attn"):
            g = layer.linear_attn
            hooks.append(g.register_forward_hook(out_hook(n + "mixer")))
            hooks.append(g.in_proj_qkv.register_forward_hook(out_hook(n + "gdn.mixed")))
            hooks.append(g.norm.register_forward_pre_hook(in_hook(n + "gdn.core")))
            hooks.append(g.norm.register_forward_hook(out_hook(n + "gdn.normed")))
        else:
            a = layer.self_attn
            hooks.append(a.register_forward_hook(out_hook(n + "mixer")))
            hooks.append(a.q_norm.register_forward_hook(out_hook(n + "attn.q_norm")))
            hooks.append(a.k_norm.register_forward_hook(out_hook(n + "attn.k_norm")))
            hooks.append(a.o_proj.register_forward_pre_hook(in_hook(n + "attn.gated")))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    for h in hooks:
        h.remove()
    with open(path, "w") as f:
        json.dump(values, f)


def record(model, dtype_name, ids, positions, logits_out):
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=x, use_cache=False).logits[0].float()  # [T, vocab]
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    result = {
        "argmax": [int(i) for i in logits.argmax(-1)],
        "argmax_margin": [top2_margin(logits[t]) for t in range(len(ids))],
        "next_token_logprob": [None] + [float(logprobs[t, ids[t + 1]]) for t in range(len(ids) - 1)],
        "logit_rows": [],
    }
    for p in positions:
        result["logit_rows"].append({"position": p, "row": len(logits_out)})
        logits_out.append(logits_bytes(logits[p].contiguous(), dtype_name))

    with torch.no_grad():
        gen = model.generate(
            input_ids=x,
            max_new_tokens=GREEDY_STEPS,
            min_new_tokens=GREEDY_STEPS,
            do_sample=False,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    tokens = [int(t) for t in gen.sequences[0, len(ids):]]
    steps = []
    for step, step_logits in enumerate(gen.logits):
        row = step_logits[0].float()
        top = torch.topk(row, 5)
        steps.append({
            "token": tokens[step],
            "margin": float(top.values[0] - top.values[1]),
            "top_ids": [int(i) for i in top.indices],
            "top_logits": [float(v) for v in top.values],
        })
    result["greedy"] = steps
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--trace-out", help="also write the named intermediates of the short prompt here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)

    manifest = {
        "format": "deltainfer-golden-v1",
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": "cpu",
            "threads": args.threads,
            "attn_implementation": "sdpa",
            # transformers swaps in these kernels when importable; each changes the rounding.
            "fla_importable": importlib.util.find_spec("fla") is not None,
            "causal_conv1d_importable": importlib.util.find_spec("causal_conv1d") is not None,
            "kernels_importable": importlib.util.find_spec("kernels") is not None,
        },
        "model": {
            "config_sha256": sha256(os.path.join(args.model, "config.json")),
            "safetensors_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        },
        "prompts": {},
        "runs": {},
    }
    for name, p in prompts().items():
        manifest["prompts"][name] = p
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa")
        model.eval()
        manifest["model"]["class"] = type(model).__name__
        rows = []
        runs = {}
        for name, p in manifest["prompts"].items():
            t0 = time.time()
            runs[name] = record(model, dtype_name, p["ids"], p["logit_positions"], rows)
            print(f"{dtype_name} {name}: {len(p['ids'])} tokens in {time.time() - t0:.1f}s; greedy "
                  f"{[s['token'] for s in runs[name]['greedy']][:8]}...", flush=True)
        if args.trace_out:
            os.makedirs(args.trace_out, exist_ok=True)
            trace(model, manifest["prompts"]["short"]["ids"], os.path.join(args.trace_out, f"trace_{dtype_name}.json"))
        bin_name = f"logits_{dtype_name}.bin"
        with open(os.path.join(args.out, bin_name), "wb") as f:
            for r in rows:
                f.write(r)
        manifest["runs"][dtype_name] = {"logits_file": bin_name, "logits_dtype": "bf16" if dtype_name == "bf16" else "f32",
                                        "vocab": model.config.vocab_size, "prompts": runs}
        del model
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
