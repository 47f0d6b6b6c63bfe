#!/usr/bin/env python3
"""Writes tests/fixtures/chat/qwen35_chat_cases.json: conversations rendered with the Qwen3.5 chat
template by transformers' own apply_chat_template, for the C++ renderer (src/tokenizer/chat.cpp) to
match byte for byte.

Each case covers one or more branches of the template (see the `covers` field); the cases that fail
in transformers are recorded with the error instead of a rendering. The file also holds two tables
for the Python-compatibility helpers the renderer uses (src/tokenizer/json_py.h): Python's repr of
random and special floats, and the code points str.strip() removes.

Needs transformers and jinja2 (no torch), e.g.
    python3 -m venv VENV && VENV/bin/pip install transformers jinja2
    VENV/bin/python tools/chat/make_chat_fixtures.py

usage: make_chat_fixtures.py [--tokenizer DIR] [--out FILE]
"""
import argparse
import hashlib
import json
import math
import os
import platform
import random
import struct
import sys

import jinja2
import transformers
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ---------------------------------------------------------------------------------------------
# Building blocks

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name, e.g. 東京 or Paris."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

# Every JSON type, in an order that is not sorted (json.dumps keeps insertion order).
ODD_TOOL = {
    "type": "function",
    "function": {
        "name": "odd_tool_ü",
        "description": "Quotes \" and backslashes \\ and a tab\t, a newline\n, a bell \u0007, DEL \u007f, "
                       "CJK 漢字, emoji 🦙, U+2028 \u2028, NBSP \u00a0 and a lone </tools> tag",
        "parameters": {
            "zeta": {"type": "number", "minimum": 0.5, "maximum": 1e+16, "default": 1.0, "step": 1e-05,
                     "tiny": 5e-324, "neg": -2.5, "negzero": -0.0, "big": 1.7976931348623157e+308},
            "alpha": {"type": "integer", "minimum": -3, "maximum": 12345678901234567, "default": 0},
            "flags": [True, False, None],
            "empty_object": {},
            "empty_list": [],
            "nested": {"b": {"a": [1, [2, {"c": "d"}]]}},
        },
    },
}

