// safetensors reading, writing and checkpoint loading: round trips, sharded checkpoints, and one test
// per kind of corrupt file, each checking that the error names what is wrong.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "support/expect_error.h"
#include "support/temp_dir.h"

namespace di {
namespace {

using di::testing::throws_error_with;

namespace fs = std::filesystem;

template <typename T>
std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Element i of a mapped tensor. Offsets in a file need not be aligned to the element size (tensors
// are laid out back to back), so this reads through memcpy.
template <typename T>
T elem(const TensorView& v, size_t i) {
  T x;
  std::memcpy(&x, static_cast<const uint8_t*>(v.data) + i * sizeof(T), sizeof(T));
  return x;
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

void write_text(const fs::path& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The bytes of a safetensors file with the given header text (its length taken as is) and data.
std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data = {},
                              uint64_t header_len_override = UINT64_MAX) {
  uint64_t n = header_len_override == UINT64_MAX ? header.size() : header_len_override;
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

class TempDirTest : public testing::TempDirTest {
 protected:
  // Writes a file of the given raw bytes and checks that reading it fails naming the file and `words`.
  ::testing::AssertionResult corrupt_fails(const std::vector<uint8_t>& bytes,
                                           std::initializer_list<std::string> words) {
    const fs::path p = dir_ / "bad.safetensors";
    write_file(p, bytes);
    auto r = throws_error_with([&] { SafetensorsFile f(p); }, words);
    if (!r) return r;
    return throws_error_with([&] { SafetensorsFile f(p); }, {p.string()});
  }

};

class SafetensorsTest : public TempDirTest {};
class CheckpointTest : public TempDirTest {};

// Three small tensors of different dtypes, as written by write_safetensors.
std::vector<TensorToWrite> sample_tensors() {
  std::vector<uint16_t> bf;
  for (float x : {1.0f, -2.5f, 0.125f, 3.0f, 100.0f, -0.0f}) bf.push_back(f32_to_bf16(x));
  return {
      {"model.embed.weight", DType::bf16, {2, 3}, to_bytes(bf)},
      {"model.norm.weight", DType::f32, {4}, to_bytes(std::vector<float>{0.5f, -1.0f, 2.0f, 1e-6f})},
      {"positions", DType::i64, {1, 3}, to_bytes(std::vector<int64_t>{0, -7, int64_t(1) << 40})},
  };
}

// ------------------------------------------------------------------------------------------------
// Round trips

TEST_F(SafetensorsTest, RoundTripBf16F32I64) {
  const fs::path p = dir_ / "m.safetensors";
  const auto tensors = sample_tensors();
  write_safetensors(p, tensors, {{"format", "pt"}, {"note", "hello"}});
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));

  // The header length is a multiple of 8 and "__metadata__" comes first.
  const auto raw = read_file(p);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(raw[i]) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  const std::string header(raw.begin() + 8, raw.begin() + 8 + long(n));
  EXPECT_EQ(header.rfind("{\"__metadata__\":", 0), 0u) << header;
  EXPECT_LT(header.find("model.embed.weight"), header.find("model.norm.weight"));
  EXPECT_LT(header.find("model.norm.weight"), header.find("positions"));

  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.entries().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "hello");
  EXPECT_EQ(f.data_bytes(), 12u + 16u + 24u);

  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const auto& e = f.entries().at(t.name);
    EXPECT_EQ(e.name, t.name);
    EXPECT_EQ(e.view.dtype, t.dtype);
    EXPECT_EQ(e.view.shape, t.shape);
    EXPECT_EQ(e.view.device, Device::cpu);
    EXPECT_EQ(e.begin, offset);
    EXPECT_EQ(e.end, offset + t.bytes.size());
    EXPECT_EQ(e.view.data, f.data_section() + e.begin);
    ASSERT_EQ(e.view.nbytes(), t.bytes.size());
    EXPECT_EQ(std::memcmp(e.view.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
    offset = e.end;
  }

  const auto& emb = f.entries().at("model.embed.weight").view;
  EXPECT_EQ(bf16_to_f32(elem<uint16_t>(emb, 1)), -2.5f);
  EXPECT_EQ(bf16_to_f32(elem<uint16_t>(emb, 4)), 100.0f);
  const auto& norm = f.entries().at("model.norm.weight").view;
  EXPECT_EQ(elem<float>(norm, 0), 0.5f);
  EXPECT_EQ(elem<float>(norm, 3), 1e-6f);
  const auto& pos = f.entries().at("positions").view;
  EXPECT_EQ(elem<int64_t>(pos, 1), -7);
  EXPECT_EQ(elem<int64_t>(pos, 2), int64_t(1) << 40);
}

TEST_F(SafetensorsTest, RoundTripScalarEmptyAndNoMetadata) {
  const fs::path p = dir_ / "m.safetensors";
  write_safetensors(p,
                    {{"scalar", DType::f32, {}, to_bytes(std::vector<float>{42.0f})},
                     {"empty", DType::f16, {0, 5}, {}},
                     {"bytes", DType::u8, {3}, {1, 2, 3}},
                     {"ints", DType::i32, {2}, to_bytes(std::vector<int32_t>{-1, 7})},
                     {"doubles", DType::f64, {1}, to_bytes(std::vector<double>{3.25})}},
                    {});
  const auto raw = read_file(p);
  EXPECT_EQ(std::string(raw.begin() + 8, raw.end()).find("__metadata__"), std::string::npos);
  SafetensorsFile f(p);
  EXPECT_TRUE(f.metadata().empty());
  ASSERT_EQ(f.entries().size(), 5u);
  EXPECT_EQ(f.entries().at("scalar").view.shape, Shape{});
  EXPECT_EQ(elem<float>(f.entries().at("scalar").view, 0), 42.0f);
  EXPECT_EQ(f.entries().at("empty").view.shape, (Shape{0, 5}));
  EXPECT_EQ(f.entries().at("empty").view.nbytes(), 0u);
  EXPECT_EQ(elem<uint8_t>(f.entries().at("bytes").view, 2), 3);
  EXPECT_EQ(elem<int32_t>(f.entries().at("ints").view, 0), -1);
  EXPECT_EQ(elem<double>(f.entries().at("doubles").view, 0), 3.25);
}

TEST_F(SafetensorsTest, WriteRejectsWrongByteCount) {
  const fs::path p = dir_ / "m.safetensors";
  EXPECT_TRUE(throws_error_with(
      [&] { write_safetensors(p, {{"w.bad", DType::f32, {2, 2}, std::vector<uint8_t>(15)}}); },
      {"w.bad", "16", "15", p.string()}));
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST_F(SafetensorsTest, WriteRejectsDuplicateName) {
  const fs::path p = dir_ / "m.safetensors";
  EXPECT_TRUE(throws_error_with(
      [&] {
        write_safetensors(p, {{"dup", DType::u8, {1}, {1}}, {"dup", DType::u8, {1}, {2}}});
      },
      {"dup", "twice"}));
}

TEST_F(SafetensorsTest, WriteReplacesExistingFile) {
  const fs::path p = dir_ / "m.safetensors";
  write_text(p, "old contents");
  write_safetensors(p, {{"a", DType::u8, {2}, {9, 8}}});
  SafetensorsFile f(p);
  EXPECT_EQ(elem<uint8_t>(f.entries().at("a").view, 1), 8);
}

// ------------------------------------------------------------------------------------------------
// Corrupt files: one test per case

TEST_F(SafetensorsTest, MissingFile) {
  const fs::path p = dir_ / "nope.safetensors";
  EXPECT_TRUE(throws_error_with([&] { SafetensorsFile f(p); }, {p.string(), "cannot open"}));
}

TEST_F(SafetensorsTest, DirectoryIsNotAFile) {
  EXPECT_TRUE(throws_error_with([&] { SafetensorsFile f(dir_); }, {dir_.string(), "regular file"}));
}

TEST_F(SafetensorsTest, EmptyFile) { EXPECT_TRUE(corrupt_fails({}, {"at least 8 bytes", "0 bytes"})); }

TEST_F(SafetensorsTest, ShorterThan8Bytes) {
  EXPECT_TRUE(corrupt_fails({1, 0, 0, 0, 0}, {"at least 8 bytes", "5 bytes"}));
}

TEST_F(SafetensorsTest, HeaderLengthPastEnd) {
  auto bytes = raw_file("{}", {}, 1000);  // 10 bytes in all
  EXPECT_TRUE(corrupt_fails(bytes, {"header length 1000 past the end of the file of size 10"}));
}

TEST_F(SafetensorsTest, HeaderLengthHugeDoesNotOverflow) {
  auto bytes = raw_file("{}", {}, UINT64_MAX - 3);
  EXPECT_TRUE(corrupt_fails(bytes, {"header length 18446744073709551612 past the end of the file of size 10"}));
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  EXPECT_TRUE(corrupt_fails(raw_file("{\"a\": [1, 2"), {"not valid JSON"}));
  EXPECT_TRUE(corrupt_fails(raw_file("hello"), {"not valid JSON"}));
  EXPECT_TRUE(corrupt_fails(raw_file(""), {"not valid JSON"}));
  EXPECT_TRUE(corrupt_fails(raw_file("{\"\xff\": 1}"), {"not valid JSON"}));  // not UTF-8
}

TEST_F(SafetensorsTest, HeaderNotObject) {
  EXPECT_TRUE(corrupt_fails(raw_file("[1, 2]"), {"JSON object", "array"}));
  EXPECT_TRUE(corrupt_fails(raw_file("7"), {"JSON object", "number"}));
}

TEST_F(SafetensorsTest, EntryNotObject) {
  EXPECT_TRUE(corrupt_fails(raw_file(R"({"w.weight": [1, 2]})"), {"w.weight", "JSON object", "array"}));
}

TEST_F(SafetensorsTest, EntryMissingFields) {
  EXPECT_TRUE(corrupt_fails(raw_file(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", std::vector<uint8_t>(4)),
                            {"w", "lacks", "\"dtype\""}));
  EXPECT_TRUE(corrupt_fails(raw_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", std::vector<uint8_t>(4)),
                            {"w", "lacks", "\"shape\""}));
  EXPECT_TRUE(corrupt_fails(raw_file(R"({"w": {"dtype": "F32", "shape": [1]}})", std::vector<uint8_t>(4)),
                            {"w", "lacks", "\"data_offsets\""}));
}

TEST_F(SafetensorsTest, UnknownDtype) {
  EXPECT_TRUE(corrupt_fails(
      raw_file(R"({"w.q": {"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 4]}})", std::vector<uint8_t>(4)),
      {"w.q", "unknown dtype", "Q4_K"}));
  EXPECT_TRUE(corrupt_fails(
      raw_file(R"({"w.q": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", std::vector<uint8_t>(4)),
      {"w.q", "dtype", "string"}));
  EXPECT_TRUE(throws_error_with([] { parse_safetensors_dtype("F8_E4M3", "somewhere"); },
                                {"somewhere", "F8_E4M3", "unknown dtype"}));
  EXPECT_EQ(parse_safetensors_dtype("BF16", "x"), DType::bf16);
  EXPECT_EQ(parse_safetensors_dtype("U8", "x"), DType::u8);
}

TEST_F(SafetensorsTest, BadShape) {
  const std::vector<uint8_t> data(8);
  for (const char* shape : {"3", "[2, -1]", "[2.5]", "[\"2\"]", "[[2]]", "null", "[18446744073709551615]",
                            "[1e3]", "[99999999999999999999999]"}) {
    const std::string h =
        std::string(R"({"w.s": {"dtype": "F32", "shape": )") + shape + R"(, "data_offsets": [0, 8]}})";
    EXPECT_TRUE(corrupt_fails(raw_file(h, data), {"w.s", "shape", "non-negative integers"})) << shape;
  }
}

TEST_F(SafetensorsTest, ShapeOverflow) {
  const std::string h =
      R"({"w.big": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h, std::vector<uint8_t>(8)), {"w.big", "overflows"}));
  // numel fits in 64 bits but numel * 8 bytes does not
  const std::string h2 = R"({"w.big": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 8]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h2, std::vector<uint8_t>(8)), {"w.big", "overflows"}));
}

TEST_F(SafetensorsTest, BadDataOffsets) {
  const std::vector<uint8_t> data(8);
  for (const char* offs : {"5", "[0]", "[0, 8, 8]", "[-1, 7]", "[0, 8.0]", "[\"0\", 8]", "{}"}) {
    const std::string h = std::string(R"({"w.o": {"dtype": "U8", "shape": [8], "data_offsets": )") + offs + "}}";
    EXPECT_TRUE(corrupt_fails(raw_file(h, data), {"w.o", "data_offsets", "two non-negative integers"})) << offs;
  }
}

TEST_F(SafetensorsTest, DataOffsetsBeginAfterEnd) {
  const std::string h = R"({"w.o": {"dtype": "U8", "shape": [0], "data_offsets": [6, 2]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h, std::vector<uint8_t>(8)), {"w.o", "[6, 2]", "begin > end"}));
}

TEST_F(SafetensorsTest, EndPastDataSection) {
  const std::string h = R"({"w.e": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h, std::vector<uint8_t>(12)),
                            {"w.e", "end 16", "past the end of the data section of 12 bytes"}));
  const std::string h2 = R"({"w.e": {"dtype": "U8", "shape": [0], "data_offsets": [18446744073709551615, 18446744073709551615]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h2, std::vector<uint8_t>(12)), {"w.e", "past the end of the data section"}));
}

