// Loading a Qwen3.5 text model's weights: tiny checkpoints written by write_tiny_model in the flat,
// nested and sharded forms bind to the same bytes; tied and untied heads; one test per kind of
// mismatch between config and checkpoint, each checking that the error names the tensor and what was
// expected versus found; and the determinism of the tiny-model writer.
#include "model/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/safetensors.h"
#include "model/tiny_model.h"
#include "support/expect_error.h"

namespace di {
namespace {

using di::testing::throws_error_with;

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixture = fs::path(DI_FIXTURE_DIR) / "configs" / "qwen35-4b-text-config.json";

// ------------------------------------------------------------------------------------------------
// Helpers

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return json::parse(in);
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2) << "\n";
  ASSERT_TRUE(out.good()) << "writing " << path;
}

// Every tensor of the checkpoint in `dir`, copied out (in name order).
std::vector<TensorToWrite> read_tensors(const fs::path& dir) {
  Checkpoint ck(dir);
  std::vector<TensorToWrite> out;
  for (const auto& [name, loc] : ck.tensors()) {
    const TensorView& v = loc.entry->view;
    const auto* p = static_cast<const uint8_t*>(v.data);
    out.push_back({name, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes())});
  }
  return out;
}

TensorToWrite& find_tensor(std::vector<TensorToWrite>& tensors, const std::string& name) {
  for (TensorToWrite& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("test helper: no tensor " + name);
}

void drop_tensor(std::vector<TensorToWrite>& tensors, const std::string& name) {
  const size_t before = tensors.size();
  std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name == name; });
  if (tensors.size() + 1 != before) throw std::runtime_error("test helper: no tensor " + name);
}

using TensorEdit = std::function<void(std::vector<TensorToWrite>&)>;
using ConfigEdit = std::function<void(json&)>;

// Copies the model in `src` to `dst` (config.json + one model.safetensors), applying the edits.
void rewrite_model(const fs::path& src, const fs::path& dst, const TensorEdit& edit_tensors = {},
                   const ConfigEdit& edit_config = {}) {
  std::vector<TensorToWrite> tensors = read_tensors(src);
  json config = read_json(src / "config.json");
  if (edit_tensors) edit_tensors(tensors);
  if (edit_config) edit_config(config);
  fs::create_directories(dst);
  write_safetensors(dst / "model.safetensors", tensors);
  write_json(dst / "config.json", config);
}

