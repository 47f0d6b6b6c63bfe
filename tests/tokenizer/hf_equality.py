#!/usr/bin/env python3
"""Checks deltainfer's tokenizer against Hugging Face `tokenizers` on >= 10,000 generated strings.

For every string of a deterministic corpus (English prose, C++/Python/JSON source, CJK, Arabic,
Devanagari, Thai, emoji with ZWJ sequences, skin tones and flags, combining marks and Zalgo text,
runs of whitespace and \\r\\n, digits, punctuation runs, contractions in every case, the text of every
added token alone and inside text, mixtures, random code points from many Unicode blocks, the empty
string) and for both parse_special=true and false (false is tokenizers' encode_special_tokens=True),
it compares:
  - the ids, exactly;
  - decode(ids) with and without skip_special against tokenizers' decode;
  - decode(encode(x)) against unicodedata.normalize('NFC', x).
It also decodes random id sequences (many of them invalid UTF-8) and compares decode() and the
concatenated StreamDecoder output with tokenizers' decode.

Ours runs through the batch driver di_tokenize_batch (tests/tokenizer/tokenize_batch.cpp). tokenizers
is installed once into a venv (--venv, in the build tree) and reused. Prints a summary and exits 1
on any mismatch.

usage: hf_equality.py --batch PATH/di_tokenize_batch --tokenizer-dir DIR --venv DIR [--seed N]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

TOKENIZERS_VERSION = "0.23.3"  # the newest release when this test was written
DEFAULT_SEED = 20250601


# --------------------------------------------------------------------------------------------------
# The venv with tokenizers.

def ensure_venv(venv):
    """Re-executes this script with the venv's Python, creating the venv and installing tokenizers
    the first time."""
    py = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, f".tokenizers-{TOKENIZERS_VERSION}")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv) and os.path.exists(stamp):
        return
    if not os.path.exists(stamp):
        if not os.path.exists(py):
            print(f"hf_equality: creating a venv in {venv}", flush=True)
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        print(f"hf_equality: installing tokenizers=={TOKENIZERS_VERSION} into it", flush=True)
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            f"tokenizers=={TOKENIZERS_VERSION}"])
        if r.returncode != 0:
            sys.exit(f"hf_equality: pip could not install tokenizers=={TOKENIZERS_VERSION} into {venv}")
        open(stamp, "w").close()
    os.execv(py, [py, os.path.abspath(sys.argv[0])] + sys.argv[1:])  # the running script


# --------------------------------------------------------------------------------------------------
# The corpus. Every generator takes a random.Random and returns one string.

WORDS = """the of and to in is was for on that with as by at from his her it an were are which this
be or has had not but their they also one its first new been after who two more other when time
people year would into may only made some state city over between such world during most where while
many these during under government system company national school used number later known called
including well since part both however three university american family through until early
although music began several district population being against before because same those second
north each area series released south film around work including although century became
language played history life still four down group team few game high public small large major
international station following form general river west member another main found english season
quick brown fox jumps lazy dog zebra question knowledge Xylophone Quixotic JavaScript HTTP
don't can't won't isn't aren't I'm you're we've they'll she'd it's O'Neill rock'n'roll""".split()

NAMES = ["Alice", "Bob", "Chen", "Dmitri", "Émile", "Zoë", "Søren", "François", "Łukasz", "Ngũgĩ",
         "İlkay", "Þórr", "Ærø", "Mañana", "Nguyễn", "Straße", "façade", "naïve", "coöperate"]


def english(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        n = rng.randint(3, 18)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), rng.choice(NAMES))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 10 ** rng.randint(1, 9))))
        s = " ".join(words)
        s = s[0].upper() + s[1:]
        if rng.random() < 0.2:
            s = s.upper()
        if rng.random() < 0.3:
            i = rng.randrange(len(s))
            s = s[:i] + rng.choice([", ", "; ", " (", ") ", " - ", " — ", "\u2019s ", "'s ", " \"", "\" "]) + s[i:]
        out.append(s + rng.choice([".", "!", "?", "...", ":", "", ".\"", "?!"]))
    return rng.choice([" ", "  ", "\n", "\n\n", " \n"]).join(out)


CPP = [
    "#include <vector>\n#include \"core/error.h\"\n\nnamespace di {{\n\ntemplate <typename T>\nT {f}(const std::vector<T>& {v}) {{\n  T acc{{}};\n  for (size_t i = 0; i < {v}.size(); ++i) acc += {v}[i] * {n};\n  return acc;\n}}\n\n}}  // namespace di\n",
    "int {f}(int argc, char** argv) {{\n\tif (argc < {n}) {{\n\t\tstd::fprintf(stderr, \"usage: %s <{v}>\\n\", argv[0]);\n\t\treturn 2;\n\t}}\n\treturn 0;\n}}\n",
    "auto {v} = std::make_unique<std::map<std::string, std::pair<int, double>>>();\n{v}->emplace(\"{f}\", std::make_pair({n}, {n}.5e-3));\n",
    "struct {F} {{\n  uint32_t {v}_ = 0x{n:X}u;  // bits\n  bool operator<(const {F}& o) const noexcept {{ return {v}_ < o.{v}_; }}\n}};\n",
    "#define {F}_MAX(a, b) ((a) > (b) ? (a) : (b))\nstatic_assert(sizeof(void*) == {n} || {F}_MAX(1, 2) != 0, \"x\");\n",
]
PYTHON = [
    "def {f}({v}, *args, **kwargs):\n    \"\"\"Return the {v}.\"\"\"\n    if not {v}:\n        raise ValueError(f\"bad {{{v}!r}}\")\n    return [x ** {n} for x in {v} if x % 2 == 0]\n",
    "class {F}(object):\n    def __init__(self, {v}={n}):\n        self.{v} = {v}  # type: int\n\n    def __repr__(self):\n        return '%s(%d)' % (type(self).__name__, self.{v})\n",
    "import os, sys\n\nfor {v} in range({n}):\n\tprint({v}, end='\\t')\nelse:\n    sys.exit(0)\n",
    "{v} = {{'a': [1, 2, 3], 'b': None, \"c\": {n}.0}}\nlambda x: x @ {v}['a'] >> 2 != ~x\n",
    "async def {f}():\n    await asyncio.sleep(0.{n})\n    return {{k: v for k, v in zip('abc', range(3))}}\n",
]
JSONS = [
    "{{\"{v}\": {n}, \"{f}\": [true, false, null], \"nested\": {{\"x\": -{n}.25e+10, \"s\": \"a\\\\\"b\"}}}}",
    "[\n  {{\n    \"id\": {n},\n    \"name\": \"{F}\",\n    \"tags\": [\"{v}\", \"{f}\"]\n  }}\n]\n",
    "{{\"model\":{{\"type\":\"BPE\",\"vocab\":{{\"{v}\":{n}}},\"merges\":[[\"{f}\",\"{v}\"]]}}}}",
]
IDENTS = ["x", "value", "buffer_size", "kMaxTokens", "nBytes", "__init__", "_tmp", "HTTPServer",
          "getUserById", "snake_case_name", "i", "ÿ", "données", "变量", "αβγ", "m_data"]


def code(rng):
    tmpl = rng.choice(CPP + PYTHON + JSONS)
    v, f = rng.choice(IDENTS), rng.choice(IDENTS)
    s = tmpl.format(v=v, f=f, F=f[:1].upper() + f[1:], n=rng.randint(0, 99999))
    if rng.random() < 0.3:
        s = s.replace("    ", "\t") if rng.random() < 0.5 else s.replace("\n", "\r\n")
    return s


def rand_range(rng, lo, hi, n):
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def cjk(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(8)
        n = rng.randint(1, 20)
        if kind == 0:
            parts.append(rand_range(rng, 0x4E00, 0x9FFF, n))
        elif kind == 1:
            parts.append(rng.choice(["生活的真谛是", "我爱北京天安门", "今天天气很好，我们去公园吧。", "人工智能",
                                     "東京都", "日本語のテキスト", "こんにちは、世界！", "カタカナ", "한국어 텍스트입니다",
                                     "안녕하세요", "「引用」", "《书名》", "１２３４５", "ｆｕｌｌｗｉｄｔｈ"]))
        elif kind == 2:
            parts.append(rand_range(rng, 0x3041, 0x3096, n))
        elif kind == 3:
            parts.append(rand_range(rng, 0x30A1, 0x30FA, n))
        elif kind == 4:
            parts.append(rand_range(rng, 0xAC00, 0xD7A3, n))
        elif kind == 5:  # conjoining jamo, which NFC composes into syllables
            parts.append("".join(chr(rng.randint(0x1100, 0x1112)) + chr(rng.randint(0x1161, 0x1175)) +
                                 (chr(rng.randint(0x11A8, 0x11C2)) if rng.random() < 0.5 else "")
                                 for _ in range(rng.randint(1, 5))))
        elif kind == 6:
            parts.append(rand_range(rng, 0x3000, 0x303F, rng.randint(1, 4)))
        else:
            parts.append(rand_range(rng, 0x20000, 0x2A6DF, rng.randint(1, 4)))
        parts.append(rng.choice(["", "", " ", "\n", "，", "。", " abc ", "2024年"]))
    return "".join(parts)


ARABIC = ["مرحبا بالعالم", "اللغة العربية جميلة", "بِسْمِ ٱللَّٰهِ ٱلرَّحْمَٰنِ ٱلرَّحِيمِ", "كتاب", "٠١٢٣٤٥٦٧٨٩",
          "السَّلَامُ عَلَيْكُمْ", "ﷺ", "ﻻ", "فارسی: سلام دنیا", "اردو"]
HINDI = ["नमस्ते दुनिया", "हिन्दी भाषा", "क्षत्रिय", "ज़िंदगी", "०१२३४५६७८९", "श्री", "क़", "ड़", "अँधेरा",
         "मैं ठीक हूँ।", "বাংলা ভাষা", "ਪੰਜਾਬੀ", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ଓଡ଼ିଆ"]
THAI = ["สวัสดีครับ", "ภาษาไทย", "ปี", "ด", "น้ำ", "กรุงเทพมหานคร", "๑๒๓", "ເມືອງລາວ", "ខ្មែរ", "မြန်မာ"]


def rtl_indic_thai(rng):
    pools = [ARABIC, HINDI, THAI]
    parts = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.6:
            parts.append(rng.choice(rng.choice(pools)))
        elif r < 0.75:
            parts.append(rand_range(rng, 0x0600, 0x06FF, rng.randint(1, 12)))
        elif r < 0.9:
            parts.append(rand_range(rng, 0x0900, 0x097F, rng.randint(1, 12)))
        else:
            parts.append(rand_range(rng, 0x0E00, 0x0E7F, rng.randint(1, 12)))
        parts.append(rng.choice([" ", " ", "\n", "، ", ". ", "  ", " 42 ", " abc "]))
    return "".join(parts)


SKIN = [chr(c) for c in range(0x1F3FB, 0x1F400)]
ZWJ = "\u200d"
EMOJI = ["😊", "😀", "👍", "❤️", "❤", "🔥", "🎉", "🚀", "🤖", "🧑‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🏳️‍🌈", "🏴‍☠️",
         "🇺🇸", "🇯🇵", "🇩🇪", "🇺🇳", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "©️", "™", "☺️", "✌🏿", "🤷🏽‍♀️", "👋🏻",
         "🫠", "🫶🏾", "🥲", "🐈‍⬛", "⌚", "⭐", "🀄", "🃏", "🆗", "🈚"]


def emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.5:
            parts.append(rng.choice(EMOJI))
        elif r < 0.65:  # random person + skin tone (+ ZWJ sequence)
            e = chr(rng.choice([0x1F44B, 0x1F44D, 0x1F64F, 0x1F9D1, 0x1F468, 0x1F469, 0x270C])) + rng.choice(SKIN)
            if rng.random() < 0.4:
                e += ZWJ + rng.choice(["💻", "🔬", "🎨", "🚀", "⚕️", "♂️", "♀️"])
            parts.append(e)
        elif r < 0.75:  # a flag from two regional indicators
            parts.append(chr(0x1F1E6 + rng.randrange(26)) + chr(0x1F1E6 + rng.randrange(26)))
        elif r < 0.9:
            parts.append(rand_range(rng, 0x1F300, 0x1FAFF, rng.randint(1, 5)))
        else:
            parts.append(rng.choice(["\ufe0f", "\ufe0e", ZWJ, "\u20e3"]))
        parts.append(rng.choice(["", "", " ", "  ", "\n", " hi ", "!", "😊"]))
    return "".join(parts)


def combining(rng):
    r = rng.random()
    if r < 0.25:  # decomposed letters
        base = rng.choice(["e", "a", "o", "u", "n", "c", "A", "E", "I", "s", "z", "ɛ", "α", "ω", "и", "ا"])
        marks = "".join(chr(rng.choice([0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x327, 0x328, 0x323, 0x307,
                                        0x331, 0x345, 0x65E, 0x670]))
                        for _ in range(rng.randint(1, 3)))
        word = "".join(rng.choice(["caf", "na", "fals", "r", "x", ""]) + base + marks for _ in range(rng.randint(1, 4)))
        return rng.choice(["", "the ", " ", "1", "'"]) + word + rng.choice(["", " ok", ".", "\n", "5"])
    if r < 0.45:  # Zalgo
        out = []
        for ch in rng.choice(["ZALGO", "he comes", "tony the pony", "Ṱ̺̺̕o͞", "text", "zalgo 123"]):
            out.append(ch + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(0, 12))))
        return "".join(out)
    if r < 0.55:  # marks with no base: at the start, after spaces, digits, punctuation
        m = "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 5)))
        return rng.choice(["", " ", "  ", "\n", "7", "!", "'", "\t", "a "]) + m + rng.choice(["", "x", " ", "9", "s"])
    if r < 0.7:  # canonical reordering, singletons, exclusions, compatibility characters
        return rng.choice(["a\u0307\u0323", "a\u0323\u0307", "q\u0307\u0323", "\u212b", "\u2126", "\u212a", "Å",
                           "\u0958", "\u0915\u093c", "\u1e0b\u0323", "\u1e0d\u0307", "ﬁ", "①", "㍻", "ｶ", "\u00bd",
                           "\u0344", "\u0340", "\u1f71", "\u0387", "\u037e", "\u2000", "\u2001", "\u0f73",
                           "\u0b47\u0b3e", "\u0dd9\u0dcf", "\u1025\u102e", "\u0CC6\u0CC2\u0CD5",
                           "Ω\u0301", "e\u0301\u0301", "\u05d0\u05b7\u05bc", "\u0627\u0653\u0654"]) * rng.randint(1, 3)
    if r < 0.85:  # letters with Unicode case folding corner cases next to apostrophes
        return rng.choice(["'ſ", "'K", "'ß", "'ﬆ", "'İ", "'ı", "'Σ", "'ς", "'ǅ", "'ʼ", "ǅ'LL", "'ﬀ"]) + rng.choice(["", " ", "x"])
    return rand_range(rng, 0x0300, 0x036F, rng.randint(1, 30)) + rand_range(rng, 0x1AB0, 0x1AFF, rng.randint(0, 5)) + \
        rand_range(rng, 0x20D0, 0x20FF, rng.randint(0, 5))


WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u2003", "\u3000", "\u200b", "\u2028", "\u2029",
      "\u0085", "\u000b", "\u000c", "\u1680", "\u180e", "\u202f", "\u205f", "\ufeff", "\u2009", "\u001c"]


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            parts.append("".join(rng.choice(WS[:7]) for _ in range(rng.randint(1, 40))))
        elif r < 0.55:
            parts.append(rng.choice([" ", "\t", "\n", "\r\n"]) * rng.randint(1, 300))
        elif r < 0.7:
            parts.append("".join(rng.choice(WS) for _ in range(rng.randint(1, 8))))
        else:
            parts.append(rng.choice(["Hello", "world", "x", "1", "!", "é", "中", "😊", " Hello", "\tindent", "-"]))
    return "".join(parts)


def digits(rng):
    r = rng.random()
    if r < 0.3:
        return str(rng.randint(0, 10 ** rng.randint(1, 60)))
    if r < 0.5:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 12)}f}" + rng.choice(["", "%", " kg", "e-5", "px"])
    if r < 0.65:
        return rng.choice(["3.14159", "1,000,000", "0x7FFFFFFF", "2024-06-01T12:34:56Z", "+1 (555) 010-9999",
                           "192.168.0.1", "v1.2.3-rc4", "1e-9", "−42", "1/2", "10^9", "Ⅻ", "²³", "½¼", "①②",
                           "٣٤٥", "१२३", "๑๒๓", "１２３", "𝟙𝟚𝟛", "߀߁", "⁰¹"]) * rng.randint(1, 3)
    if r < 0.8:
        return " ".join(str(rng.randint(0, 999999)) for _ in range(rng.randint(2, 12)))
    return "".join(rng.choice("0123456789 ,.-+") for _ in range(rng.randint(1, 80)))


PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "–", "«", "»", "„", "“", "”", "‘", "’", "¿",
                                                      "¡", "•", "·", "§", "¶", "†", "‡", "※", "‰", "′", "″"]


def punctuation(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.5:
            parts.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 30))))
        elif r < 0.7:
            parts.append(rng.choice(["...", "!!!", "???", "?!?!", "-->", "<--", "===", "```", "~~~", "***", "---",
                                     "||", "&&", "::", "->", "=>", "/*", "*/", "//", "#!", "<<", ">>", "[]", "{}"]) *
                         rng.randint(1, 20))
        else:
            parts.append(rng.choice(["word", " word", "a", "\n", "\r\n", "  ", "42", "é"]))
        parts.append(rng.choice(["", "\n", "\n\n", " ", "\r\n"]))
    return "".join(parts)


CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]


def contraction(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        c = rng.choice(CONTRACTIONS)
        c = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in c)
        if rng.random() < 0.2:
            c = c.replace("'", rng.choice(["’", "‘", "`", "''"]))
        parts.append(rng.choice(["", "I", "you", "WE", "It", "he", "x", "1", " ", "Mc", "rock'n"]) + c +
                     rng.choice(["", " ", "s", "ve", "x", ".", "\n", "'s", "ll", "123"]))
    return rng.choice(["", " "]).join(parts)


def added_tokens_text(rng, added):
    r = rng.random()
    t = rng.choice(added)
    if r < 0.2:
        return t
    if r < 0.5:
        return "".join(rng.choice([rng.choice(added), rng.choice(added), " hi ", "\n", "user", "x", "", "<", ">",
                                   "|", "<|", "|>", "think", "  "]) for _ in range(rng.randint(2, 10)))
    if r < 0.65:  # partial, overlapping and nested forms
        a, b = rng.choice(added), rng.choice(added)
        return rng.choice([a[:-1], a[1:], a[:-1] + b, "<" + a, a + ">", a[:len(a) // 2] + b + a[len(a) // 2:],
                           a + a, "<<" + a + ">>", a.upper(), " " + a + " "])
    if r < 0.85:
        return english(rng)[:60] + t + rng.choice(["", "\n", " ", "x"]) + english(rng)[:40]
    return (f"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n{english(rng)[:80]}<|im_end|>\n"
            f"<|im_start|>assistant\n<think>\n{english(rng)[:60]}\n</think>\n\n<tool_call>\n{{\"name\": \"f\"}}\n"
            "</tool_call><|im_end|>")


BLOCKS = [
    (0x0000, 0x007F), (0x0080, 0x00FF), (0x0100, 0x024F), (0x0250, 0x02FF), (0x0300, 0x036F), (0x0370, 0x03FF),
    (0x0400, 0x04FF), (0x0530, 0x058F), (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0700, 0x074F), (0x0780, 0x07BF),
    (0x0900, 0x097F), (0x0980, 0x09FF), (0x0B80, 0x0BFF), (0x0D00, 0x0D7F), (0x0E00, 0x0E7F), (0x0E80, 0x0EFF),
    (0x0F00, 0x0FFF), (0x1000, 0x109F), (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1200, 0x137F), (0x13A0, 0x13FF),
    (0x1680, 0x169F), (0x16A0, 0x16FF), (0x1780, 0x17FF), (0x1800, 0x18AF), (0x1AB0, 0x1AFF), (0x1D00, 0x1DBF),
    (0x1DC0, 0x1DFF), (0x1E00, 0x1EFF), (0x1F00, 0x1FFF), (0x2000, 0x206F), (0x2070, 0x209F), (0x20A0, 0x20CF),
    (0x20D0, 0x20FF), (0x2100, 0x214F), (0x2150, 0x218F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2500, 0x257F),
    (0x2600, 0x26FF), (0x2700, 0x27BF), (0x2C00, 0x2C5F), (0x2E80, 0x2EFF), (0x2F00, 0x2FDF), (0x3000, 0x303F),
    (0x3040, 0x309F), (0x30A0, 0x30FF), (0x3130, 0x318F), (0x3200, 0x32FF), (0x3300, 0x33FF), (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF), (0xA000, 0xA48F), (0xA4D0, 0xA4FF), (0xA980, 0xA9DF), (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF),
    (0xE000, 0xF8FF), (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFB50, 0xFDFF), (0xFE00, 0xFE0F), (0xFE20, 0xFE2F),
    (0xFE30, 0xFE4F), (0xFE70, 0xFEFF), (0xFF00, 0xFFEF), (0xFFF0, 0xFFFF), (0x10000, 0x1007F), (0x10330, 0x1034F),
    (0x10400, 0x1044F), (0x11000, 0x1107F), (0x11100, 0x1114F), (0x1D400, 0x1D7FF), (0x1D100, 0x1D1FF),
    (0x1F000, 0x1F02F), (0x1F100, 0x1F1FF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF),
    (0x1FA70, 0x1FAFF), (0x20000, 0x2A6DF), (0x2F800, 0x2FA1F), (0x30000, 0x3134F), (0x50000, 0x5FFFF),
    (0xE0000, 0xE007F), (0xE0100, 0xE01EF), (0xF0000, 0xFFFFF), (0x10FF00, 0x10FFFF),
]


def random_code_points(rng):
    out = []
    for _ in range(rng.randint(1, 40)):
        lo, hi = rng.choice(BLOCKS)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:  # surrogates are not scalar values
            cp = 0xFFFD
        out.append(chr(cp))
        if rng.random() < 0.2:
            out.append(rng.choice([" ", "a", "\n", "1"]))
    return "".join(out)


def mixed(rng, added):
    gens = [english, code, cjk, rtl_indic_thai, emoji, combining, whitespace, digits, punctuation, contraction,
            random_code_points]
    parts = [rng.choice(gens)(rng) for _ in range(rng.randint(2, 6))]
    if rng.random() < 0.3:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(added))
    return rng.choice(["", " ", "\n"]).join(parts)


def long_strings(rng):
    """A few long inputs: long words (the heap path of BPE), long runs of one class."""
    return [
        "a" * 5000, "ab" * 3000, "x" * 129, "hello" * 400, "é" * 2000, "e\u0301" * 1000, "😊" * 1500, "!" * 5000,
        "-=" * 2000, " " * 10000, "\n" * 3000, "\r\n" * 2000, " \t" * 3000, "1" * 3000, "中" * 3000,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4000)),
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(300)),
        "".join(rng.choice("!@#$%^&*()_+-=[]{};:,./<>?") for _ in range(3000)),
        "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(3000)),
        " ".join(english(rng) for _ in range(60)),
        "\n".join(code(rng) for _ in range(40)),
    ]


def compat_table_cases(rng):
    """Strings around the code points of src/tokenizer/unicode_compat.h (where PCRE2's or utf8proc's
    Unicode version differs from tokenizers'): every range's ends and a few inside, in contexts that
    expose their regex class and their treatment by NFC."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "tokenizer",
                          "unicode_compat.h")
    import re
    text = open(header, encoding="utf-8").read()
    cps = set()
    for a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", text):
        a, b = int(a, 16), int(b, 16)
        cps.update({a, b} | {rng.randint(a, b) for _ in range(3)})
    for c, a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), 0x([0-9A-F]+)\}", text):
        cps.update({int(c, 16), int(a, 16), int(b, 16)})
    cps.add(0x180E)  # in PCRE2's \s, not in Oniguruma's
    out = []
    for cp in sorted(cps):
        c = chr(cp)
        out.append(f"a{c}b {c}1{c}!{c} {c}\n{c}\u0301{c}a\u0345{c}\u0301 x{c}{c}e{c}\u0300")
    out += ["\U00011935\U00011930", "\U00011938", "x\U00011935\U00011930\u0301", "\U00011935\u0301\U00011930",
            "a\u180e b", "\u180e", " \u180e\n", "\u180e\u180e x"]
    return out