TEST_F(SafetensorsTest, ByteCountMismatch) {
  const std::string h = R"({"w.m": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 12]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h, std::vector<uint8_t>(16)),
                            {"w.m", "BF16", "[2, 4]", "need 16 bytes", "span 12 bytes"}));
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const std::string h = R"({"layer.a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                        R"( "layer.b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h, std::vector<uint8_t>(12)), {"layer.a", "layer.b", "overlap"}));
  // One range inside another, not adjacent in begin order.
  const std::string h2 = R"({"outer": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},)"
                         R"( "first": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},)"
                         R"( "later": {"dtype": "U8", "shape": [2], "data_offsets": [10, 12]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h2, std::vector<uint8_t>(16)), {"outer", "overlap"}));
  // Identical ranges overlap too; empty tensors at the same offset do not.
  const std::string h3 = R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                         R"( "y": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})";
  EXPECT_TRUE(corrupt_fails(raw_file(h3, std::vector<uint8_t>(4)), {"x", "y", "overlap"}));
  const std::string ok = R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},)"
                         R"( "e1": {"dtype": "U8", "shape": [0], "data_offsets": [2, 2]},)"
                         R"( "e2": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},)"
                         R"( "z": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})";
  write_file(dir_ / "ok.safetensors", raw_file(ok, std::vector<uint8_t>(8)));
  SafetensorsFile f(dir_ / "ok.safetensors");
  EXPECT_EQ(f.entries().size(), 4u);
}

