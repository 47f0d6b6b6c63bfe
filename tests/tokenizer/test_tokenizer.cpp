// Tests of the Qwen3.5 tokenizer (tokenizer/tokenizer.h) on the real files (DI_TOKENIZER_DIR, made by
// scripts/setup.sh): the public test vector, special tokens parsed or taken as text, decoding with and
// without special tokens, lossy UTF-8, the StreamDecoder on random ids, the NFC round trip on
// generated strings, invalid input, 10 MB inputs; and loading errors on corrupt files written to a
// temporary folder. Token-for-token equality with Hugging Face tokenizers on >= 10,000 strings is
// the CTest tokenizer.hf_equality (hf_equality.py).
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/temp_dir.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"
#include "support/seed.h"

namespace di {
namespace {

namespace fs = std::filesystem;
using di::testing::fresh_seed;
using di::testing::seed_trace;
using di::testing::throws_error_with;
using Ids = std::vector<int32_t>;

constexpr int32_t kEndOfText = 248044, kImStart = 248045, kImEnd = 248046, kThink = 248068, kThinkEnd = 248069;

// The real tokenizer, loaded once for all tests.
const Tokenizer& qwen() {
  static const Tokenizer tok = [] {
    const fs::path dir = DI_TOKENIZER_DIR;
    if (!fs::exists(dir / "tokenizer.json"))
      throw std::runtime_error("the Qwen3.5 tokenizer files are missing from " + dir.string() +
                               " (scripts/setup.sh makes them)");
    return Tokenizer::load(dir);
  }();
  return tok;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary);
  f << data;
}

// NFC by utf8proc directly: the oracle of the round trip.
std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                          &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  EXPECT_GE(n, 0);
  std::string r(reinterpret_cast<char*>(out), size_t(std::max<utf8proc_ssize_t>(n, 0)));
  std::free(out);
  return r;
}

bool valid_utf8(const std::string& s) {
  utf8proc_int32_t cp;
  for (size_t i = 0; i < s.size();) {
    const utf8proc_ssize_t n =
        utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()) + i, utf8proc_ssize_t(s.size() - i), &cp);
    if (n <= 0) return false;
    i += size_t(n);
  }
  return true;
}

// The id of the token made of one byte.
int32_t byte_token(uint8_t b) {
  static const std::vector<int32_t> ids = [] {
    std::vector<int32_t> v(256, -1);
    for (int32_t id = 0; id < 512; ++id)
      if (qwen().token_bytes(id).size() == 1) v[uint8_t(qwen().token_bytes(id)[0])] = id;
    return v;
  }();
  return ids[b];
}

// ------------------------------------------------------------------------------------------------
// The real files.

TEST(TokenizerQwen35, LoadsWithMetadata) {
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::load(DI_TOKENIZER_DIR);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("load_seconds", fmt::format("{:.3f}", s));
  std::printf("tokenizer.json loaded in %.3f s (the load time is measured by the benchmark)\n", s);
  EXPECT_EQ(tok.vocab_size(), 248077);
  EXPECT_EQ(tok.find_token("<|im_end|>"), kImEnd);
  EXPECT_EQ(tok.find_token("<think>"), kThink);
  EXPECT_EQ(tok.find_token("<|audio_pad|>"), 248076);
  EXPECT_EQ(tok.find_token("hello"), std::nullopt);  // only added tokens
  EXPECT_TRUE(tok.is_special(kImStart));
  EXPECT_TRUE(tok.is_added(kImStart));
  EXPECT_FALSE(tok.is_special(kThink));  // <think> is added but not special
  EXPECT_TRUE(tok.is_added(kThink));
  EXPECT_FALSE(tok.is_added(1919));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(248077));
  EXPECT_EQ(tok.eos_id(), kImEnd);
  EXPECT_EQ(tok.pad_id(), kEndOfText);
  EXPECT_EQ(tok.chat_template().rfind("{%- set image_count = namespace(value=0) %}", 0), 0u);
  EXPECT_EQ(tok.token_bytes(kImStart), "<|im_start|>");
  EXPECT_EQ(tok.token_bytes(198), "\n");
  EXPECT_EQ(tok.token_bytes(256), "  ");  // "ĠĠ": byte-level characters become bytes
}

