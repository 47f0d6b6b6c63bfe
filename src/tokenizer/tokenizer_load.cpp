// Loading tokenizer.json and tokenizer_config.json.
//
// tokenizer.json is 15 MB, nearly all of it model.vocab (248k entries) and model.merges (500k pairs).
// A DOM of those would cost ~2M small allocations, so the file is read with nlohmann's SAX parser:
// vocab and merges go straight into flat arrays, and everything else is built into a small DOM that
// is then checked field by field. Exactly the configuration Qwen3.5 uses is accepted; anything else
// is a di::Error naming the file and the field.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace di {
namespace tokenizer_detail {

void AddedTokenMatcher::add(std::string_view content, int32_t id) {
  int32_t node = 0;
  for (const char ch : content) {
    const uint8_t b = uint8_t(ch);
    int32_t child = -1;
    for (const auto& [k, v] : nodes_[size_t(node)].next)
      if (k == b) child = v;
    if (child < 0) {
      child = int32_t(nodes_.size());
      nodes_[size_t(node)].next.emplace_back(b, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  nodes_[size_t(node)].id = id;
  const uint8_t b0 = uint8_t(content[0]);
  if (!first_[b0]) {
    first_[b0] = true;
    ++n_first_;
    single_first_ = n_first_ == 1 ? b0 : -1;
  }
}

size_t AddedTokenMatcher::longest_at(const unsigned char* p, size_t n, int32_t& id) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t child = -1;
    for (const auto& [k, v] : nodes_[size_t(node)].next)
      if (k == p[i]) {
        child = v;
        break;
      }
    if (child < 0) break;
    node = child;
    if (nodes_[size_t(node)].id >= 0) best = i + 1, id = nodes_[size_t(node)].id;
  }
  return best;
}

}  // namespace tokenizer_detail

namespace {

using nlohmann::json;
using tokenizer_detail::byte_level;
using tokenizer_detail::hash_bytes;

std::string read_file(const std::filesystem::path& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open {} ({})", path.string(), what, std::strerror(errno));
  std::string data;
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekg(0, std::ios::beg);
  if (size > 0) {
    data.resize(size_t(size));
    f.read(data.data(), size);
  }
  if (!f) fail("{}: cannot read {}", path.string(), what);
  return data;
}

// A short rendering of a JSON value for messages.
std::string show(const json* v) {
  if (!v) return "nothing (the field is missing)";
  std::string s = v->dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Reads tokenizer.json: model.vocab and model.merges into flat arrays, the rest into `rest`.
class TokenizerJsonReader : public nlohmann::json_sax<json> {
 public:
  struct VocabEntry {
    uint32_t off, len;  // in vocab_text
    int32_t id;
  };
  struct MergeEntry {
    uint32_t a_off, a_len, b_off, b_len;  // in merge_text
  };

  json rest;
  std::string vocab_text;
  std::vector<VocabEntry> vocab;
  bool saw_vocab = false;
  std::string merge_text;
  std::vector<MergeEntry> merges;
  bool saw_merges = false;
  std::string error;

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return bad_vocab_value(std::to_string(v));
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      if (v > uint64_t(std::numeric_limits<int32_t>::max())) return bad_vocab_value(std::to_string(v));
      vocab.push_back({uint32_t(vocab_text.size()), uint32_t(key_.size()), int32_t(v)});
      vocab_text += key_;
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t& s) override {
    if (mode_ == Mode::kVocab) return bad_vocab_value(s);
    return value(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::kVocab) return bad_vocab_value(json(v).dump());
    if (mode_ == Mode::kMerges) {
      const size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos || sp == 0 || sp + 1 == v.size())
        return fail_with(fmt::format("model.merges[{}]: expected \"left right\" (two tokens separated by one space) or "
                                     "[\"left\", \"right\"], found {}",
                                     merges.size(), json(v).dump()));
      add_merge(std::string_view(v).substr(0, sp), std::string_view(v).substr(sp + 1));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() == 2) return bad_pair();
      pair_.push_back(v);
      return true;
    }
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail_with("unexpected binary value"); }