def corpus(seed, added):
    rng = random.Random(seed)
    texts = ["", " ", "\n", "a", "é", "e\u0301", "😊", "<|im_start|>", "<think>", "This is a test"]
    texts += list(added) + [f"before {t} after" for t in added] + [f"x{t}y" for t in added]
    plan = [(english, 1000), (code, 900), (cjk, 800), (rtl_indic_thai, 900), (emoji, 700), (combining, 900),
            (whitespace, 800), (digits, 600), (punctuation, 700), (contraction, 600),
            (lambda r: added_tokens_text(r, added), 800), (lambda r: mixed(r, added), 1500),
            (random_code_points, 1500)]
    for gen, n in plan:
        texts += [gen(rng) for _ in range(n)]
    texts += long_strings(rng)
    texts += compat_table_cases(rng)
    return texts


def random_id_sequences(seed, hf, n):
    """Id sequences for decoding: random ids, lone and shuffled byte tokens (invalid UTF-8), added tokens."""
    rng = random.Random(seed + 1)
    vocab = hf.get_vocab_size(with_added_tokens=True)
    byte_tokens = [hf.token_to_id(chr(c)) for c in list(range(0x100, 0x144)) + list(range(0xA1, 0xAD)) +
                   list(range(0xAE, 0x100))]
    byte_tokens = [t for t in byte_tokens if t is not None]
    added = list(range(248044, 248077))
    seqs = []
    for _ in range(n):
        seq = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            seq.append(rng.randrange(248044) if r < 0.4 else rng.choice(byte_tokens) if r < 0.85 else rng.choice(added))
        seqs.append(seq)
        if rng.random() < 0.3:  # a valid sequence cut short
            ids = hf.encode(rng.choice(["😊 ok", "生活", "é", "👨‍👩‍👧‍👦", "ปี"])).ids
            seqs.append(ids[:-1] if len(ids) > 1 else ids)
    assert all(0 <= i < vocab for s in seqs for i in s)
    return seqs