TEST(TokenizerQwen35, PublicTestVector) {
  // QWEN35.md section 9, from the Hugging Face test of the Qwen3.5 tokenizer.
  const std::string text =
      "This is a test 😊\nI was born in 92000, and this is falsé.\n生活的真谛是\nHi  Hello\nHi   Hello\n\n \n  \n "
      "Hello\n<s>\nhi<s>there\nThe following string should be properly encoded: Hello.\nBut ird and ปี   ird   ด\nHey "
      "how are you doing";
  const Ids expected = {1919,  369,    264,    1228,  25677, 232,   198,   40,    557,    8950,  303,   220,  24,
                        17,    15,     15,     15,    11,    321,   411,   369,   30882,  933,   13,    198,  103815,
                        132339, 95761, 198,    12675, 220,   21251, 198,   12675, 256,    21251, 271,   46813, 21251,
                        198,   42589,  29,     198,   5834,  42589, 29,    17977, 198,    760,   2614,  886,  1220,
                        381,   9971,   19873,  25,    21251, 13,    198,   3850,  220,    2517,  321,   170827, 256,
                        220,   2517,   256,    149027, 198,  18103, 1204,  513,   488,    3604};
  ASSERT_EQ(expected.size(), 75u);
  EXPECT_EQ(qwen().encode(text), expected);
  EXPECT_EQ(qwen().encode(text, false), expected);  // no added token in it
  EXPECT_EQ(qwen().decode(expected), text);
}