  bool start_object(std::size_t) override {
    if (mode_ == Mode::kVocab) return bad_vocab_value("an object");
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair) return bad_pair();
    if (in_model() && key_ == "vocab") {
      if (saw_vocab) return fail_with("model.vocab appears twice");
      saw_vocab = true;
      mode_ = Mode::kVocab;
      return true;
    }
    json* v = value_ptr(json::object());
    if (stack_.size() == 1 && key_ == "model") model_ = v;
    stack_.push_back(v);
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kVocab) return bad_vocab_value("an array");
    if (mode_ == Mode::kMergePair) return bad_pair();
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (in_model() && key_ == "merges") {
      if (saw_merges) return fail_with("model.merges appears twice");
      saw_merges = true;
      mode_ = Mode::kMerges;
      return true;
    }
    stack_.push_back(value_ptr(json::array()));
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() != 2) return bad_pair();
      add_merge(pair_[0], pair_[1]);
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    error = fmt::format("not valid JSON (truncated or corrupt) near byte {}: {}", position, ex.what());
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  bool in_model() const { return mode_ == Mode::kDom && stack_.size() == 2 && stack_[1] == model_ && model_; }
  bool fail_with(std::string msg) {
    error = std::move(msg);
    return false;
  }
  bool bad_vocab_value(const std::string& found) {
    return fail_with(fmt::format("model.vocab[{}]: expected a non-negative integer id below 2^31, found {}",
                                 json(key_).dump(), found));
  }
  bool bad_pair() {
    return fail_with(fmt::format("model.merges[{}]: expected [\"left\", \"right\"] (two strings) or \"left right\"",
                                 merges.size()));
  }
  void add_merge(std::string_view a, std::string_view b) {
    MergeEntry e{uint32_t(merge_text.size()), uint32_t(a.size()), 0, uint32_t(b.size())};
    merge_text += a;
    e.b_off = uint32_t(merge_text.size());
    merge_text += b;
    merges.push_back(e);
  }
  // Places a value in the DOM under construction; returns where it went.
  json* value_ptr(json&& v) {
    if (stack_.empty()) {
      rest = std::move(v);
      return &rest;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json&& v) {
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair) return bad_pair();
    return value_ptr(std::move(v)) != nullptr;
  }

  Mode mode_ = Mode::kDom;
  std::vector<json*> stack_;
  json* model_ = nullptr;
  std::string key_;
  std::vector<std::string> pair_;
};

// An open-addressing map from the byte-level text of a vocabulary entry to its id. Loading looks up
// ~1.5M merge parts in it, nearly all cache misses, so a slot holds what the lookup needs (hash,
// where the text is, id) and callers can prefetch a slot before the lookup.
class VocabIndex {
 public:
  explicit VocabIndex(const std::string& text, size_t count) : text_(text) {
    size_t cap = 16;
    while (cap < count * 2) cap <<= 1;
    slots_.assign(cap, Slot{0, 0, 0, -1});
    mask_ = cap - 1;
  }
  // Inserts; returns the id of an earlier entry with the same text, or -1.
  int32_t insert(uint32_t off, uint32_t len, int32_t id) {
    const std::string_view k = std::string_view(text_).substr(off, len);
    const uint64_t h = hash_bytes(k);
    size_t s = h & mask_;
    while (slots_[s].id >= 0) {
      if (slots_[s].hash == h && key(slots_[s]) == k) return slots_[s].id;
      s = (s + 1) & mask_;
    }
    slots_[s] = Slot{h, off, len, id};
    return -1;
  }
  void prefetch(uint64_t h) const { __builtin_prefetch(&slots_[h & mask_]); }
  // The id of the entry with this text (whose hash_bytes is h), or -1.
  int32_t find(std::string_view k, uint64_t h) const {
    size_t s = h & mask_;
    while (slots_[s].id >= 0) {
      if (slots_[s].hash == h && key(slots_[s]) == k) return slots_[s].id;
      s = (s + 1) & mask_;
    }
    return -1;
  }
  int32_t find(std::string_view k) const { return find(k, hash_bytes(k)); }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t off, len;  // the text, in text_
    int32_t id;         // -1: free
  };
  std::string_view key(const Slot& s) const { return std::string_view(text_).substr(s.off, s.len); }
  const std::string& text_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Field checks on the DOM part of tokenizer.json; `where` is the file path for messages.
struct Checker {
  const std::string& where;