# --------------------------------------------------------------------------------------------------

def run_batch(batch, tokenizer_dir, requests):
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests).encode("utf-8")
    r = subprocess.run([batch, tokenizer_dir], input=data, capture_output=True)
    if r.returncode != 0:
        sys.exit(f"hf_equality: {batch} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    # Not splitlines(): decoded text may hold U+2028, U+0085 and the like.
    lines = [l for l in r.stdout.decode("utf-8").split("\n") if l]
    if len(lines) != len(requests):
        sys.exit(f"hf_equality: {len(requests)} requests but {len(lines)} replies")
    return [json.loads(l) for l in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", required=True, help="path of di_tokenize_batch")
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--venv", required=True, help="venv for tokenizers (created on first use)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--show", type=int, default=8, help="mismatches to print")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.tokenizer_dir, "tokenizer.json")):
        sys.exit(f"hf_equality: {args.tokenizer_dir}/tokenizer.json is missing (scripts/setup.sh makes it)")
    ensure_venv(os.path.abspath(args.venv))

    import tokenizers
    from tokenizers import Tokenizer, normalizers
    if tokenizers.__version__ != TOKENIZERS_VERSION:
        sys.exit(f"hf_equality: expected tokenizers {TOKENIZERS_VERSION}, found {tokenizers.__version__}")
    path = os.path.join(args.tokenizer_dir, "tokenizer.json")
    hf = Tokenizer.from_file(path)
    hf_text = Tokenizer.from_file(path)
    hf_text.encode_special_tokens = True  # parse_special=false
    added = sorted(t.content for t in hf.get_added_tokens_decoder().values())

    t0 = time.time()
    texts = corpus(args.seed, added)
    id_seqs = random_id_sequences(args.seed, hf, 3000)
    requests = [{"text": t, "parse_special": p} for t in texts for p in (True, False)]
    requests += [{"decode": s, "skip_special": k} for s in id_seqs for k in (False, True)]
    t1 = time.time()
    replies = run_batch(args.batch, args.tokenizer_dir, requests)
    t2 = time.time()
    hf_ids = {True: [e.ids for e in hf.encode_batch(texts)], False: [e.ids for e in hf_text.encode_batch(texts)]}
    t3 = time.time()

    mismatches = {}

    def mismatch(kind, detail):
        mismatches.setdefault(kind, []).append(detail)

    checks = 0
    nfc_version_differences = 0
    hf_normalizer = normalizers.NFC()
    for req, rep in zip(requests, replies):
        if "error" in rep:
            mismatch("error", f"{req!r}: {rep['error']}")
    for i, text in enumerate(texts):
        for j, p in enumerate((True, False)):
            rep = replies[2 * i + j]
            if "error" in rep:
                continue
            want = hf_ids[p][i]
            checks += 1
            if rep["ids"] != want:
                mismatch(f"ids (parse_special={p})", f"{text!r}\n      ours {rep['ids'][:40]}\n      hf   {want[:40]}")
                continue
            for skip, key in ((False, "decoded"), (True, "decoded_skip")):
                checks += 1
                hd = hf.decode(want, skip_special_tokens=skip)
                if rep[key] != hd:
                    mismatch(f"decode (skip_special={skip})", f"{want[:40]}\n      ours {rep[key]!r}\n      hf   {hd!r}")
            # tokenizers' NFC has Unicode 9.0 data and ours follows it, so the round trip is checked
            # against tokenizers' NFC, and against Python's (Unicode 14.0) where those two agree.
            checks += 1
            hf_nfc = hf_normalizer.normalize_str(text)
            py_nfc = unicodedata.normalize("NFC", text)
            if rep["decoded"] != hf_nfc:
                mismatch("round trip decode(encode(x)) == NFC(x) (tokenizers' NFC)",
                         f"{text!r}\n      decoded {rep['decoded']!r}\n      NFC     {hf_nfc!r}")
            elif rep["decoded"] != py_nfc:
                if hf_nfc == py_nfc:
                    mismatch("round trip decode(encode(x)) == unicodedata.normalize('NFC', x)",
                             f"{text!r}\n      decoded {rep['decoded']!r}\n      NFC     {py_nfc!r}")
                else:
                    nfc_version_differences += 1
    base = 2 * len(texts)
    for k, seq in enumerate(id_seqs):
        for j, skip in enumerate((False, True)):
            rep = replies[base + 2 * k + j]
            if "error" in rep:
                continue
            hd = hf.decode(seq, skip_special_tokens=skip)
            checks += 2
            if rep["decoded"] != hd:
                mismatch(f"decode of random ids (skip_special={skip})", f"{seq}\n      ours {rep['decoded']!r}\n      hf   {hd!r}")
            if rep["stream"] != hd:
                mismatch(f"StreamDecoder of random ids (skip_special={skip})",
                         f"{seq}\n      ours {rep['stream']!r}\n      hf   {hd!r}")

    n_tokens = sum(len(x) for x in hf_ids[True])
    print(f"hf_equality: tokenizers {TOKENIZERS_VERSION}, seed {args.seed}: {len(texts)} strings "
          f"({sum(len(t) for t in texts)} code points, {n_tokens} tokens) x parse_special on/off, "
          f"{len(id_seqs)} random id sequences x skip_special on/off; {checks} comparisons")
    print(f"hf_equality: corpus {t1 - t0:.1f} s, ours {t2 - t1:.1f} s (batch driver), tokenizers {t3 - t2:.1f} s")
    print(f"hf_equality: {nfc_version_differences} round trips equal tokenizers' NFC but not Python's "
          f"(Unicode {unicodedata.unidata_version}), for marks newer than tokenizers' Unicode 9.0 NFC data")
    if not mismatches:
        print("hf_equality: all equal")
        return 0
    total = sum(len(v) for v in mismatches.values())
    print(f"hf_equality: {total} MISMATCHES")
    for kind, items in mismatches.items():
        print(f"  {kind}: {len(items)}")
        for d in items[:args.show]:
            print(f"    - {d}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