// Writes `tensors` into two shards (alternating, so both hold tensors of every kind), the index
// naming each tensor's shard, and config.json.
void write_sharded_model(const fs::path& dst, const std::vector<TensorToWrite>& tensors, const json& config) {
  const std::string names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  std::vector<TensorToWrite> shards[2];
  json weight_map = json::object();
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    shards[i % 2].push_back(tensors[i]);
    weight_map[tensors[i].name] = names[i % 2];
    total += tensors[i].bytes.size();
  }
  fs::create_directories(dst);
  for (int s = 0; s < 2; ++s) write_safetensors(dst / names[s], shards[s]);
  write_json(dst / "model.safetensors.index.json", {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  write_json(dst / "config.json", config);
}

// Every bound view of the model, in the order of expected_tensors (the head last, when untied).
std::vector<TensorView> all_views(const ModelWeights& w, bool with_head) {
  std::vector<TensorView> v{w.embed_tokens};
  for (const LayerWeights& L : w.layers) {
    v.push_back(L.input_layernorm);
    v.push_back(L.post_attention_layernorm);
    if (L.kind == LayerKind::linear_attention) {
      const GdnWeights& G = L.gdn;
      for (const TensorView* t : {&G.in_proj_qkv, &G.in_proj_z, &G.in_proj_b, &G.in_proj_a, &G.conv1d, &G.A_log,
                                  &G.dt_bias, &G.norm, &G.out_proj})
        v.push_back(*t);
    } else {
      const AttentionWeights& A = L.attn;
      for (const TensorView* t : {&A.q_proj, &A.k_proj, &A.v_proj, &A.o_proj, &A.q_norm, &A.k_norm}) v.push_back(*t);
    }
    v.push_back(L.mlp.gate_proj);
    v.push_back(L.mlp.up_proj);
    v.push_back(L.mlp.down_proj);
  }
  v.push_back(w.final_norm);
  if (with_head) v.push_back(w.lm_head);
  return v;
}

::testing::AssertionResult same_bytes(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype)
    return ::testing::AssertionFailure() << "dtype " << dtype_name(a.dtype) << " vs " << dtype_name(b.dtype);
  if (a.shape != b.shape) return ::testing::AssertionFailure() << shape_str(a.shape) << " vs " << shape_str(b.shape);
  if (a.data == nullptr || b.data == nullptr) return ::testing::AssertionFailure() << "unbound view";
  if (std::memcmp(a.data, b.data, a.nbytes()) != 0) return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

// Both models bind every weight to byte-identical data.
void expect_same_weights(const LoadedModel& a, const LoadedModel& b) {
  const auto va = all_views(a.weights, !a.config.tie_word_embeddings);
  const auto vb = all_views(b.weights, !b.config.tie_word_embeddings);
  ASSERT_EQ(va.size(), vb.size());
  const auto names = expected_tensors(a.config, "");
  for (size_t i = 0; i < va.size(); ++i)
    EXPECT_TRUE(same_bytes(va[i], vb[i])) << (i < names.size() ? names[i].name : "lm_head.weight");
  EXPECT_EQ(a.weights.parameter_count, b.weights.parameter_count);
}

int64_t expected_parameter_count(const ModelConfig& c) {
  int64_t n = 0;
  for (const ExpectedTensor& e : expected_tensors(c, "")) n += shape_numel(e.shape);
  return n;
}

TinyModelOptions tiny(uint64_t seed, bool nested = false) {
  TinyModelOptions o;
  o.preset = "tiny";
  o.seed = seed;
  o.layers = 4;  // three GDN layers and one attention layer
  o.nested = nested;
  return o;
}

constexpr uint64_t kSeed = 7;

// One flat tiny model shared by the suite (written once); each test also gets a fresh directory.
class ModelWeightsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("di_weights_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    write_tiny_model(flat_dir(), tiny(kSeed));
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*root_, ec);
    delete root_;
    root_ = nullptr;
  }
  static fs::path flat_dir() { return *root_ / "flat"; }

  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = *root_ / (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
                     std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Rewrites the shared model into dir_/name with the edits and checks that loading it fails with a
  // di::Error holding `words`.
  ::testing::AssertionResult load_fails(const std::string& name, const TensorEdit& edit_tensors,
                                        const ConfigEdit& edit_config, std::initializer_list<std::string> words) {
    const fs::path d = dir_ / name;
    rewrite_model(flat_dir(), d, edit_tensors, edit_config);
    return throws_error_with([&] { load_model(d); }, words);
  }

  static fs::path* root_;
  fs::path dir_;
};
fs::path* ModelWeightsTest::root_ = nullptr;

// ------------------------------------------------------------------------------------------------
// Loading

TEST_F(ModelWeightsTest, LoadsFlatTinyModel) {
  const LoadedModel m = load_model(flat_dir());
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  EXPECT_FALSE(c.nested);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(w.prefix, "model.");
  EXPECT_EQ(w.skipped_tensors, 0);
  EXPECT_EQ(w.parameter_count, expected_parameter_count(c));
  EXPECT_EQ(m.checkpoint->files().size(), 1u);
  EXPECT_EQ(m.checkpoint->tensors().size(), expected_tensors(c, "").size());

  ASSERT_EQ(w.layers.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w.layers[i].kind, c.layer_types[i]);
    const bool full = i == 3;
    EXPECT_EQ(w.layers[i].kind == LayerKind::full_attention, full) << "layer " << i;
    // Only the mixer of the layer's kind is bound.
    EXPECT_EQ(w.layers[i].attn.q_proj.empty(), !full) << "layer " << i;
    EXPECT_EQ(w.layers[i].gdn.in_proj_qkv.empty(), full) << "layer " << i;
  }

  // The tied head is the embedding itself, not a copy.
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);
  EXPECT_EQ(w.lm_head.shape, (Shape{248320, 64}));
  EXPECT_EQ(w.lm_head.dtype, DType::bf16);

  // Each field is bound to the tensor of its name, with the expected shape.
  const auto expected = expected_tensors(c, "model.");
  const auto views = all_views(w, /*with_head=*/false);
  ASSERT_EQ(views.size(), expected.size());
  for (size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(views[i].shape, expected[i].shape);
    EXPECT_EQ(views[i].data, m.checkpoint->tensors().at(expected[i].name).entry->view.data);
    EXPECT_EQ(views[i].device, Device::cpu);
  }

  // write_tiny_model stores A_log and the GDN norm in f32, as official checkpoints do.
  EXPECT_EQ(w.layers[0].gdn.A_log.dtype, DType::f32);
  EXPECT_EQ(w.layers[0].gdn.norm.dtype, DType::f32);
  EXPECT_EQ(w.layers[0].gdn.in_proj_qkv.dtype, DType::bf16);
  EXPECT_EQ(w.layers[0].gdn.in_proj_qkv.shape, (Shape{2 * 2 * 128 + 4 * 128, 64}));
  EXPECT_EQ(w.layers[0].gdn.conv1d.shape, (Shape{1024, 1, 4}));
  EXPECT_EQ(w.layers[3].attn.q_proj.shape, (Shape{4 * 2 * 256, 64}));
  EXPECT_EQ(w.layers[3].attn.k_proj.shape, (Shape{2 * 256, 64}));
}