  [[noreturn]] void bad(const std::string& field, const std::string& expected, const json* found) const {
    fail("{}: {}: expected {}, found {}", where, field, expected, show(found));
  }
  static const json* get(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& object(const json* v, const std::string& field) const {
    if (!v || !v->is_object()) bad(field, "an object", v);
    return *v;
  }
  std::string string(const json& obj, const char* key, const std::string& field) const {
    const json* v = get(obj, key);
    if (!v || !v->is_string()) bad(field, "a string", v);
    return v->get<std::string>();
  }
  void equals_string(const json& obj, const char* key, const std::string& field, const char* want) const {
    const json* v = get(obj, key);
    if (!v || !v->is_string() || v->get_ref<const std::string&>() != want) bad(field, fmt::format("\"{}\"", want), v);
  }
  // A boolean that must be `want`; `missing_ok` accepts an absent field.
  void equals_bool(const json& obj, const char* key, const std::string& field, bool want, bool missing_ok) const {
    const json* v = get(obj, key);
    if (!v && missing_ok) return;
    if (!v || !v->is_boolean() || v->get<bool>() != want) bad(field, want ? "true" : "false", v);
  }
  void any_bool(const json& obj, const char* key, const std::string& field) const {
    const json* v = get(obj, key);
    if (v && !v->is_boolean()) bad(field, "a boolean", v);
  }
  void null_or_missing(const json& obj, const char* key, const std::string& field, const char* why) const {
    const json* v = get(obj, key);
    if (v && !v->is_null()) bad(field, fmt::format("null ({})", why), v);
  }
  void empty_string_or_null(const json& obj, const char* key, const std::string& field) const {
    const json* v = get(obj, key);
    if (v && !v->is_null() && !(v->is_string() && v->get_ref<const std::string&>().empty()))
      bad(field, "\"\" or null", v);
  }
};

void check_byte_level(const Checker& c, const json& obj, const std::string& field, bool check_use_regex) {
  c.equals_string(obj, "type", field + ".type", "ByteLevel");
  c.equals_bool(obj, "add_prefix_space", field + ".add_prefix_space", false, true);
  c.any_bool(obj, "trim_offsets", field + ".trim_offsets");  // affects offsets only
  if (check_use_regex) c.equals_bool(obj, "use_regex", field + ".use_regex", false, false);
}

void load_model_settings(const Checker& c, const json& root) {
  const json& model = c.object(Checker::get(root, "model"), "model");
  c.equals_string(model, "type", "model.type", "BPE");
  c.null_or_missing(model, "dropout", "model.dropout", "BPE dropout is not supported");
  c.null_or_missing(model, "unk_token", "model.unk_token", "an unknown token is not supported");
  c.empty_string_or_null(model, "continuing_subword_prefix", "model.continuing_subword_prefix");
  c.empty_string_or_null(model, "end_of_word_suffix", "model.end_of_word_suffix");
  c.any_bool(model, "fuse_unk", "model.fuse_unk");  // only matters with an unknown token
  c.equals_bool(model, "byte_fallback", "model.byte_fallback", false, true);
  c.equals_bool(model, "ignore_merges", "model.ignore_merges", false, true);
}

// The pre-tokenizer: Sequence[Split(Regex, Isolated, invert false), ByteLevel(no prefix space,
// no regex)]. Returns the regex.
std::string load_pre_tokenizer(const Checker& c, const json& root) {
  const json& pre = c.object(Checker::get(root, "pre_tokenizer"), "pre_tokenizer");
  c.equals_string(pre, "type", "pre_tokenizer.type", "Sequence");
  const json* list = Checker::get(pre, "pretokenizers");
  if (!list || !list->is_array() || list->size() != 2)
    c.bad("pre_tokenizer.pretokenizers", "an array of two: [Split, ByteLevel]", list);
  const json& split = c.object(&(*list)[0], "pre_tokenizer.pretokenizers[0]");
  c.equals_string(split, "type", "pre_tokenizer.pretokenizers[0].type", "Split");
  c.equals_string(split, "behavior", "pre_tokenizer.pretokenizers[0].behavior", "Isolated");
  c.equals_bool(split, "invert", "pre_tokenizer.pretokenizers[0].invert", false, false);
  const json& pattern = c.object(Checker::get(split, "pattern"), "pre_tokenizer.pretokenizers[0].pattern");
  const std::string regex = c.string(pattern, "Regex", "pre_tokenizer.pretokenizers[0].pattern.Regex");
  check_byte_level(c, c.object(&(*list)[1], "pre_tokenizer.pretokenizers[1]"), "pre_tokenizer.pretokenizers[1]", true);
  return regex;
}

// "<|im_end|>" or {"content": "<|im_end|>", ...}, or null.
std::optional<std::string> token_text(const json& config, const char* key, const std::string& where) {
  const json* v = Checker::get(config, key);
  if (!v || v->is_null()) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) {
    const json* content = Checker::get(*v, "content");
    if (content && content->is_string()) return content->get<std::string>();
  }
  fail("{}: {}: expected a string or an object with a string \"content\", found {}", where, key, show(v));
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  const std::filesystem::path json_path = dir / "tokenizer.json";
  m.json_path = json_path.string();
  const std::string& where = m.json_path;
  const Checker c{where};