TEST(TokenizerQwen35, ChatPromptIds) {
  // QWEN35.md section 8: the generation prompt with thinking disabled.
  const Ids ids = qwen().encode("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const Ids head = {kImStart, 846, 198};
  const Ids tail = {kImEnd, 198, kImStart, 74455, 198, kThink, 271, kThinkEnd, 271};
  ASSERT_GE(ids.size(), head.size() + tail.size());
  EXPECT_EQ(Ids(ids.begin(), ids.begin() + 3), head);
  EXPECT_EQ(Ids(ids.end() - Ids::difference_type(tail.size()), ids.end()), tail);
}

TEST(TokenizerQwen35, SpecialTokensParsedOrText) {
  const std::string text = "<|im_start|>user<think>hi</think><|im_end|>";
  // Checked against tokenizers 0.23.3 (encode_special_tokens=True for the second).
  EXPECT_EQ(qwen().encode(text, true), (Ids{kImStart, 846, kThink, 5834, kThinkEnd, kImEnd}));
  EXPECT_EQ(qwen().encode(text, false),
            (Ids{27, 91, 316, 4747, 91, 29, 846, kThink, 5834, kThinkEnd, 27, 91, 316, 6018, 91, 29}));
  // Every added token alone: parsed, it is its id; as text, a special one is ordinary text, while a
  // non-special one (<think>, <tool_call>, <|fim_prefix|>, ...) is still its id, as in tokenizers.
  for (int32_t id = 248044; id <= 248076; ++id) {
    const std::string& content = qwen().token_bytes(id);
    EXPECT_EQ(qwen().encode(content, true), Ids{id}) << content;
    const Ids as_text = qwen().encode(content, false);
    if (qwen().is_special(id)) {
      EXPECT_GT(as_text.size(), 1u) << content;
      for (const int32_t t : as_text) EXPECT_FALSE(qwen().is_added(t)) << content;
    } else {
      EXPECT_EQ(as_text, Ids{id}) << content;
    }
    EXPECT_EQ(qwen().decode(as_text), content);
    // Inside text too.
    const Ids inside = qwen().encode("a " + content + " b", true);
    EXPECT_NE(std::find(inside.begin(), inside.end(), id), inside.end()) << content;
  }
  // Longest match wins; partial forms are text.
  EXPECT_EQ(qwen().encode("<|im_start|"), qwen().encode("<|im_start|", false));
  EXPECT_EQ(qwen().encode("<<|im_end|>>")[1], kImEnd);
}

TEST(TokenizerQwen35, DecodeSkippingSpecialTokens) {
  const Ids ids = {kImStart, 1919, kThink, 369, kImEnd, kEndOfText};
  EXPECT_EQ(qwen().decode(ids), "<|im_start|>This<think> is<|im_end|><|endoftext|>");
  // Only special tokens are skipped: <think> is added but not special.
  EXPECT_EQ(qwen().decode(ids, true), "This<think> is");
  EXPECT_EQ(qwen().decode(Ids{}), "");
  EXPECT_EQ(qwen().decode(Ids{kImEnd}, true), "");
}

TEST(TokenizerQwen35, DecodeReplacesInvalidUtf8LikeFromUtf8Lossy) {
  auto bytes = [](std::initializer_list<int> bs) {
    Ids ids;
    for (const int b : bs) ids.push_back(byte_token(uint8_t(b)));
    return ids;
  };
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  // One U+FFFD per maximal subpart (Unicode's practice, Rust's from_utf8_lossy, Python's 'replace').
  EXPECT_EQ(qwen().decode(bytes({0xE2, 0x82, 0xAC})), "€");
  EXPECT_EQ(qwen().decode(bytes({0xE2, 0x82, 'a'})), r + "a");           // truncated sequence
  EXPECT_EQ(qwen().decode(bytes({0xE2, 0x82})), r);                      // truncated at the end
  EXPECT_EQ(qwen().decode(bytes({0xF0, 0x80, 0x80})), r + r + r);        // F0 80 is never valid
  EXPECT_EQ(qwen().decode(bytes({0xED, 0xA0, 0x80})), r + r + r);        // a surrogate
  EXPECT_EQ(qwen().decode(bytes({0xC0, 0xAF})), r + r);                  // overlong
  EXPECT_EQ(qwen().decode(bytes({0xF4, 0x90, 0x80, 0x80})), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(qwen().decode(bytes({0xFF, 'x', 0x80})), r + "x" + r);
  EXPECT_EQ(qwen().decode(bytes({0xF0, 0x9F, 0x98})), r);
  EXPECT_EQ(qwen().decode(bytes({0xF0, 0x9F, 0x98, 0x8A})), "😊");
  EXPECT_EQ(qwen().decode(Ids{25677}), " " + r);  // " " + the first 3 bytes of 😊
  EXPECT_EQ(qwen().decode(Ids{25677, 232}), " 😊");
}

TEST(TokenizerQwen35, StreamDecoderHoldsOnlyAnIncompleteTail) {
  StreamDecoder s(qwen());
  EXPECT_EQ(s.push(byte_token('a')), "a");
  EXPECT_EQ(s.push(byte_token(0xF0)), "");
  EXPECT_EQ(s.push(byte_token(0x9F)), "");
  EXPECT_EQ(s.push(byte_token(0x98)), "");
  EXPECT_EQ(s.push(byte_token(0x8A)), "😊");
  EXPECT_EQ(s.push(byte_token(0xE2)), "");
  EXPECT_EQ(s.push(byte_token('b')), "\xEF\xBF\xBD" "b");  // decided once 'b' arrives
  EXPECT_EQ(s.push(byte_token(0x80)), "\xEF\xBF\xBD");     // never valid: not held
  EXPECT_EQ(s.push(byte_token(0xE2)), "");
  EXPECT_EQ(s.push(byte_token(0x82)), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");  // an incomplete end: one U+FFFD
  EXPECT_EQ(s.finish(), "");
}

TEST(TokenizerQwen35, StreamDecoderConcatenationEqualsDecode) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<std::string> texts = {"😊 ok", "生活的真谛是", "falsé", "👨‍👩‍👧‍👦 family", "ปี   ird", "e\xCC\x81"};
  for (int trial = 0; trial < 2000; ++trial) {
    Ids ids;
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int i = 0; i < n; ++i) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind < 3)
        ids.push_back(std::uniform_int_distribution<int32_t>(0, 248043)(rng));
      else if (kind < 7)  // single bytes, mostly non-ASCII: invalid and truncated sequences
        ids.push_back(byte_token(uint8_t(std::uniform_int_distribution<int>(0x70, 0xFF)(rng))));
      else if (kind < 8)
        ids.push_back(std::uniform_int_distribution<int32_t>(248044, 248076)(rng));
      else {  // a valid sequence cut anywhere
        const Ids t = qwen().encode(texts[size_t(std::uniform_int_distribution<int>(0, int(texts.size()) - 1)(rng))]);
        ids.insert(ids.end(), t.begin(), t.begin() + std::uniform_int_distribution<int>(1, int(t.size()))(rng));
      }
    }
    for (const bool skip : {false, true}) {
      StreamDecoder s(qwen(), skip);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string piece = s.push(id);
        ASSERT_TRUE(valid_utf8(piece));
        streamed += piece;
      }
      streamed += s.finish();
      ASSERT_EQ(streamed, qwen().decode(ids, skip)) << "trial " << trial << ", skip_special " << skip;
    }
  }
}