TEST_F(SafetensorsTest, BadMetadata) {
  EXPECT_TRUE(corrupt_fails(raw_file(R"({"__metadata__": ["pt"]})"), {"__metadata__", "string to string"}));
  EXPECT_TRUE(corrupt_fails(raw_file(R"({"__metadata__": {"format": "pt", "step": 100}})"),
                            {"__metadata__", "\"step\"", "number"}));
  write_file(dir_ / "ok.safetensors", raw_file(R"({"__metadata__": {"format": "pt"}})"));
  SafetensorsFile f(dir_ / "ok.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(f.entries().empty());
}

TEST_F(SafetensorsTest, TruncatedDataNamesTensor) {
  const fs::path good = dir_ / "good.safetensors";
  write_safetensors(good, sample_tensors());
  auto bytes = read_file(good);
  bytes.erase(bytes.end() - 5, bytes.end());  // cuts into "positions", the last tensor
  EXPECT_TRUE(corrupt_fails(bytes, {"positions", "past the end of the data section", "truncated"}));
}

// Random single-byte corruptions and truncations of a valid file: each either loads (and then every
// tensor lies inside the data section) or throws di::Error; nothing else, and never a crash.
TEST_F(SafetensorsTest, FuzzCorruptionsNeverCrash) {
  const fs::path good = dir_ / "good.safetensors";
  write_safetensors(good, sample_tensors(), {{"format", "pt"}});
  const auto original = read_file(good);
  const fs::path p = dir_ / "fuzz.safetensors";
  std::mt19937_64 rng(20240611);
  const std::string structural("0123456789[]{}\",:-.e \x00\xff", 23);
  int loaded = 0, rejected = 0;

  auto check = [&](const std::vector<uint8_t>& bytes, const std::string& what) {
    write_file(p, bytes);
    try {
      SafetensorsFile f(p);
      ++loaded;
      for (const auto& [name, e] : f.entries()) {
        ASSERT_LE(e.begin, e.end) << what;
        ASSERT_LE(e.end, f.data_bytes()) << what;
        ASSERT_EQ(e.end - e.begin, e.view.nbytes()) << what;
        ASSERT_EQ(e.view.data, f.data_section() + e.begin) << what;
        uint64_t sum = 0;  // touch every byte: must stay inside the mapping
        const auto* b = static_cast<const uint8_t*>(e.view.data);
        for (size_t i = 0; i < e.view.nbytes(); ++i) sum += b[i];
        (void)sum;
      }
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << what << ": threw a non-di::Error exception: " << e.what();
    }
  };

  for (int i = 0; i < 300; ++i) {
    auto bytes = original;
    const size_t pos = rng() % bytes.size();
    uint8_t v = (rng() % 2) ? structural[rng() % structural.size()] : uint8_t(rng());
    if (v == bytes[pos]) v ^= 0x01;
    bytes[pos] = v;
    check(bytes, "byte " + std::to_string(pos) + " set to " + std::to_string(v));
    if (HasFatalFailure()) return;
  }
  for (int i = 0; i < 50; ++i) {
    const size_t len = rng() % original.size();
    check(std::vector<uint8_t>(original.begin(), original.begin() + long(len)),
          "truncated to " + std::to_string(len) + " bytes");
    if (HasFatalFailure()) return;
  }
  RecordProperty("loaded", loaded);
  RecordProperty("rejected", rejected);
  EXPECT_EQ(loaded + rejected, 350);
  EXPECT_GT(rejected, 50);  // truncations alone always fail
}

// ------------------------------------------------------------------------------------------------
// Checkpoints

// Two shards and an index: a/b in shard 1, c in shard 2.
void write_sharded(const fs::path& dir) {
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {{"a", DType::f32, {2}, to_bytes(std::vector<float>{1.0f, 2.0f})},
                     {"b", DType::i64, {1}, to_bytes(std::vector<int64_t>{5})}});
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    {{"c", DType::bf16, {3}, to_bytes(std::vector<uint16_t>{f32_to_bf16(1.5f), 0, 0})}});
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 27}, "weight_map": {)"
             R"("a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",)"
             R"("c": "model-00002-of-00002.safetensors"}})");
}