  // --- Parse.
  TokenizerJsonReader r;
  {
    const std::string data = read_file(json_path, "tokenizer.json");
    bool ok = false;
    try {
      ok = json::sax_parse(data.begin(), data.end(), &r);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
    if (!ok) fail("{}: {}", where, r.error.empty() ? "not valid JSON" : r.error);
  }
  const json& root = r.rest;
  if (!root.is_object()) c.bad("the top level", "an object", &root);

  // --- Settings other than the vocabulary.
  c.null_or_missing(root, "truncation", "truncation", "truncation is not supported");
  c.null_or_missing(root, "padding", "padding", "padding is not supported");
  load_model_settings(c, root);
  if (const json* norm = Checker::get(root, "normalizer"); norm && !norm->is_null()) {
    c.object(norm, "normalizer");
    c.equals_string(*norm, "type", "normalizer.type", "NFC");
    m.nfc = true;
  }
  const std::string regex = load_pre_tokenizer(c, root);
  check_byte_level(c, c.object(Checker::get(root, "decoder"), "decoder"), "decoder", false);
  if (const json* post = Checker::get(root, "post_processor"); post && !post->is_null())
    check_byte_level(c, c.object(post, "post_processor"), "post_processor", false);
  m.split.emplace(regex, where + ": pre_tokenizer.pretokenizers[0].pattern.Regex");

  // --- Vocabulary.
  const json& model = *Checker::get(root, "model");  // an object: load_model_settings checked
  if (!r.saw_vocab) c.bad("model.vocab", "an object mapping token to id", Checker::get(model, "vocab"));
  if (!r.saw_merges) c.bad("model.merges", "an array of merges", Checker::get(model, "merges"));
  if (r.vocab.empty()) fail("{}: model.vocab: expected at least the 256 byte-level tokens, found an empty object", where);
  int64_t max_id = -1;
  for (const auto& e : r.vocab) max_id = std::max<int64_t>(max_id, e.id);
  std::vector<int32_t> entry_of_id(size_t(max_id + 1), -1);
  VocabIndex index(r.vocab_text, r.vocab.size());
  auto vocab_key = [&](int32_t i) { return std::string_view(r.vocab_text).substr(r.vocab[size_t(i)].off, r.vocab[size_t(i)].len); };
  constexpr size_t kAhead = 16;  // prefetch distance (slots are cache misses)
  for (size_t i = 0; i < r.vocab.size(); ++i) {
    if (i + kAhead < r.vocab.size()) {
      const auto& ahead = r.vocab[i + kAhead];
      index.prefetch(hash_bytes(std::string_view(r.vocab_text).substr(ahead.off, ahead.len)));
    }
    const auto& e = r.vocab[i];
    if (index.insert(e.off, e.len, e.id) >= 0)
      fail("{}: model.vocab: token {} appears twice", where, json(std::string(vocab_key(int32_t(i)))).dump());
    if (entry_of_id[size_t(e.id)] >= 0)
      fail("{}: model.vocab: id {} is used by both {} and {}", where, e.id,
           json(std::string(vocab_key(entry_of_id[size_t(e.id)]))).dump(), json(std::string(vocab_key(int32_t(i)))).dump());
    entry_of_id[size_t(e.id)] = int32_t(i);
  }

  // --- Added tokens (they may extend the id range).
  struct Added {
    int32_t id;
    std::string content;
    bool special;
  };
  std::vector<Added> added;
  if (const json* list = Checker::get(root, "added_tokens"); list && !list->is_null()) {
    if (!list->is_array()) c.bad("added_tokens", "an array", list);
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string f = fmt::format("added_tokens[{}]", i);
      const json& t = c.object(&(*list)[i], f);
      const json* id = Checker::get(t, "id");
      if (!id || !id->is_number_unsigned() || id->get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
        c.bad(f + ".id", "a non-negative integer below 2^31", id);
      Added a{id->get<int32_t>(), c.string(t, "content", f + ".content"), false};
      if (a.content.empty()) c.bad(f + ".content", "a non-empty string", Checker::get(t, "content"));
      if (tokenizer_detail::utf8_first_invalid(a.content) != std::string_view::npos)
        c.bad(f + ".content", "valid UTF-8", Checker::get(t, "content"));
      c.equals_bool(t, "single_word", f + ".single_word", false, true);
      c.equals_bool(t, "lstrip", f + ".lstrip", false, true);
      c.equals_bool(t, "rstrip", f + ".rstrip", false, true);
      c.equals_bool(t, "normalized", f + ".normalized", false, false);
      const json* special = Checker::get(t, "special");
      if (special && !special->is_boolean()) c.bad(f + ".special", "a boolean", special);
      a.special = special && special->get<bool>();
      max_id = std::max<int64_t>(max_id, a.id);
      added.push_back(std::move(a));
    }
  }

  const size_t n_ids = size_t(max_id + 1);
  m.bytes.assign(n_ids, std::string());
  m.flags.assign(n_ids, 0);
  for (size_t id = 0; id < entry_of_id.size(); ++id) {
    const int32_t e = entry_of_id[id];
    if (e < 0) continue;
    if (!tokenizer_detail::byte_level_to_bytes(vocab_key(e), m.bytes[id]))
      fail("{}: model.vocab[{}]: expected a byte-level token (characters of GPT-2's byte alphabet), found other characters",
           where, json(std::string(vocab_key(e))).dump());
    m.flags[id] = Impl::kPresent;
  }
  for (size_t i = 0; i < added.size(); ++i) {
    const Added& a = added[i];
    const size_t id = size_t(a.id);
    if (m.flags[id] & Impl::kAdded)
      fail("{}: added_tokens[{}]: id {} is used by another added token too", where, i, a.id);
    if (m.flags[id] & Impl::kPresent) {
      // tokenizers allows an added token only as a marking of the vocabulary entry with its text.
      if (vocab_key(entry_of_id[id]) != a.content)
        fail("{}: added_tokens[{}]: id {} ({}) is already the vocabulary's {}", where, i, a.id, json(a.content).dump(),
             json(std::string(vocab_key(entry_of_id[id]))).dump());
    }
    if (!m.added_by_content.emplace(a.content, a.id).second)
      fail("{}: added_tokens[{}]: content {} is already the text of another added token", where, i, json(a.content).dump());
    // tokenizers' ByteLevel decoder maps the characters of every token through the byte alphabet and
    // keeps a token's own UTF-8 only when some character is outside it. Every Qwen3.5 added token is
    // printable ASCII, which maps to itself.
    std::string b;
    m.bytes[id] = tokenizer_detail::byte_level_to_bytes(a.content, b) ? b : a.content;
    m.flags[id] = uint8_t(Impl::kPresent | Impl::kAdded | (a.special ? Impl::kSpecial : 0));
    m.added.add(a.content, a.id);
  }

  // --- Byte tokens and merges.
  const auto& alphabet = byte_level();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    tokenizer_detail::append_utf8(ch, alphabet.byte_to_char[b]);
    const int32_t id = index.find(ch);
    if (id < 0)
      fail("{}: model.vocab: expected the byte-level token {} for byte 0x{:02X}, found none", where, json(ch).dump(), b);
    m.byte_ids[b] = id;
  }
  // In batches: hash and prefetch every lookup of a batch before doing any (the tables are far larger
  // than the caches). A merge's two parts lie next to each other in merge_text, so the text of the
  // merged token needs no copy.
  m.merges.reserve(r.merges.size());
  constexpr size_t kBatch = 32;
  uint64_t hashes[kBatch][3];
  int32_t ids[kBatch][3];
  const std::string_view mtext(r.merge_text);
  for (size_t base = 0; base < r.merges.size(); base += kBatch) {
    const size_t count = std::min(kBatch, r.merges.size() - base);
    for (size_t k = 0; k < count; ++k) {
      const auto& me = r.merges[base + k];
      hashes[k][0] = hash_bytes(mtext.substr(me.a_off, me.a_len));
      hashes[k][1] = hash_bytes(mtext.substr(me.b_off, me.b_len));
      hashes[k][2] = hash_bytes(mtext.substr(me.a_off, me.a_len + me.b_len));
      for (const uint64_t h : hashes[k]) index.prefetch(h);
    }
    for (size_t k = 0; k < count; ++k) {
      const size_t i = base + k;
      const auto& me = r.merges[i];
      const std::string_view a = mtext.substr(me.a_off, me.a_len);
      const std::string_view b = mtext.substr(me.b_off, me.b_len);
      const std::string_view joined = mtext.substr(me.a_off, me.a_len + me.b_len);
      const int32_t ia = index.find(a, hashes[k][0]), ib = index.find(b, hashes[k][1]), ij = index.find(joined, hashes[k][2]);
      if (ia < 0 || ib < 0 || ij < 0) {
        const std::string missing(ia < 0 ? a : ib < 0 ? b : joined);
        fail("{}: model.merges[{}] ({} + {}): expected tokens of model.vocab, found {} which is not in it", where, i,
             json(std::string(a)).dump(), json(std::string(b)).dump(), json(missing).dump());
      }
      ids[k][0] = ia, ids[k][1] = ib, ids[k][2] = ij;
      m.merges.prefetch(ia, ib);
    }
    for (size_t k = 0; k < count; ++k) m.merges.insert(ids[k][0], ids[k][1], uint32_t(base + k), ids[k][2]);
  }