TEST(TokenizerQwen35, RoundTripIsNfc) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<std::string> pieces = {
      "Hello", " world", "don't", "'LL", " 42", "3.14159", "\n", "\r\n", "  ", "\t", "   \n\n", "生活的真谛是",
      "日本語", "한국어", "\xE1\x84\x80\xE1\x85\xA1",  // conjoining jamo: NFC composes them
      "😊", "👨‍👩‍👧‍👦", "👍🏽", "🇯🇵", "e\xCC\x81", "a\xCC\xA3\xCC\x87", "a\xCC\x87\xCC\xA3", "\xE2\x84\xAB",  // Angstrom sign
      "ﬁ", "Ω", "مرحبا", "नमस्ते", "ปี", "!!!", "```", "<|im_start|>", "<think>", "<|im_end", "{\"a\": [1, 2]}",
      "\xCC\x81", "\xC2\xA0", "\xE3\x80\x80", "x"};
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i) text += pieces[size_t(std::uniform_int_distribution<int>(0, int(pieces.size()) - 1)(rng))];
    for (const bool parse_special : {true, false})
      ASSERT_EQ(qwen().decode(qwen().encode(text, parse_special)), nfc(text))
          << "text " << nlohmann::json(text).dump() << ", parse_special " << parse_special;
  }
}

TEST(TokenizerQwen35, InvalidUtf8IsAnErrorNamingTheOffset) {
  struct Case {
    std::string text;
    size_t offset;
  };
  const std::vector<Case> cases = {
      {"ab\xC3", 2},                // truncated at the end
      {"a\x80z", 1},                // a lone continuation byte
      {"ok \xED\xA0\x80", 3},       // a surrogate
      {"\xC0\xAF", 0},              // overlong
      {"xyz\xF4\x90\x80\x80", 3},   // above U+10FFFF
      {"caf\xC3\xA9 \xFF", 6},      // after valid non-ASCII
      {"<|im_start|>\xE2\x82", 12}  // after an added token
  };
  for (const Case& c : cases) {
    for (const bool parse_special : {true, false})
      EXPECT_TRUE(throws_error_with([&] { qwen().encode(c.text, parse_special); },
                                    {"invalid UTF-8", fmt::format("byte offset {}", c.offset)}));
  }
}

TEST(TokenizerQwen35, OutOfRangeIdIsAnError) {
  EXPECT_TRUE(throws_error_with([] { qwen().decode(Ids{1919, 248077}); }, {"248077", "out of range"}));
  EXPECT_TRUE(throws_error_with([] { qwen().decode(Ids{-1}); }, {"-1", "out of range"}));
  EXPECT_TRUE(throws_error_with([] { qwen().token_bytes(1 << 30); }, {"1073741824"}));
  StreamDecoder s(qwen());
  EXPECT_TRUE(throws_error_with([&] { s.push(300000); }, {"300000"}));
}

TEST(TokenizerQwen35, TenMegabyteInputs) {
  constexpr size_t kSize = 10 << 20;
  auto repeat = [](const std::string& unit) {
    std::string s;
    s.reserve(kSize + unit.size());
    while (s.size() < kSize) s += unit;
    return s;
  };
  struct Input {
    std::string name, text, nfc;  // nfc empty: compute it with utf8proc
  };
  const std::string marks = repeat("\xCC\x81\xCC\xA3\xCD\x85");  // U+0301 (class 230), U+0323 (220), U+0345 (240)
  const size_t n_marks = marks.size() / 6;
  // Its NFC puts the run of marks in canonical order: the oracle cannot be utf8proc_map, whose
  // reordering is quadratic (the tokenizer's own is not).
  std::string sorted_marks;
  for (const char* m : {"\xCC\xA3", "\xCC\x81", "\xCD\x85"})
    for (size_t i = 0; i < n_marks; ++i) sorted_marks += m;
  const std::vector<Input> inputs = {
      {"mixed text", repeat("The quick brown fox 😊 生活的真谛是 falsé, 92000!\n\tdef f(x): return x ** 2\r\n<|im_end|> "), ""},
      {"one 10 MB word", std::string(kSize, 'a'), ""},
      {"spaces", std::string(kSize, ' '), ""},
      {"newlines and spaces", repeat(" \n"), ""},
      {"digits", std::string(kSize, '7'), ""},
      {"punctuation", repeat("!?"), ""},
      {"combining marks", marks, sorted_marks},
  };
  for (const Input& in : inputs) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = qwen().encode(in.text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Printed for the record; speed is a benchmark's business (docs/benchmarks/tokenizer.md), and
    // CTest's timeout is the only bound here.
    std::printf("10 MB of %s: %zu tokens in %.2f s\n", in.name.c_str(), ids.size(), s);
    EXPECT_EQ(qwen().decode(ids), in.nfc.empty() ? nfc(in.text) : in.nfc) << in.name;
  }
}