TEST_F(CheckpointTest, SingleFile) {
  write_safetensors(dir_ / "model.safetensors", sample_tensors());
  Checkpoint ck(dir_);
  ASSERT_EQ(ck.files().size(), 1u);
  ASSERT_EQ(ck.tensors().size(), 3u);
  const auto& loc = ck.tensors().at("model.norm.weight");
  EXPECT_EQ(loc.file, ck.files()[0].get());
  EXPECT_EQ(elem<float>(loc.entry->view, 1), -1.0f);
  EXPECT_EQ(ck.total_bytes(), 52u);
}

TEST_F(CheckpointTest, ShardedMapsEachTensorToItsShard) {
  write_sharded(dir_);
  Checkpoint ck(dir_);
  ASSERT_EQ(ck.files().size(), 2u);
  ASSERT_EQ(ck.tensors().size(), 3u);
  EXPECT_EQ(ck.tensors().at("a").file->path().filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(ck.tensors().at("b").file->path().filename(), "model-00001-of-00002.safetensors");
  EXPECT_EQ(ck.tensors().at("c").file->path().filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(ck.tensors().at("a").file, ck.tensors().at("b").file);  // each shard opened once
  EXPECT_EQ(elem<float>(ck.tensors().at("a").entry->view, 1), 2.0f);
  EXPECT_EQ(elem<int64_t>(ck.tensors().at("b").entry->view, 0), 5);
  EXPECT_EQ(bf16_to_f32(elem<uint16_t>(ck.tensors().at("c").entry->view, 0)), 1.5f);
  EXPECT_EQ(ck.tensors().at("c").entry, &ck.tensors().at("c").file->entries().at("c"));
  EXPECT_EQ(ck.total_bytes(), 8u + 8u + 6u);
}

TEST_F(CheckpointTest, IndexTakesPrecedenceOverSingleFile) {
  write_sharded(dir_);
  write_safetensors(dir_ / "model.safetensors", {{"zzz", DType::u8, {1}, {1}}});
  Checkpoint ck(dir_);
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.tensors().count("zzz"), 0u);
}

TEST_F(CheckpointTest, PrefaultReportsProgress) {
  // ~1 MiB across two shards so that there are many pages.
  const size_t n = 128 * 1024;
  std::vector<uint8_t> big(n * 4, 1);
  write_safetensors(dir_ / "s1.safetensors", {{"x", DType::f32, {int64_t(n)}, big}});
  write_safetensors(dir_ / "s2.safetensors", {{"y", DType::u8, {int64_t(big.size()) + 3}, std::vector<uint8_t>(big.size() + 3, 2)}});
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  Checkpoint ck(dir_);
  const size_t total = ck.total_bytes();
  EXPECT_EQ(total, 2 * big.size() + 3);
  std::vector<std::pair<size_t, size_t>> calls;
  ck.prefault([&](size_t done, size_t all) { calls.emplace_back(done, all); });
  ASSERT_FALSE(calls.empty());
  EXPECT_GT(calls.size(), 10u);
  EXPECT_LE(calls.size(), 102u);
  EXPECT_EQ(calls.back(), std::make_pair(total, total));
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, total);
    if (i > 0) {
      EXPECT_GE(calls[i].first, calls[i - 1].first);
    }
  }
  ck.prefault(nullptr);  // no callback is fine
}

