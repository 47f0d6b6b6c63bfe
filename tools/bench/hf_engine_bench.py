#!/usr/bin/env python3
"""Hugging Face transformers on the same model directory and GPU as bench/engine_bench.cpp, for the
side-by-side of the GPU round: prefill tokens/s for (length x sequences) batches and decode tokens/s
at several batch sizes, bf16, sdpa attention, whatever GDN kernels this transformers install has
(recorded in the report). Wall time around whole forward passes ending in a CUDA synchronisation,
median of several runs, as the engine bench measures.

usage: hf_engine_bench.py --model DIR [--json OUT] [--decode-steps N]
"""
import argparse
import importlib.util
import json
import statistics
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--json")
    ap.add_argument("--decode-steps", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.cuda().eval()
    load_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    report = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "fla_importable": importlib.util.find_spec("fla") is not None,
        "causal_conv1d_importable": importlib.util.find_spec("causal_conv1d") is not None,
        "load_and_upload_s": load_s,
        "parameters": params,
        "prefill": [],
        "decode": [],
    }
    vocab = model.config.vocab_size
    print(f"{'prefill':12} {'tokens/s':>12} {'ms':>10}")
    with torch.inference_mode():
        for length, seqs in [(128, 8), (2048, 1), (8192, 1), (32768, 1)]:
            runs = []
            try:
                for r in range(3):
                    ids = torch.randint(0, vocab - 300, (seqs, length), device="cuda")
                    s, _ = timed(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))
                    if r > 0 or length >= 8192:  # the first short run warms up
                        runs.append(s)
                s = statistics.median(runs)
                print(f"{length:5d}x{seqs:<6d} {length * seqs / s:12.0f} {s * 1e3:10.2f}")
                report["prefill"].append({"len": length, "seqs": seqs, "tokens_per_s": length * seqs / s,
                                          "median_ms": s * 1e3, "runs": len(runs)})
            except torch.OutOfMemoryError as e:
                print(f"{length:5d}x{seqs:<6d} out of memory")
                report["prefill"].append({"len": length, "seqs": seqs, "error": "out of memory: " + str(e)[:200]})
                torch.cuda.empty_cache()
        print(f"\n{'decode':8} {'tokens/s':>12} {'ms/step':>10}")
        for batch in (1, 8, 64):
            ids = torch.randint(0, vocab - 300, (batch, 128), device="cuda")
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            steps = []
            for step in range(args.decode_steps + 2):
                s, out = timed(lambda: model(input_ids=nxt, past_key_values=cache, use_cache=True))
                cache = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                if step >= 2:
                    steps.append(s)
            s = statistics.median(steps)
            print(f"{batch:<8d} {batch / s:12.1f} {s * 1e3:10.2f}")
            report["decode"].append({"batch": batch, "tokens_per_s": batch / s, "median_ms_per_step": s * 1e3,
                                     "steps": len(steps)})
    report["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(f"\npeak GPU memory (torch allocator): {report['peak_gpu_gib']:.2f} GiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