// ------------------------------------------------------------------------------------------------
// Loading errors, on small files written to a temporary folder.

class TokenizerLoad : public testing::TempDirTest {
 protected:
  // A small valid tokenizer.json in Qwen3.5's form: the 256 byte-level tokens, "ab" and "abc", two
  // merges, one special and one non-special added token.
  static nlohmann::json tiny() {
    nlohmann::json vocab = nlohmann::json::object();
    int id = 0;
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;
      std::string ch;
      if (cp < 0x80) {
        ch += char(cp);
      } else {
        ch += char(0xC0 | (cp >> 6));
        ch += char(0x80 | (cp & 0x3F));
      }
      vocab[ch] = id++;
    }
    vocab["ab"] = 256;
    vocab["abc"] = 257;
    const nlohmann::json regex = {
        {"Regex",
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}};
    auto added = [](int id, const char* content, bool special) {
      return nlohmann::json{{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
                            {"rstrip", false}, {"normalized", false}, {"special", special}};
    };
    return {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", {added(258, "<|x|>", true), added(259, "<y>", false)}},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", regex}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
        {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", ""},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})})}}},
    };
  }

  void write(const nlohmann::json& j) { write_all(dir_ / "tokenizer.json", j.dump()); }

  // Loading `j` fails with a di::Error whose message names the file and every word.
  ::testing::AssertionResult rejects(const nlohmann::json& j, const std::vector<std::string>& words) {
    write(j);
    std::vector<std::string> all(words);
    all.push_back((dir_ / "tokenizer.json").string());
    return throws_error_with([&] { Tokenizer::load(dir_); }, all);
  }

};

TEST_F(TokenizerLoad, TinyTokenizerWorks) {
  write(tiny());
  const Tokenizer tok = Tokenizer::load(dir_);
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.encode("abc"), (Ids{257}));
  // This vocabulary gives byte b the id b.
  EXPECT_EQ(tok.encode("ab<|x|>c<y>"), (Ids{256, 258, 'c', 259}));
  EXPECT_EQ(tok.encode("<|x|>", false).size(), 5u);
  EXPECT_EQ(tok.encode("<y>", false), (Ids{259}));
  EXPECT_EQ(tok.decode(tok.encode("abc ab\xC3\xA9")), "abc ab\xC3\xA9");
  EXPECT_FALSE(tok.eos_id().has_value());  // no tokenizer_config.json
  EXPECT_EQ(tok.chat_template(), "");
}

TEST_F(TokenizerLoad, MergesAsStrings) {
  nlohmann::json j = tiny();
  j["model"]["merges"] = nlohmann::json::array({"a b", "ab c"});
  write(j);
  EXPECT_EQ(Tokenizer::load(dir_).encode("abc"), (Ids{257}));
}

TEST_F(TokenizerLoad, MissingFile) {
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {(dir_ / "tokenizer.json").string(), "cannot open"}));
}

TEST_F(TokenizerLoad, TruncatedRealFile) {
  const std::string real = read_all(fs::path(DI_TOKENIZER_DIR) / "tokenizer.json");
  ASSERT_GT(real.size(), 1000000u) << "the real tokenizer.json is missing (scripts/setup.sh makes it)";
  for (const size_t cut : {real.size() / 2, real.size() - 1, size_t(100)}) {
    write_all(dir_ / "tokenizer.json", real.substr(0, cut));
    EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {(dir_ / "tokenizer.json").string(), "JSON"}));
  }
}