BARE_TOOL = {"name": "search", "description": "A tool given without the function wrapper.",
             "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def user(content):
    return {"role": "user", "content": content}


def assistant(content, **extra):
    return {"role": "assistant", "content": content, **extra}


def system(content):
    return {"role": "system", "content": content}


def tool(content):
    return {"role": "tool", "content": content}


def call(name, arguments, wrapper=True, **extra):
    body = {"name": name, "arguments": arguments}
    return {"type": "function", "id": f"call_{name}", "function": body, **extra} if wrapper else body


ALL_TYPES_ARGS = {
    "text": "Paris, France",
    "multiline": "  line one\nline two\n",
    "unicode": "東京 🦙 \"quoted\" back\\slash",
    "empty": "",
    "int": 42,
    "negative": -7,
    "zero": 0,
    "big_int": 12345678901234567890,
    "float": 0.1,
    "float_whole": 1.0,
    "float_small": 1e-05,
    "float_exp": 1e+16,
    "float_fixed": 1234567890123456.0,
    "float_neg_zero": -0.0,
    "float_max": 1.7976931348623157e+308,
    "float_third": 1 / 3,
    "true": True,
    "false": False,
    "null": None,
    "object": {"z": 1, "a": [1.0, "二", None, False], "nested": {"deep": {}}},
    "list": [1, 2.5, "three", True, None, {"k": "v"}, []],
    "empty_object": {},
    "empty_list": [],
}

# ---------------------------------------------------------------------------------------------
# The cases. Each: name, covers (the template branches it exercises), messages, tools, options,
# and for cases that fail outside the template's raise_exception calls, `cpp_error` (what the C++
# error must say).


def cases():
    c = []

    def add(name, covers, messages, tools=None, cpp_error=None, **options):
        opts = {"add_generation_prompt": options.pop("add_generation_prompt", True)}
        opts.update(options)
        case = {"name": name, "covers": covers, "messages": messages, "tools": tools, "options": opts}
        if cpp_error:
            case["cpp_error"] = cpp_error
        c.append(case)

    # --- generation prompt and thinking switch
    add("user_only", "one user turn; add_generation_prompt; enable_thinking undefined",
        [user("Hello!")])
    add("no_generation_prompt", "add_generation_prompt false", [user("Hello!")], add_generation_prompt=False)
    add("thinking_false", "enable_thinking false: empty think block in the prompt",
        [user("Hello!")], enable_thinking=False)
    add("thinking_true", "enable_thinking true: open think block", [user("Hello!")], enable_thinking=True)
    add("thinking_false_no_prompt", "enable_thinking false without a generation prompt",
        [user("Hi"), assistant("Hello.")], enable_thinking=False, add_generation_prompt=False)

    # --- system message
    add("system_plain", "system string, no tools", [system("You are a helpful assistant."), user("Hi")])
    add("system_trimmed", "system content trimmed (spaces, newlines, tabs, U+3000, NBSP)",
        [system(" \n\t\u3000 Be brief.\n\n \u00a0"), user("Hi")])
    add("system_empty", "empty system without tools still renders a system turn", [system(""), user("Hi")])
    add("system_none", "system content null (dropped by transformers, template renders '')",
        [system(None), user("Hi")])
    add("system_parts", "system content as a list of text parts",
        [system([{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two.\n"}]),
         user("Hi")])

    # --- tools header
    add("tools_no_system", "tools without a system message", [user("Weather in Paris?")], tools=[WEATHER_TOOL])
    add("tools_with_system", "tools plus a system message appended after the instructions",
        [system("  You are a weather bot.  \n"), user("Weather in Paris?")], tools=[WEATHER_TOOL])
    add("tools_blank_system", "tools with a system message that trims to empty: nothing appended",
        [system(" \n "), user("Hi")], tools=[WEATHER_TOOL])
    add("tools_system_parts", "tools with a system message given as text parts",
        [system([{"type": "text", "text": "\nRule 1."}, {"text": " Rule 2.\n"}]), user("Hi")],
        tools=[WEATHER_TOOL, BARE_TOOL])
    add("tools_every_json_type", "tool | tojson: key order kept, ', '/': ' separators, raw unicode, "
        "escapes, floats as Python repr, ints, bools, null, empty containers",
        [user("Use the odd tool.")], tools=[ODD_TOOL, WEATHER_TOOL])
    add("tools_empty_list", "tools = []: falsy, no tools header", [system("S"), user("Hi")], tools=[])

    # --- content forms
    add("unicode_content", "CJK and emoji in user and assistant content",
        [user("你好，世界 🌍! Ça va? Привет"), assistant("こんにちは 👋"), user("🦙🦙 漢字")])
    add("whitespace_trim", "user content trimmed like str.strip(): ASCII, U+3000, NBSP, U+2028 go; "
        "U+200B and U+FEFF stay",
        [user("\n\n  \u3000\u00a0Hello \t\n\u2028"), assistant("\u200b answer \ufeff"), user(" \u0085q\u001f ")])
    add("content_none_absent", "content null and absent render as ''",
        [user("Q1"), {"role": "assistant"}, user("Q2"), assistant(None)], add_generation_prompt=False)
    add("content_parts_text_kinds", "text items with and without type, text null and number "
        "(rendered the way Jinja prints them)",
        [user([{"type": "text", "text": "a"}, {"text": "b"}, {"type": "text", "text": None},
               {"type": "text", "text": 7}, {"type": "text", "text": 2.50}, {"type": "text", "text": True}])])
    add("vision_placeholders", "image / image_url / type image / video / type video placeholders, no ids",
        [user([{"type": "image", "image": "a.png"}, {"type": "text", "text": "What is this?"},
               {"image_url": {"url": "http://x/y.png"}}, {"type": "image"},
               {"type": "video", "video": "v.mp4"}, {"video": "w.mp4"}]),
         assistant("A cat."), user([{"type": "video"}, {"type": "text", "text": "And this?"}])])
    add("vision_ids", "add_vision_id: pictures and videos numbered across the whole conversation",
        [user([{"type": "image", "image": "a.png"}, {"type": "image_url", "image_url": "b"},
               {"type": "text", "text": "Compare."}, {"type": "video", "video": "v.mp4"}]),
         assistant([{"type": "text", "text": "They differ."}]),
         user([{"type": "text", "text": "Now this: "}, {"type": "image", "image": "c.png"},
               {"type": "video"}])],
        add_vision_id=True)
    add("vision_first_key_wins", "an item with both image and text keys is an image; video beats text",
        [user([{"type": "text", "image": "x", "text": "ignored"}, {"video": "v", "text": "ignored too"},
               {"type": "text", "text": "kept"}])])

    # --- assistant turns, think blocks, last query index
    add("multi_turn_history", "assistant before the last query: no think block, reasoning dropped",
        [system("S"), user("Q1"), assistant("A1", reasoning_content="R1"), user("Q2")])
    add("assistant_after_query_reasoning", "assistant after the last query with reasoning_content (trimmed)",
        [user("Q"), assistant("  The answer.\n", reasoning_content="\n  Let me think.\n\n")],
        add_generation_prompt=False)
    add("assistant_after_query_no_reasoning", "assistant after the last query without reasoning: empty think",
        [user("Q"), assistant("The answer.")], add_generation_prompt=False)
    add("assistant_after_query_empty_reasoning", "reasoning_content '' is a string: empty think, content not split",
        [user("Q"), assistant("<think>inner</think>out", reasoning_content="")], add_generation_prompt=False)
    add("think_in_content_after_query", "<think>..</think> in content split out, '\\n' stripped around",
        [user("Q"), assistant("<think>\n\nStep 1.\nStep 2.\n\n</think>\n\n  Final answer.")],
        add_generation_prompt=False)
    add("think_in_content_before_query", "<think> in content of an earlier turn: reasoning dropped",
        [user("Q1"), assistant("<think>\nold reasoning\n</think>\n\nA1"), user("Q2")])
    add("think_close_only", "only </think> in content: everything before it is reasoning",
        [user("Q"), assistant("reasoning without an opening tag</think>answer")], add_generation_prompt=False)
    add("think_many_tags", "several <think>/</think>: reasoning is after the last <think> before the first "
        "</think>, content after the last </think>",
        [user("Q"), assistant("pre<think>a<think>\nb\n</think>mid</think>\n\ntail\n")],
        add_generation_prompt=False)
    add("think_only_reasoning", "content that is only a think block: empty content",
        [user("Q"), assistant("<think>just thinking</think>")], add_generation_prompt=False)
    add("reasoning_and_think_in_content", "reasoning_content given: content kept verbatim with its tags",
        [user("Q"), assistant("<think>x</think>y", reasoning_content="R")], add_generation_prompt=False)
    add("reasoning_alias_reasoning", "transformers copies `reasoning` into reasoning_content",
        [user("Q"), assistant("A", reasoning=" via reasoning ")], add_generation_prompt=False)
    add("reasoning_alias_thinking", "transformers copies `thinking` into reasoning_content; "
        "reasoning_content wins over both",
        [user("Q1"), assistant("A1", thinking="via thinking"), user("Q2"),
         assistant("A2", thinking="ignored", reasoning_content="kept")], add_generation_prompt=False)
    add("reasoning_not_string", "reasoning_content not a string: split from content instead",
        [user("Q"), assistant("<think>from content</think>A", reasoning_content=5)], add_generation_prompt=False)
    add("assistant_prefill_style", "conversation ending with an assistant turn, generation prompt on",
        [user("Q"), assistant("partial")], enable_thinking=False)

    # --- tool calls
    add("tool_round_trip", "function wrapper, empty content, tool response, final answer; "
        "multi-step: think blocks after the last real query",
        [system("S"), user("Weather in Paris?"),
         assistant("", tool_calls=[call("get_weather", {"city": "Paris"})]),
         tool('{"temp": 21}'), assistant("It is 21°C.", reasoning_content="Got it.")],
        tools=[WEATHER_TOOL], add_generation_prompt=False)
    add("tool_call_bare", "tool call without the function wrapper",
        [user("Search llamas"), assistant(None, tool_calls=[call("search", {"q": "llamas"}, wrapper=False)]),
         tool("results")],
        tools=[BARE_TOOL])
    add("tool_call_with_content", "non-empty content before the first call: '\\n\\n<tool_call>'",
        [user("Weather?"), assistant("Let me check.",
                                     tool_calls=[call("get_weather", {"city": "Oslo", "unit": "celsius"})])],
        tools=[WEATHER_TOOL], add_generation_prompt=False)
    add("tool_call_whitespace_content", "content that trims to empty before the first call",
        [user("Weather?"), assistant(" \n ", tool_calls=[call("get_weather", {"city": "Oslo"})])],
        add_generation_prompt=False)
    add("tool_call_after_think", "content after a think split decides the separator "
        "(content keeps its spaces; only '\\n' is stripped after </think>)",
        [user("Weather?"), assistant("<think>plan</think>\n  ", tool_calls=[call("get_weather", {"city": "A"})]),
         tool("t1"), assistant("<think>more</think>  Checking B.",
                                tool_calls=[call("get_weather", {"city": "B"})])],
        add_generation_prompt=False)
    add("tool_calls_several", "several calls in one turn: '\\n<tool_call>' between them; "
        "consecutive tool messages grouped in one user turn",
        [user("Weather in A and B, and search C"),
         assistant("", tool_calls=[call("get_weather", {"city": "A"}), call("get_weather", {"city": "B"}),
                                   call("search", {"q": "C"}, wrapper=False)]),
         tool("a"), tool("b"), tool("  c\n"), assistant("Done.")],
        add_generation_prompt=False)
    add("tool_args_every_type", "argument values: strings as-is, scalars via Python str() (True, None, "
        "1.0, 1e-05, 1e+16), mappings and sequences via tojson",
        [user("Call it."), assistant("", tool_calls=[call("odd", ALL_TYPES_ARGS)]), tool("ok")])
    add("tool_args_missing_and_empty", "no arguments key: no parameters; arguments {}: no parameters",
        [user("Go"), assistant("", tool_calls=[{"type": "function", "function": {"name": "noargs"}},
                                               call("emptyargs", {})]), tool("r1"), tool("r2")])
    add("tool_args_outer_ignored", "with a function wrapper, arguments outside it are ignored",
        [user("Go"), assistant("", tool_calls=[{"function": {"name": "f", "arguments": {"x": 1}},
                                                "arguments": {"ignored": True}}])],
        add_generation_prompt=False)
    add("tool_calls_empty_or_mapping", "tool_calls [] and tool_calls as a mapping are both skipped",
        [user("Q1"), assistant("A1", tool_calls=[]), user("Q2"),
         assistant("A2", tool_calls={"name": "f", "arguments": {}})],
        add_generation_prompt=False)
    add("multi_round_tools", "several tool rounds; assistant turns with calls before and after the last query",
        [system("Tools!"), user("First question"),
         assistant("", tool_calls=[call("search", {"q": "one"})]), tool("r1"),
         assistant("Answer one."), user("Second question"),
         assistant("Thinking aloud.", reasoning_content="Need two searches.",
                   tool_calls=[call("search", {"q": "two"})]),
         tool("r2"),
         assistant("", reasoning_content="One more.", tool_calls=[call("search", {"q": "three"})]),
         tool([{"type": "text", "text": "r3 "}, {"type": "image"}]),
         assistant("Answer two.")],
        tools=[BARE_TOOL], enable_thinking=True)
    add("tool_response_in_user", "a user message that is a wrapped tool response is not a query",
        [user("Real query"), assistant("", tool_calls=[call("search", {"q": "x"})]),
         user("\n<tool_response>\nfrom user\n</tool_response>\n"), assistant("Done.", reasoning_content="r")],
        add_generation_prompt=False)
    add("tool_response_prefix_only", "starts with <tool_response> but does not end with it: a real query",
        [user("Q1"), assistant("A1"), user("<tool_response>x</tool_response> but also a question"),
         assistant("A2")], add_generation_prompt=False)
    add("tool_first_message", "a tool message at index 0 has no previous item: no '<|im_start|>user'",
        [tool("orphan"), user("Q")])
    add("tool_last_message", "tool message last: the user turn is closed, generation prompt follows",
        [user("Q"), assistant("", tool_calls=[call("search", {"q": "x"})]), tool("r")])
    add("tool_unicode_names", "unicode in function names, parameter names and values",
        [user("天气"), assistant("", tool_calls=[call("天气", {"城市": "北京", "emoji": "🌧️"})]), tool("雨")])

    # --- errors raised by the template
    add("error_no_messages", "raise: No messages provided. (rendered with the template directly: "
        "apply_chat_template rejects an empty conversation before the template runs)", [])
    add("error_system_not_first", "raise: System message must be at the beginning.",
        [user("Q"), system("late")])
    add("error_system_not_first_with_image", "a late system message is not checked for images: "
        "the position error comes first",
        [user("Q"), system([{"type": "image"}])])
    add("error_unexpected_role", "raise: Unexpected message role.", [user("Q"), {"role": "narrator", "content": "x"}])
    add("error_missing_role", "raise: Unexpected message role. (no role key)", [user("Q"), {"content": "x"}])
    add("error_no_user_query", "raise: No user query found in messages. (no user turn)",
        [system("S"), assistant("A")])
    add("error_only_tool_responses", "raise: No user query found in messages. (user turns are tool responses)",
        [user("<tool_response>\na\n</tool_response>"), tool("b")])
    add("error_system_image", "raise: System message cannot contain images.",
        [system([{"type": "image", "image": "x"}]), user("Q")])
    add("error_system_video_tools", "raise: System message cannot contain videos. (tools header path)",
        [system([{"type": "text", "text": "S"}, {"video": "v"}]), user("Q")], tools=[WEATHER_TOOL])
    add("error_content_mapping", "raise: Unexpected content type. (content is an object)",
        [user({"text": "hi"})])
    add("error_content_number", "raise: Unexpected content type. (content is a number)",
        [user("Q"), assistant(3)])
    add("error_content_bool", "raise: Unexpected content type. (content is a bool)", [user(True)])
    add("error_item_unknown", "raise: Unexpected item type in content.",
        [user([{"type": "audio", "audio": "a.wav"}])])
    add("error_item_string", "raise: Unexpected item type in content. (item is a bare string)",
        [user(["hello"])])
    add("error_order_system_before_content", "errors come in template order: the late system message "
        "(index 1) fails before the bad assistant content (index 2)",
        [user("Q"), system("late"), assistant({"bad": 1})])
    add("error_order_content_in_scan", "a bad user content found by the reverse scan fails before a late "
        "system message", [user("Q"), system("late"), user(5)])

    # --- errors raised by transformers or by Jinja outside raise_exception
    add("error_arguments_string", "tool arguments given as a JSON string: Jinja's |items fails "
        "(TypeError: Can only get item pairs from a mapping.)",
        [user("Q"), assistant("", tool_calls=[call("get_weather", '{"city": "Paris"}')])],
        cpp_error="arguments must be a JSON object")
    add("error_arguments_null", "arguments null: defined, |items fails",
        [user("Q"), assistant("", tool_calls=[call("get_weather", None)])],
        cpp_error="arguments must be a JSON object")
    add("error_tool_call_no_name", "a tool call without a name: Jinja's undefined + string fails",
        [user("Q"), assistant("", tool_calls=[{"function": {"arguments": {}}}])],
        cpp_error="name must be a string")
    add("error_message_not_object", "transformers: Chat messages should be dicts",
        [user("Q"), "just a string"], cpp_error="messages[1] must be a JSON object")
    add("error_tool_not_object", "transformers: Tools should either be a JSON schema, or a callable",
        [user("Q")], tools=["get_weather"], cpp_error="tools[0] must be a JSON object")
    return c


# ---------------------------------------------------------------------------------------------
# Rendering


def render(tok, case):
    opts = dict(case["options"])
    add_generation_prompt = opts.pop("add_generation_prompt")
    if not case["messages"]:
        # apply_chat_template raises ValueError on an empty list before the template runs; the template's
        # own check is reached through the function apply_chat_template delegates to.
        rendered, _ = render_jinja_template(conversations=[case["messages"]], tools=case["tools"],
                                            chat_template=tok.chat_template,
                                            add_generation_prompt=add_generation_prompt, **opts)
        return rendered[0]
    return tok.apply_chat_template(case["messages"], tools=case["tools"], tokenize=False,
                                   add_generation_prompt=add_generation_prompt, **opts)


def run_case(tok, case):
    # Render what the C++ test will read: the case after a JSON round trip.
    case = json.loads(json.dumps(case, ensure_ascii=False))
    cpp_error = case.pop("cpp_error", None)
    try:
        out = render(tok, case)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is not jinja2.exceptions.TemplateError:  # UndefinedError, TemplateSyntaxError, ...
            if not cpp_error:
                sys.exit(f"case {case['name']}: unexpected {type(e).__name__}: {e}")
            case["error"] = cpp_error
        else:  # raise_exception
            case["error"] = str(e)
        case["python_error"] = f"{type(e).__name__}: {e}"
        return case
    except Exception as e:  # noqa: BLE001 - recorded, checked below
        if not cpp_error:
            sys.exit(f"case {case['name']}: unexpected {type(e).__name__}: {e}")
        case["error"] = cpp_error
        case["python_error"] = f"{type(e).__name__}: {e}"
        return case
    if cpp_error:
        sys.exit(f"case {case['name']}: expected an error ({cpp_error}) but transformers rendered {out!r}")
    if case["name"].startswith("error_"):
        sys.exit(f"case {case['name']}: expected an error but transformers rendered {out!r}")
    case["expected"] = out
    return case


def float_reprs(n=4000, seed=1234):
    rng = random.Random(seed)
    values = [0.0, -0.0, 1.0, -1.0, 0.1, 0.2 + 0.1, 1 / 3, 2 / 3, 1e-05, 1e-4, 0.0001234, 1e16, 1e15,
              9999999999999998.0, 1234567890123456.0, 12345678901234567.0, 1e22, 1e23, 5e-324, 2.2250738585072014e-308,
              1.7976931348623157e308, 123456789.0, 1.5, 100.0, 1e100, 123e-20, 0.5, 4.35, 2.675, 9.995]
    values += [-v for v in values if v]
    while len(values) < n:
        kind = rng.random()
        if kind < 0.5:  # any finite bit pattern
            (v,) = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))
            if not math.isfinite(v):
                continue
        elif kind < 0.8:  # ordinary magnitudes, where fixed and exponent forms meet
            v = rng.uniform(-1, 1) * 10.0 ** rng.randint(-8, 20)
        else:  # short decimals
            v = round(rng.uniform(-1000, 1000), rng.randint(0, 6))
        values.append(v)
    return [repr(v) for v in values]


def python_whitespace():
    return [cp for cp in range(0x110000) if chr(cp).strip() == ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, ".deps", "qwen35-tokenizer"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "chat", "qwen35_chat_cases.json"))
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    template_path = os.path.join(args.tokenizer, "chat_template.jinja")
    with open(template_path, encoding="utf-8") as f:
        if f.read() != tok.chat_template:
            sys.exit(f"the tokenizer's chat template differs from {template_path}")
    rendered = [run_case(tok, case) for case in cases()]
    names = [case["name"] for case in rendered]
    if len(set(names)) != len(names):
        sys.exit("duplicate case names")
    doc = {
        "comment": "Written by tools/chat/make_chat_fixtures.py; do not edit. Each case is rendered by "
                   "transformers' apply_chat_template with the Qwen3.5 template; `expected` is the rendering, "
                   "`error` a text the C++ error message must contain (the template's raise_exception "
                   "message, or for failures outside the template the C++ wording), `python_error` what "
                   "transformers raised. `float_reprs`: Python repr() of floats; `python_whitespace`: the "
                   "code points str.strip() removes.",
        "versions": {
            "transformers": transformers.__version__,
            "jinja2": jinja2.__version__,
            "python": platform.python_version(),
            "chat_template_sha256": hashlib.sha256(tok.chat_template.encode("utf-8")).hexdigest(),
        },
        "cases": rendered,
        "float_reprs": float_reprs(),
        "python_whitespace": python_whitespace(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in case for case in rendered)
    print(f"{args.out}: {len(rendered)} cases ({len(rendered) - errors} renderings, {errors} errors), "
          f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