TEST_F(CheckpointTest, PrefaultOfEmptyCheckpoint) {
  write_safetensors(dir_ / "model.safetensors", {});
  Checkpoint ck(dir_);
  EXPECT_EQ(ck.total_bytes(), 0u);
  int calls = 0;
  ck.prefault([&](size_t done, size_t all) {
    ++calls;
    EXPECT_EQ(done, 0u);
    EXPECT_EQ(all, 0u);
  });
  EXPECT_EQ(calls, 1);
}

TEST_F(CheckpointTest, MissingDirectory) {
  const fs::path d = dir_ / "no_such_dir";
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(d); }, {d.string(), "does not exist"}));
}

TEST_F(CheckpointTest, PathIsAFile) {
  write_text(dir_ / "f", "x");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_ / "f"); }, {(dir_ / "f").string(), "directory"}));
}

TEST_F(CheckpointTest, EmptyDirectory) {
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); },
                                {"no model.safetensors or model.safetensors.index.json in " + dir_.string()}));
}

TEST_F(CheckpointTest, CorruptSingleFileNamesIt) {
  write_text(dir_ / "model.safetensors", "abc");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); },
                                {(dir_ / "model.safetensors").string(), "at least 8 bytes"}));
}

TEST_F(CheckpointTest, IndexNotJson) {
  write_sharded(dir_);
  write_text(dir_ / "model.safetensors.index.json", "{\"weight_map\": {");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); },
                                {(dir_ / "model.safetensors.index.json").string(), "not valid JSON"}));
}