TEST_F(TokenizerLoad, RealFileWithAMergeOfAnUnknownToken) {
  std::string real = read_all(fs::path(DI_TOKENIZER_DIR) / "tokenizer.json");
  const std::string first = "\"merges\":[[\"\xC4\xA0\",\"\xC4\xA0\"]";  // ["Ġ","Ġ"]
  const size_t at = real.find(first);
  ASSERT_NE(at, std::string::npos);
  real.replace(at, first.size(), "\"merges\":[[\"\xC4\xA0\",\"no_such_token\"]");
  write_all(dir_ / "tokenizer.json", real);
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); },
                                {(dir_ / "tokenizer.json").string(), "model.merges[0]", "no_such_token"}));
}

TEST_F(TokenizerLoad, BadJson) {
  write_all(dir_ / "tokenizer.json", "{\"model\": {\"type\": \"BPE\",, }");
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {(dir_ / "tokenizer.json").string(), "JSON"}));
  write_all(dir_ / "tokenizer.json", "");
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {(dir_ / "tokenizer.json").string(), "JSON"}));
}

TEST_F(TokenizerLoad, UnsupportedConfigurationsNameTheField) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> change;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"model type", [](auto& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "\"BPE\"", "WordPiece"}},
      {"byte fallback", [](auto& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"}},
      {"dropout", [](auto& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"}},
      {"unk", [](auto& j) { j["model"]["unk_token"] = "<unk>"; }, {"model.unk_token"}},
      {"prefix", [](auto& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"model.continuing_subword_prefix"}},
      {"suffix", [](auto& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, {"model.end_of_word_suffix"}},
      {"ignore merges", [](auto& j) { j["model"]["ignore_merges"] = true; }, {"model.ignore_merges"}},
      {"normalizer", [](auto& j) { j["normalizer"] = {{"type", "NFKC"}}; }, {"normalizer.type", "NFKC"}},
      {"pre-tokenizer type", [](auto& j) { j["pre_tokenizer"]["type"] = "Whitespace"; }, {"pre_tokenizer.type"}},
      {"split behaviour", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       {"pre_tokenizer.pretokenizers[0].behavior", "Removed"}},
      {"split invert", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       {"pre_tokenizer.pretokenizers[0].invert"}},
      {"byte level regex", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; },
       {"pre_tokenizer.pretokenizers[1].use_regex"}},
      {"prefix space", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       {"pre_tokenizer.pretokenizers[1].add_prefix_space"}},
      {"bad regex", [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       {"pre_tokenizer.pretokenizers[0].pattern.Regex", "(unclosed"}},
      {"no decoder", [](auto& j) { j.erase("decoder"); }, {"decoder", "missing"}},
      {"other decoder", [](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder.type"}},
      {"post processor", [](auto& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, {"post_processor.type"}},
      {"truncation", [](auto& j) { j["truncation"] = {{"max_length", 5}}; }, {"truncation"}},
      {"padding", [](auto& j) { j["padding"] = {{"length", 5}}; }, {"padding"}},
      {"lstrip", [](auto& j) { j["added_tokens"][0]["lstrip"] = true; }, {"added_tokens[0].lstrip"}},
      {"normalized", [](auto& j) { j["added_tokens"][1]["normalized"] = true; }, {"added_tokens[1].normalized"}},
      {"single word", [](auto& j) { j["added_tokens"][1]["single_word"] = true; }, {"added_tokens[1].single_word"}},
      {"empty added", [](auto& j) { j["added_tokens"][0]["content"] = ""; }, {"added_tokens[0].content"}},
      {"added id clash", [](auto& j) { j["added_tokens"][0]["id"] = 5; }, {"added_tokens[0]", "id 5"}},
      {"added twice", [](auto& j) { j["added_tokens"][1]["content"] = "<|x|>"; }, {"added_tokens[1]", "<|x|>"}},
      {"unknown merge", [](auto& j) { j["model"]["merges"][1] = nlohmann::json::array({"ab", "zz"}); }, {"model.merges[1]", "\"zz\""}},
      {"merged token missing", [](auto& j) { j["model"]["vocab"].erase("abc"); }, {"model.merges[1]", "\"abc\""}},
      {"bad merge form", [](auto& j) { j["model"]["merges"][0] = nlohmann::json::array({1, 2}); }, {"model.merges[0]"}},
      {"bad merge string", [](auto& j) { j["model"]["merges"][0] = "abc"; }, {"model.merges[0]", "\"abc\""}},
      {"merge of three", [](auto& j) { j["model"]["merges"][0] = nlohmann::json::array({"a", "b", "c"}); }, {"model.merges[0]"}},
      {"duplicate id", [](auto& j) { j["model"]["vocab"]["abc"] = 256; }, {"model.vocab", "id 256"}},
      {"negative id", [](auto& j) { j["model"]["vocab"]["abc"] = -3; }, {"model.vocab[\"abc\"]", "-3"}},
      {"string id", [](auto& j) { j["model"]["vocab"]["abc"] = "x"; }, {"model.vocab[\"abc\"]"}},
      {"missing byte", [](auto& j) { j["model"]["vocab"].erase("!"); }, {"model.vocab", "byte 0x21"}},
      {"not byte level", [](auto& j) { j["model"]["vocab"]["\xE4\xB8\xAD"] = 300; }, {"model.vocab[\"\xE4\xB8\xAD\"]", "byte-level"}},
      {"no vocab", [](auto& j) { j["model"].erase("vocab"); }, {"model.vocab"}},
      {"no merges", [](auto& j) { j["model"].erase("merges"); }, {"model.merges"}},
      {"merges object", [](auto& j) { j["model"]["merges"] = {{"a", 1}}; }, {"model.merges", "{\"a\":1}"}},
      {"vocab array", [](auto& j) { j["model"]["vocab"] = nlohmann::json::array({1}); }, {"model.vocab", "[1]"}},
      {"no model", [](auto& j) { j.erase("model"); }, {"model"}},
      {"top level", [](auto& j) { j = nlohmann::json::array(); }, {"top level"}},
  };
  for (const Case& c : cases) {
    nlohmann::json j = tiny();
    c.change(j);
    EXPECT_TRUE(rejects(j, c.words)) << c.what;
  }
}

TEST_F(TokenizerLoad, TokenizerConfig) {
  write(tiny());
  const fs::path config = dir_ / "tokenizer_config.json";
  write_all(config, R"({"eos_token": {"content": "<|x|>", "special": true}, "pad_token": "<y>",
                        "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  Tokenizer tok = Tokenizer::load(dir_);
  EXPECT_EQ(tok.eos_id(), 258);
  EXPECT_EQ(tok.pad_id(), 259);
  EXPECT_EQ(tok.chat_template(), "D");

  // No template in the config: chat_template.jinja beside it.
  write_all(config, R"({"eos_token": "abc", "pad_token": null})");
  write_all(dir_ / "chat_template.jinja", "{{ messages }}");
  tok = Tokenizer::load(dir_);
  EXPECT_EQ(tok.eos_id(), 257);  // a vocabulary token by its text
  EXPECT_FALSE(tok.pad_id().has_value());
  EXPECT_EQ(tok.chat_template(), "{{ messages }}");
  // The config's own template wins over the file.
  write_all(config, R"({"chat_template": "from config"})");
  EXPECT_EQ(Tokenizer::load(dir_).chat_template(), "from config");

  write_all(config, R"({"eos_token": "<nope>"})");
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {config.string(), "eos_token", "<nope>"}));
  write_all(config, R"({"eos_token": 5})");
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {config.string(), "eos_token"}));
  write_all(config, R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {config.string(), "chat_template", "default"}));
  write_all(config, R"({"eos_token": )");
  EXPECT_TRUE(throws_error_with([&] { Tokenizer::load(dir_); }, {config.string(), "JSON"}));
}

// ------------------------------------------------------------------------------------------------
// The pre-tokenizer's regex split (an internal part, tested directly).

const std::string kQwenRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// (piece, is_match) pairs.
std::vector<std::pair<std::string, bool>> split(const tokenizer_detail::SplitRegex& re, const std::string& s) {
  std::vector<std::pair<std::string, bool>> out;
  tokenizer_detail::SplitRegex::Matcher m(re);
  m.split(s, [&](std::string_view piece, bool is_match) { out.emplace_back(piece, is_match); });
  return out;
}

TEST(TokenizerPreTokenizer, IsolatedKeepsGapsBetweenMatches) {
  const tokenizer_detail::SplitRegex re("a+", "test");
  using P = std::vector<std::pair<std::string, bool>>;
  EXPECT_EQ(split(re, "xaayza"), (P{{"x", false}, {"aa", true}, {"yz", false}, {"a", true}}));
  EXPECT_EQ(split(re, "zz"), (P{{"zz", false}}));
  EXPECT_EQ(split(re, ""), P{});
  // Empty matches make no piece.
  const tokenizer_detail::SplitRegex empty("b*", "test");
  EXPECT_EQ(split(empty, "abbc"), (P{{"a", false}, {"bb", true}, {"c", false}}));
}

TEST(TokenizerPreTokenizer, QwenRegexLeavesNoGaps) {
  // Every character is whitespace, a letter, a mark, a number or something else, and some
  // alternative of the regex takes each of those: no text falls between matches.
  const tokenizer_detail::SplitRegex re(kQwenRegex, "test");
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<std::pair<uint32_t, uint32_t>> blocks = {
      {0x0, 0x7F}, {0x80, 0x2FF}, {0x300, 0x36F}, {0x370, 0x6FF}, {0x900, 0xE7F}, {0x1100, 0x11FF}, {0x1680, 0x180F},
      {0x2000, 0x206F}, {0x2070, 0x2BFF}, {0x3000, 0x30FF}, {0x4E00, 0x4FFF}, {0xAC00, 0xACFF}, {0xE000, 0xE0FF},
      {0xFE00, 0xFFFF}, {0x10000, 0x100FF}, {0x1D400, 0x1D4FF}, {0x1F300, 0x1FAFF}, {0xE0000, 0xE01EF}, {0x10FF00, 0x10FFFF}};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s;
    const int n = std::uniform_int_distribution<int>(1, 30)(rng);
    for (int i = 0; i < n; ++i) {
      const auto& [lo, hi] = blocks[size_t(std::uniform_int_distribution<int>(0, int(blocks.size()) - 1)(rng))];
      uint32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      tokenizer_detail::append_utf8(s, char32_t(cp));
    }
    std::string joined;
    for (const auto& [piece, is_match] : split(re, s)) {
      ASSERT_TRUE(is_match) << "a gap " << nlohmann::json(piece).dump() << " in " << nlohmann::json(s).dump();
      joined += piece;
    }
    ASSERT_EQ(joined, s);
  }
}

TEST(TokenizerPreTokenizer, OnigurumaClasses) {
  // tokenizers' Oniguruma knows Unicode 16; PCRE2 10.42 knows 14. U+1C89 (CYRILLIC CAPITAL LETTER
  // TJE, 16.0) is a letter to tokenizers, so "aᲉb" is one word; U+1D2C0 (a Kaktovik numeral,
  // 15.0) is a number. U+180E is in PCRE2's \s but not in the White_Space property.
  const tokenizer_detail::SplitRegex re(kQwenRegex, "test");
  using P = std::vector<std::pair<std::string, bool>>;
  EXPECT_EQ(split(re, "a\xE1\xB2\x89" "b"), (P{{"a\xE1\xB2\x89" "b", true}}));
  EXPECT_EQ(split(re, "x\xF0\x9D\x8B\x80"), (P{{"x", true}, {"\xF0\x9D\x8B\x80", true}}));
  EXPECT_EQ(split(re, "a\xE1\xA0\x8E!"), (P{{"a", true}, {"\xE1\xA0\x8E!", true}}));  // PCRE2's \s: 3 pieces
  EXPECT_TRUE(tokenizer_detail::needs_oniguruma_classes("x\xE1\xA0\x8E"));
  EXPECT_FALSE(tokenizer_detail::needs_oniguruma_classes("plain text, 生活, 😊"));
  const std::string patched = tokenizer_detail::oniguruma_compatible("\\s+(?!\\S)|[^\\s\\p{L}]\\p{N}");
  EXPECT_EQ(patched.find("\\s"), std::string::npos) << patched;
  EXPECT_EQ(patched.find("\\S"), std::string::npos) << patched;
  EXPECT_NE(patched.find("\\p{N}\\x{"), std::string::npos) << patched;
}

}  // namespace
}  // namespace di