TEST_F(ModelWeightsTest, NestedFormSkipsVisualAndMtp) {
  write_tiny_model(dir_, tiny(kSeed, /*nested=*/true));
  const LoadedModel flat = load_model(flat_dir());
  const LoadedModel nested = load_model(dir_);
  EXPECT_TRUE(nested.config.nested);
  EXPECT_EQ(nested.config.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(nested.weights.prefix, "model.language_model.");
  EXPECT_EQ(nested.weights.skipped_tensors, 2);
  EXPECT_TRUE(nested.checkpoint->tensors().count("mtp.fc.weight"));
  EXPECT_TRUE(nested.checkpoint->tensors().count("model.visual.patch_embed.proj.weight"));
  EXPECT_EQ(nested.weights.lm_head.data, nested.weights.embed_tokens.data);

  // The same seed draws the same text-model weights in either form.
  EXPECT_TRUE(same_bytes(nested.weights.embed_tokens, flat.weights.embed_tokens));
  EXPECT_TRUE(same_bytes(nested.weights.layers[1].gdn.in_proj_qkv, flat.weights.layers[1].gdn.in_proj_qkv));
  EXPECT_TRUE(same_bytes(nested.weights.layers[3].attn.q_proj, flat.weights.layers[3].attn.q_proj));
  EXPECT_TRUE(same_bytes(nested.weights.layers[2].gdn.A_log, flat.weights.layers[2].gdn.A_log));
  expect_same_weights(nested, flat);
}

TEST_F(ModelWeightsTest, ShardedCheckpoint) {
  write_sharded_model(dir_, read_tensors(flat_dir()), read_json(flat_dir() / "config.json"));
  const LoadedModel flat = load_model(flat_dir());
  const LoadedModel sharded = load_model(dir_);
  EXPECT_EQ(sharded.checkpoint->files().size(), 2u);
  EXPECT_EQ(sharded.weights.prefix, "model.");
  EXPECT_EQ(sharded.weights.skipped_tensors, 0);
  EXPECT_EQ(sharded.weights.lm_head.data, sharded.weights.embed_tokens.data);
  // Views point into both shards.
  const auto& tensors = sharded.checkpoint->tensors();
  EXPECT_NE(tensors.at("model.embed_tokens.weight").file, tensors.at("model.layers.0.input_layernorm.weight").file);
  expect_same_weights(sharded, flat);
}

TEST_F(ModelWeightsTest, UntiedWithLmHead) {
  rewrite_model(
      flat_dir(), dir_,
      [](std::vector<TensorToWrite>& t) {
        TensorToWrite head = find_tensor(t, "model.embed_tokens.weight");
        head.name = "lm_head.weight";
        for (size_t i = 0; i < head.bytes.size(); i += 7) head.bytes[i] ^= 0x5a;  // differs from the embedding
        t.push_back(std::move(head));
      },
      [](json& c) { c["tie_word_embeddings"] = false; });
  const LoadedModel m = load_model(dir_);
  EXPECT_FALSE(m.config.tie_word_embeddings);
  const TensorView& head = m.checkpoint->tensors().at("lm_head.weight").entry->view;
  EXPECT_EQ(m.weights.lm_head.data, head.data);
  EXPECT_NE(m.weights.lm_head.data, m.weights.embed_tokens.data);
  EXPECT_EQ(m.weights.lm_head.shape, (Shape{248320, 64}));
  EXPECT_FALSE(same_bytes(m.weights.lm_head, m.weights.embed_tokens));
  EXPECT_EQ(m.weights.parameter_count, expected_parameter_count(m.config) + 248320 * 64);
  EXPECT_EQ(m.weights.skipped_tensors, 0);
}

TEST_F(ModelWeightsTest, TiedCheckpointMayCarryAHeadCopy) {
  rewrite_model(flat_dir(), dir_, [](std::vector<TensorToWrite>& t) {
    TensorToWrite head = find_tensor(t, "model.embed_tokens.weight");
    head.name = "lm_head.weight";
    t.push_back(std::move(head));
  });
  const LoadedModel m = load_model(dir_);
  EXPECT_EQ(m.weights.lm_head.data, m.weights.embed_tokens.data);  // still the embedding
  EXPECT_EQ(m.weights.parameter_count, expected_parameter_count(m.config));
}

TEST_F(ModelWeightsTest, UntiedWithoutLmHead) {
  EXPECT_TRUE(load_fails("untied", {}, [](json& c) { c["tie_word_embeddings"] = false; },
                         {"missing tensor 'lm_head.weight'", "[248320, 64]", "tie_word_embeddings"}));
}

TEST_F(ModelWeightsTest, UntiedLmHeadOfWrongShape) {
  EXPECT_TRUE(load_fails(
      "untied_shape",
      [](std::vector<TensorToWrite>& t) {
        t.push_back({"lm_head.weight", DType::bf16, {10, 64}, std::vector<uint8_t>(10 * 64 * 2)});
      },
      [](json& c) { c["tie_word_embeddings"] = false; },
      {"'lm_head.weight'", "shape [10, 64]", "expected [248320, 64]", "model.safetensors"}));
}

// ------------------------------------------------------------------------------------------------
// Mismatches between config and checkpoint

TEST_F(ModelWeightsTest, MissingTensor) {
  EXPECT_TRUE(load_fails(
      "missing", [](std::vector<TensorToWrite>& t) { drop_tensor(t, "model.layers.1.linear_attn.dt_bias"); }, {},
      {"missing tensor 'model.layers.1.linear_attn.dt_bias'", "expected shape [4]", dir_.string()}));
  EXPECT_TRUE(load_fails(
      "missing_norm", [](std::vector<TensorToWrite>& t) { drop_tensor(t, "model.norm.weight"); }, {},
      {"missing tensor 'model.norm.weight'", "[64]"}));
}

TEST_F(ModelWeightsTest, MissingEmbedding) {
  EXPECT_TRUE(load_fails(
      "no_embed", [](std::vector<TensorToWrite>& t) { drop_tensor(t, "model.embed_tokens.weight"); }, {},
      {"no embedding tensor", "model.embed_tokens.weight"}));
}

TEST_F(ModelWeightsTest, WrongShape) {
  // Same element count, transposed: only the shape check can catch it.
  EXPECT_TRUE(load_fails(
      "shape",
      [](std::vector<TensorToWrite>& t) {
        find_tensor(t, "model.layers.3.self_attn.q_proj.weight").shape = {64, 2048};
      },
      {}, {"'model.layers.3.self_attn.q_proj.weight'", "shape [64, 2048]", "expected [2048, 64]", "model.safetensors"}));
  // The conv weight without its middle dimension.
  EXPECT_TRUE(load_fails(
      "shape_conv",
      [](std::vector<TensorToWrite>& t) {
        find_tensor(t, "model.layers.0.linear_attn.conv1d.weight").shape = {1024, 4};
      },
      {}, {"'model.layers.0.linear_attn.conv1d.weight'", "shape [1024, 4]", "expected [1024, 1, 4]"}));
}

TEST_F(ModelWeightsTest, WrongDtype) {
  // F16 has BF16's size, so the bytes stay valid.
  EXPECT_TRUE(load_fails(
      "f16",
      [](std::vector<TensorToWrite>& t) { find_tensor(t, "model.layers.2.linear_attn.in_proj_z.weight").dtype = DType::f16; },
      {}, {"'model.layers.2.linear_attn.in_proj_z.weight'", "dtype F16", "expected BF16"}));
  EXPECT_TRUE(load_fails(
      "i32",
      [](std::vector<TensorToWrite>& t) {
        TensorToWrite& w = find_tensor(t, "model.layers.0.mlp.up_proj.weight");
        w.dtype = DType::i32;
        w.bytes.resize(w.bytes.size() * 2);
      },
      {}, {"'model.layers.0.mlp.up_proj.weight'", "dtype I32", "expected BF16"}));
}

TEST_F(ModelWeightsTest, UnexpectedExtraTensor) {
  EXPECT_TRUE(load_fails(
      "extra",
      [](std::vector<TensorToWrite>& t) {
        t.push_back({"model.layers.0.foo.weight", DType::bf16, {3, 2}, std::vector<uint8_t>(12)});
      },
      {}, {"unexpected tensor 'model.layers.0.foo.weight'", "[3, 2]"}));
}

TEST_F(ModelWeightsTest, ConfigWithFewerLayersThanTensors) {
  EXPECT_TRUE(load_fails("fewer", {},
                         [](json& c) {
                           c["num_hidden_layers"] = 3;
                           c["layer_types"].erase(3);
                         },
                         {"unexpected tensor 'model.layers.3."}));
}

TEST_F(ModelWeightsTest, ConfigWithMoreLayersThanTensors) {
  EXPECT_TRUE(load_fails("more", {},
                         [](json& c) {
                           c["num_hidden_layers"] = 8;
                           c.erase("layer_types");
                         },
                         {"missing tensor 'model.layers.4.input_layernorm.weight'"}));
}

TEST_F(ModelWeightsTest, ConfigWithOtherLayerKinds) {
  // Layer 0 declared full attention, but the checkpoint holds a GDN mixer there.
  EXPECT_TRUE(load_fails("kinds", {}, [](json& c) { c["layer_types"][0] = "full_attention"; },
                         {"missing tensor 'model.layers.0.self_attn.q_proj.weight'"}));
}

TEST_F(ModelWeightsTest, ConfigWithOtherWidth) {
  EXPECT_TRUE(load_fails("width", {}, [](json& c) { c["intermediate_size"] = 128; },
                         {"'model.layers.0.mlp.gate_proj.weight'", "shape [160, 64]", "expected [128, 64]"}));
}

TEST_F(ModelWeightsTest, BadConfigFailsBeforeTheCheckpoint) {
  EXPECT_TRUE(load_fails("config", {}, [](json& c) { c["hidden_act"] = "gelu"; },
                         {"config.json", "hidden_act", "gelu"}));
}

// ------------------------------------------------------------------------------------------------
// The tiny-model writer

TEST_F(ModelWeightsTest, TinyModelIsDeterministic) {
  write_tiny_model(dir_ / "again", tiny(kSeed));
  write_tiny_model(dir_ / "other", tiny(kSeed + 1));
  const auto base = read_bytes(flat_dir() / "model.safetensors");
  const auto again = read_bytes(dir_ / "again" / "model.safetensors");
  const auto other = read_bytes(dir_ / "other" / "model.safetensors");
  ASSERT_GT(base.size(), 248320u * 64 * 2);
  EXPECT_TRUE(base == again) << "same seed, different bytes";
  ASSERT_EQ(base.size(), other.size());
  EXPECT_FALSE(base == other) << "different seeds, same bytes";
  EXPECT_EQ(read_bytes(flat_dir() / "config.json"), read_bytes(dir_ / "again" / "config.json"));
  EXPECT_EQ(read_bytes(flat_dir() / "config.json"), read_bytes(dir_ / "other" / "config.json"));

  // Every tensor differs between the seeds, not just some.
  const LoadedModel a = load_model(flat_dir());
  const LoadedModel b = load_model(dir_ / "other");
  const auto va = all_views(a.weights, false), vb = all_views(b.weights, false);
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) EXPECT_FALSE(same_bytes(va[i], vb[i])) << "view " << i;
}