  // --- tokenizer_config.json and the chat template.
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  auto resolve = [&](const std::string& text, const char* key, const std::string& cwhere) -> int32_t {
    if (auto it = m.added_by_content.find(text); it != m.added_by_content.end()) return it->second;
    if (const int32_t id = index.find(text); id >= 0) return id;
    fail("{}: {}: expected the text of a token, found {} which is no token", cwhere, key, json(text).dump());
  };
  bool have_template = false;
  if (std::filesystem::exists(config_path)) {
    const std::string cwhere = config_path.string();
    json config;
    try {
      config = json::parse(read_file(config_path, "tokenizer_config.json"));
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", cwhere, e.what());
    }
    if (!config.is_object()) fail("{}: expected a JSON object at the top level, found {}", cwhere, show(&config));
    if (auto eos = token_text(config, "eos_token", cwhere)) m.eos = resolve(*eos, "eos_token", cwhere);
    if (auto pad = token_text(config, "pad_token", cwhere)) m.pad = resolve(*pad, "pad_token", cwhere);
    if (const json* t = Checker::get(config, "chat_template"); t && !t->is_null()) {
      if (t->is_string()) {
        m.chat_template = t->get<std::string>();
      } else if (t->is_array()) {
        bool found = false;
        for (const json& e : *t) {
          const json* name = Checker::get(e, "name");
          const json* tmpl = Checker::get(e, "template");
          if (!name || !name->is_string() || !tmpl || !tmpl->is_string())
            fail("{}: chat_template: expected a list of {{\"name\": string, \"template\": string}}, found {}", cwhere, show(&e));
          if (name->get_ref<const std::string&>() == "default") m.chat_template = tmpl->get<std::string>(), found = true;
        }
        if (!found) fail("{}: chat_template: expected a template named \"default\" in the list, found none", cwhere);
      } else {
        fail("{}: chat_template: expected a string or a list of named templates, found {}", cwhere, show(t));
      }
      have_template = true;
    }
  }
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (!have_template && std::filesystem::exists(jinja_path)) m.chat_template = read_file(jinja_path, "chat_template.jinja");

  return Tokenizer(std::move(impl));
}

}  // namespace di