TEST_F(CheckpointTest, IndexWithoutWeightMap) {
  write_sharded(dir_);
  const fs::path ip = dir_ / "model.safetensors.index.json";
  write_text(ip, R"({"metadata": {}})");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); }, {ip.string(), "weight_map"}));
  write_text(ip, R"({"weight_map": ["a"]})");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); }, {ip.string(), "weight_map"}));
  write_text(ip, R"({"weight_map": {"a": 1}})");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); }, {ip.string(), "weight_map", "a"}));
}

TEST_F(CheckpointTest, ShardFileMissing) {
  write_sharded(dir_);
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); },
                                {"model-00002-of-00002.safetensors", "does not exist"}));
}

TEST_F(CheckpointTest, ListedTensorNotInShard) {
  write_sharded(dir_);
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",)"
             R"("c": "model-00001-of-00002.safetensors"}})");
  // c is really in shard 2, which the index no longer names, so shard 1 lacks it.
  EXPECT_TRUE(throws_error_with(
      [&] { Checkpoint ck(dir_); },
      {"tensor c listed in index for shard model-00001-of-00002.safetensors but not found there"}));
}

TEST_F(CheckpointTest, ShardTensorNotInIndex) {
  write_sharded(dir_);
  write_text(dir_ / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); },
                                {"tensor b", "model-00001-of-00002.safetensors", "not listed in the index"}));
}

TEST_F(CheckpointTest, SameTensorInTwoShards) {
  write_sharded(dir_);
  write_safetensors(dir_ / "model-00002-of-00002.safetensors",
                    {{"a", DType::f32, {2}, to_bytes(std::vector<float>{3.0f, 4.0f})},
                     {"c", DType::bf16, {3}, std::vector<uint8_t>(6)}});
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); },
                                {"tensor a", "two shards", "model-00001-of-00002.safetensors",
                                 "model-00002-of-00002.safetensors"}));
}

TEST_F(CheckpointTest, CorruptShardNamesShardAndTensor) {
  write_sharded(dir_);
  const fs::path s2 = dir_ / "model-00002-of-00002.safetensors";
  auto bytes = read_file(s2);
  bytes.pop_back();
  write_file(s2, bytes);
  EXPECT_TRUE(throws_error_with([&] { Checkpoint ck(dir_); }, {s2.string(), "tensor c", "past the end"}));
}

}  // namespace
}  // namespace di