TEST(ModelWeightsTinyConfig, FourBGeometryPreset) {
  TinyModelOptions o;
  o.preset = "4b-geometry";
  const ModelConfig c = tiny_model_config(o);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.intermediate_size, 9216);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_layers_of(LayerKind::full_attention), 8);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 32);
  EXPECT_EQ(c.linear_key_head_dim, 128);
  EXPECT_EQ(c.linear_value_head_dim, 128);
  EXPECT_EQ(c.gdn_conv_dim(), 8192);
  EXPECT_TRUE(c.tie_word_embeddings);

  // The same model as the real 4B config.json.
  const ModelConfig real = parse_model_config(read_json(kFixture), kFixture.string());
  EXPECT_EQ(c.layer_types, real.layer_types);
  EXPECT_EQ(c.rms_norm_eps, real.rms_norm_eps);
  EXPECT_EQ(c.partial_rotary_factor, real.partial_rotary_factor);
  EXPECT_EQ(c.linear_conv_kernel_dim, real.linear_conv_kernel_dim);
  EXPECT_EQ(c.max_position_embeddings, real.max_position_embeddings);
  const auto mine = expected_tensors(c, "model.");
  const auto theirs = expected_tensors(real, "model.");
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].name, theirs[i].name);
    EXPECT_EQ(mine[i].shape, theirs[i].shape) << mine[i].name;
  }

  // A few of the 4B's tensors.
  auto shape_of = [&](const std::string& name) {
    for (const ExpectedTensor& e : mine)
      if (e.name == name) return e.shape;
    ADD_FAILURE() << "no tensor " << name;
    return Shape{};
  };
  EXPECT_EQ(shape_of("model.embed_tokens.weight"), (Shape{248320, 2560}));
  EXPECT_EQ(shape_of("model.layers.0.linear_attn.in_proj_qkv.weight"), (Shape{8192, 2560}));
  EXPECT_EQ(shape_of("model.layers.0.linear_attn.in_proj_z.weight"), (Shape{4096, 2560}));
  EXPECT_EQ(shape_of("model.layers.0.linear_attn.in_proj_a.weight"), (Shape{32, 2560}));
  EXPECT_EQ(shape_of("model.layers.0.linear_attn.conv1d.weight"), (Shape{8192, 1, 4}));
  EXPECT_EQ(shape_of("model.layers.0.linear_attn.out_proj.weight"), (Shape{2560, 4096}));
  EXPECT_EQ(shape_of("model.layers.31.self_attn.q_proj.weight"), (Shape{8192, 2560}));
  EXPECT_EQ(shape_of("model.layers.31.self_attn.k_proj.weight"), (Shape{1024, 2560}));
  EXPECT_EQ(shape_of("model.layers.31.self_attn.o_proj.weight"), (Shape{2560, 4096}));
  EXPECT_EQ(shape_of("model.layers.31.mlp.down_proj.weight"), (Shape{2560, 9216}));
  // Qwen3.5-4B's text model, the tied head counted once: about 4.2 billion parameters.
  int64_t n = 0;
  for (const ExpectedTensor& e : mine) n += shape_numel(e.shape);
  EXPECT_GT(n, 4'000'000'000);
  EXPECT_LT(n, 4'400'000'000);
}

TEST(ModelWeightsTinyConfig, TinyPresetAndOptions) {
  TinyModelOptions o;
  ModelConfig c = tiny_model_config(o);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_layers_of(LayerKind::full_attention), 2);
  EXPECT_EQ(c.layer_types.size(), 8u);
  o.layers = 5;
  c = tiny_model_config(o);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.layer_types.size(), 5u);
  // Its config.json parses back to the same model, in both forms.
  for (bool nested : {false, true}) {
    const ModelConfig back = parse_model_config(model_config_to_hf_json(c, nested), "x");
    EXPECT_EQ(back.layer_types, c.layer_types);
    EXPECT_EQ(back.gdn_conv_dim(), c.gdn_conv_dim());
    EXPECT_EQ(back.rotary_dim, c.rotary_dim);
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
  }
  o.preset = "7b";
  EXPECT_TRUE(throws_error_with([&] { tiny_model_config(o); }, {"preset", "'7b'"}));
  o.preset = "tiny";
  o.layers = -1;
  EXPECT_TRUE(throws_error_with([&] { tiny_model_config(o); }, {"layers", "-1"}));
}

}  // namespace
}  // namespace di
