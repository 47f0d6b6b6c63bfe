// Model configuration: the real Qwen3.5-4B config in its flat and nested forms, derived layer kinds,
// legacy rotary fields, round trips through model_config_to_hf_json, and one test per unsupported or
// malformed value, each checking that the error names the field and the value.
#include "model/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/expect_error.h"
#include "support/temp_dir.h"

namespace di {
namespace {

using di::testing::throws_error_with;

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixture = fs::path(DI_FIXTURE_DIR) / "configs" / "qwen35-4b-text-config.json";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return json::parse(in);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << "writing " << path;
}

// The flat config.json transformers writes for Qwen3.5-4B's text model.
json flat_4b() { return read_json(kFixture); }

// The same text config inside a Qwen3_5ForConditionalGeneration config, with tie_word_embeddings at
// the top level only (as transformers writes the composite form).
json nested_4b() {
  json text = flat_4b();
  text.erase("tie_word_embeddings");
  return {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"model_type", "qwen3_5"},
          {"text_config", text},
          {"vision_config",
           {{"model_type", "qwen3_5"}, {"depth", 24}, {"hidden_size", 1024}, {"out_hidden_size", 2560}}},
          {"image_token_id", 248056},
          {"tie_word_embeddings", true}};
}

std::vector<LayerKind> every_nth_full(int64_t layers, int64_t interval) {
  std::vector<LayerKind> kinds;
  for (int64_t i = 0; i < layers; ++i)
    kinds.push_back((i + 1) % interval == 0 ? LayerKind::full_attention : LayerKind::linear_attention);
  return kinds;
}

// Every value of the text model (not `nested` or `architecture`, which describe the file's form).
void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.layer_types, b.layer_types);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
  EXPECT_EQ(a.rotary_dim, b.rotary_dim);
  EXPECT_EQ(a.linear_num_key_heads, b.linear_num_key_heads);
  EXPECT_EQ(a.linear_num_value_heads, b.linear_num_value_heads);
  EXPECT_EQ(a.linear_key_head_dim, b.linear_key_head_dim);
  EXPECT_EQ(a.linear_value_head_dim, b.linear_value_head_dim);
  EXPECT_EQ(a.linear_conv_kernel_dim, b.linear_conv_kernel_dim);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

void expect_4b_values(const ModelConfig& c) {
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.intermediate_size, 9216);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.layer_types, every_nth_full(32, 4));
  EXPECT_EQ(c.num_layers_of(LayerKind::full_attention), 8);
  EXPECT_EQ(c.num_layers_of(LayerKind::linear_attention), 24);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 32);
  EXPECT_EQ(c.linear_key_head_dim, 128);
  EXPECT_EQ(c.linear_value_head_dim, 128);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_EQ(c.gdn_key_dim(), 2048);
  EXPECT_EQ(c.gdn_value_dim(), 4096);
  EXPECT_EQ(c.gdn_conv_dim(), 8192);
  EXPECT_TRUE(c.eos_token_ids.empty());  // null in the file
}

// Parsing `j` fails with a di::Error naming the source and every one of `words`.
::testing::AssertionResult rejects(const json& j, std::initializer_list<std::string> words) {
  auto r = throws_error_with([&] { parse_model_config(j, "cfg.json"); }, words);
  if (!r) return r;
  return throws_error_with([&] { parse_model_config(j, "cfg.json"); }, {"cfg.json"});
}

class ModelConfigFilesTest : public testing::TempDirTest {};

// ------------------------------------------------------------------------------------------------
// Valid configs

TEST(ModelConfig, Real4BFlatConfig) {
  const ModelConfig c = parse_model_config(flat_4b(), kFixture.string());
  EXPECT_FALSE(c.nested);
  EXPECT_EQ(c.architecture, "");  // the fixture has no architectures field
  expect_4b_values(c);
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(c.layer_types[i] == LayerKind::full_attention, i % 4 == 3) << "layer " << i;
  // Slots within the per-kind caches.
  EXPECT_EQ(c.index_within_kind(0), 0);
  EXPECT_EQ(c.index_within_kind(2), 2);
  EXPECT_EQ(c.index_within_kind(3), 0);
  EXPECT_EQ(c.index_within_kind(4), 3);
  EXPECT_EQ(c.index_within_kind(7), 1);
  EXPECT_EQ(c.index_within_kind(31), 7);
  EXPECT_EQ(c.index_within_kind(30), 23);
}

TEST(ModelConfig, Real4BNestedConfig) {
  const ModelConfig flat = parse_model_config(flat_4b(), "flat");
  const ModelConfig c = parse_model_config(nested_4b(), "nested");
  EXPECT_TRUE(c.nested);
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
  expect_4b_values(c);  // tie_word_embeddings comes from the top level here
  expect_same_model(c, flat);
}

TEST(ModelConfig, NestedTieWordEmbeddingsPrecedence) {
  json j = nested_4b();
  j["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_model_config(j, "x").tie_word_embeddings);
  // A value in text_config wins over the top level.
  j["text_config"]["tie_word_embeddings"] = true;
  EXPECT_TRUE(parse_model_config(j, "x").tie_word_embeddings);
  j["tie_word_embeddings"] = true;
  j["text_config"]["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_model_config(j, "x").tie_word_embeddings);
  // Absent in both: untied.
  j.erase("tie_word_embeddings");
  j["text_config"].erase("tie_word_embeddings");
  EXPECT_FALSE(parse_model_config(j, "x").tie_word_embeddings);
}

TEST(ModelConfig, NestedEosFromTopLevelOrTextConfig) {
  json j = nested_4b();
  j["text_config"].erase("eos_token_id");
  j["eos_token_id"] = 248044;
  EXPECT_EQ(parse_model_config(j, "x").eos_token_ids, (std::vector<int64_t>{248044}));
  j["text_config"]["eos_token_id"] = {248046, 248044};
  EXPECT_EQ(parse_model_config(j, "x").eos_token_ids, (std::vector<int64_t>{248046, 248044}));
}

TEST(ModelConfig, ArchitecturesRecorded) {
  json j = flat_4b();
  j["architectures"] = {"Qwen3_5ForCausalLM"};
  EXPECT_EQ(parse_model_config(j, "x").architecture, "Qwen3_5ForCausalLM");
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_TRUE(rejects(j, {"architectures", "LlamaForCausalLM"}));
}

TEST(ModelConfig, LayerTypesFromDefaultInterval) {
  json j = flat_4b();
  j.erase("layer_types");
  j["num_hidden_layers"] = 10;
  ModelConfig c = parse_model_config(j, "x");
  EXPECT_EQ(c.num_layers, 10);
  EXPECT_EQ(c.layer_types, every_nth_full(10, 4));  // full at 3 and 7
  EXPECT_EQ(c.num_layers_of(LayerKind::full_attention), 2);

  // Without either, the 4B's 32 layers come out as in its explicit list.
  j = flat_4b();
  j.erase("layer_types");
  EXPECT_EQ(parse_model_config(j, "x").layer_types, parse_model_config(flat_4b(), "x").layer_types);
}

TEST(ModelConfig, LayerTypesFromExplicitInterval) {
  json j = flat_4b();
  j.erase("layer_types");
  j["num_hidden_layers"] = 6;
  j["full_attention_interval"] = 2;
  ModelConfig c = parse_model_config(j, "x");
  EXPECT_EQ(c.layer_types, every_nth_full(6, 2));
  EXPECT_EQ(c.layer_types[1], LayerKind::full_attention);
  EXPECT_EQ(c.layer_types[2], LayerKind::linear_attention);
  EXPECT_EQ(c.num_layers_of(LayerKind::full_attention), 3);

  j["full_attention_interval"] = 1;  // every layer full attention
  EXPECT_EQ(parse_model_config(j, "x").num_layers_of(LayerKind::linear_attention), 0);

  j["full_attention_interval"] = 0;
  EXPECT_TRUE(rejects(j, {"full_attention_interval", "positive", "0"}));

  // The same inside text_config.
  json n = nested_4b();
  n["text_config"].erase("layer_types");
  n["text_config"]["full_attention_interval"] = 2;
  EXPECT_EQ(parse_model_config(n, "x").layer_types, every_nth_full(32, 2));
}

TEST(ModelConfig, LegacyTopLevelRopeTheta) {
  json j = flat_4b();
  j.erase("rope_parameters");
  j["rope_theta"] = 5000000.0;
  j["partial_rotary_factor"] = 0.5;
  ModelConfig c = parse_model_config(j, "x");
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.rotary_dim, 128);

  // rope_scaling (the older name) without a theta of its own: the top-level theta still applies.
  j["rope_scaling"] = {{"rope_type", "default"}, {"mrope_section", {11, 11, 10}}};
  EXPECT_EQ(parse_model_config(j, "x").rope_theta, 5e6);

  // Neither given: the transformers default.
  j.erase("rope_theta");
  j.erase("rope_scaling");
  EXPECT_EQ(parse_model_config(j, "x").rope_theta, 10000.0);

  // rope_parameters, when present, wins over the top level.
  j = flat_4b();
  j["rope_theta"] = 123.0;
  EXPECT_EQ(parse_model_config(j, "x").rope_theta, 1e7);
}

TEST(ModelConfig, DefaultsForOptionalFields) {
  json j = flat_4b();
  for (const char* key : {"vocab_size", "head_dim", "rms_norm_eps", "max_position_embeddings", "hidden_act",
                          "attention_bias", "linear_conv_kernel_dim", "eos_token_id", "tie_word_embeddings"})
    j.erase(key);
  ModelConfig c = parse_model_config(j, "x");
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.head_dim, 2560 / 16);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfig, RoundTripFlat) {
  const ModelConfig a = parse_model_config(flat_4b(), "x");
  const json out = model_config_to_hf_json(a, /*nested=*/false);
  EXPECT_EQ(out["architectures"], json({"Qwen3_5ForCausalLM"}));
  EXPECT_EQ(out["model_type"], "qwen3_5_text");
  EXPECT_FALSE(out.contains("text_config"));
  const ModelConfig b = parse_model_config(out, "x");
  EXPECT_FALSE(b.nested);
  EXPECT_EQ(b.architecture, "Qwen3_5ForCausalLM");
  expect_same_model(a, b);
  // Through text, as a file would be.
  expect_same_model(a, parse_model_config(json::parse(out.dump(2)), "x"));
}

TEST(ModelConfig, RoundTripNested) {
  const ModelConfig a = parse_model_config(flat_4b(), "x");
  const json out = model_config_to_hf_json(a, /*nested=*/true);
  EXPECT_EQ(out["architectures"], json({"Qwen3_5ForConditionalGeneration"}));
  EXPECT_EQ(out["model_type"], "qwen3_5");
  ASSERT_TRUE(out.contains("text_config"));
  EXPECT_EQ(out["text_config"]["model_type"], "qwen3_5_text");
  const ModelConfig b = parse_model_config(out, "x");
  EXPECT_TRUE(b.nested);
  EXPECT_EQ(b.architecture, "Qwen3_5ForConditionalGeneration");
  expect_same_model(a, b);
  expect_same_model(a, parse_model_config(json::parse(out.dump()), "x"));
}

TEST(ModelConfig, RoundTripOtherValues) {
  // Untied, several EOS ids, a different layer pattern and non-default numbers.
  json j = flat_4b();
  j.erase("layer_types");
  j["num_hidden_layers"] = 6;
  j["full_attention_interval"] = 3;
  j["tie_word_embeddings"] = false;
  j["eos_token_id"] = {7, 9};
  j["rms_norm_eps"] = 1e-5;
  j["rope_parameters"]["rope_theta"] = 1234567.0;
  j["vocab_size"] = 1000;
  j["linear_conv_kernel_dim"] = 3;
  const ModelConfig a = parse_model_config(j, "x");
  for (bool nested : {false, true}) {
    SCOPED_TRACE(nested ? "nested" : "flat");
    const ModelConfig b = parse_model_config(json::parse(model_config_to_hf_json(a, nested).dump()), "x");
    EXPECT_EQ(b.nested, nested);
    expect_same_model(a, b);
  }
  // A single EOS id round-trips as well.
  j["eos_token_id"] = 5;
  const ModelConfig one = parse_model_config(j, "x");
  EXPECT_EQ(one.eos_token_ids, std::vector<int64_t>{5});
  expect_same_model(one, parse_model_config(model_config_to_hf_json(one, false), "x"));
}

// ------------------------------------------------------------------------------------------------
// Unsupported and malformed values

TEST(ModelConfig, RejectsOtherModelType) {
  json j = flat_4b();
  j["model_type"] = "llama";
  EXPECT_TRUE(rejects(j, {"model_type", "'llama'"}));
  // In the nested form the field is text_config.model_type.
  json n = nested_4b();
  n["text_config"]["model_type"] = "llama";
  EXPECT_TRUE(rejects(n, {"text_config.model_type", "'llama'"}));
  // A composite config must be qwen3_5 at the top.
  n = nested_4b();
  n["model_type"] = "qwen3_vl";
  EXPECT_TRUE(rejects(n, {"model_type", "'qwen3_vl'", "text_config"}));
  // Absent altogether.
  j.erase("model_type");
  EXPECT_TRUE(rejects(j, {"model_type", "qwen3_5_text"}));
}

TEST(ModelConfig, RejectsNonStringModelType) {
  json j = flat_4b();
  j["model_type"] = 5;
  EXPECT_TRUE(rejects(j, {"model_type", "5"}));
  json n = nested_4b();
  n["model_type"] = json::array();
  EXPECT_TRUE(rejects(n, {"model_type", "[]"}));
}

TEST(ModelConfig, RejectsHiddenActGelu) {
  json j = flat_4b();
  j["hidden_act"] = "gelu";
  EXPECT_TRUE(rejects(j, {"hidden_act", "'gelu'", "silu"}));
}

TEST(ModelConfig, RejectsAttentionBias) {
  json j = flat_4b();
  j["attention_bias"] = true;
  EXPECT_TRUE(rejects(j, {"attention_bias", "true"}));
  j["attention_bias"] = "no";
  EXPECT_TRUE(rejects(j, {"attention_bias", "\"no\""}));
}

TEST(ModelConfig, RejectsRopeTypeYarn) {
  json j = flat_4b();
  j["rope_parameters"]["rope_type"] = "yarn";
  j["rope_parameters"]["factor"] = 4.0;
  EXPECT_TRUE(rejects(j, {"rope_parameters", "'yarn'"}));
  // The legacy spelling, in the legacy field: the message names the field that holds it.
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_TRUE(rejects(j, {"rope_scaling", "'yarn'"}));
}

TEST(ModelConfig, RejectsNonStringRopeType) {
  json j = flat_4b();
  j["rope_parameters"]["rope_type"] = 3;
  EXPECT_TRUE(rejects(j, {"rope_type", "3"}));
  j["rope_parameters"] = "default";
  EXPECT_TRUE(rejects(j, {"rope_parameters", "\"default\""}));
}

TEST(ModelConfig, RejectsBadRotaryValues) {
  json j = flat_4b();
  j["rope_parameters"]["rope_theta"] = -1.0;
  EXPECT_TRUE(rejects(j, {"rope_theta", "-1"}));
  j = flat_4b();
  j["rope_parameters"]["rope_theta"] = "1e7";
  EXPECT_TRUE(rejects(j, {"rope_theta", "\"1e7\""}));
  j = flat_4b();
  j["rope_parameters"]["partial_rotary_factor"] = 1.5;
  EXPECT_TRUE(rejects(j, {"partial_rotary_factor", "1.5"}));
  j = flat_4b();
  j["head_dim"] = 6;  // 6 * 0.25 = 1: odd
  EXPECT_TRUE(rejects(j, {"rotary dim", "1"}));
}

TEST(ModelConfig, RejectsMixtureOfExperts) {
  json j = flat_4b();
  j["num_experts"] = 256;
  EXPECT_TRUE(rejects(j, {"num_experts", "256", "mixture-of-experts"}));
  json n = nested_4b();
  n["text_config"]["moe_intermediate_size"] = 512;
  EXPECT_TRUE(rejects(n, {"text_config.moe_intermediate_size", "512"}));
  // Present but null (as transformers writes unused fields) is not MoE.
  j["num_experts"] = nullptr;
  EXPECT_NO_THROW(parse_model_config(j, "x"));
}

TEST(ModelConfig, RejectsLayerTypesOfWrongLength) {
  json j = flat_4b();
  j["layer_types"].erase(j["layer_types"].size() - 1);
  EXPECT_TRUE(rejects(j, {"layer_types", "31 entries", "num_hidden_layers is 32"}));
  j = flat_4b();
  j["num_hidden_layers"] = 36;
  EXPECT_TRUE(rejects(j, {"layer_types", "32 entries", "36"}));
  j = flat_4b();
  j["layer_types"] = "linear_attention";
  EXPECT_TRUE(rejects(j, {"layer_types", "list", "\"linear_attention\""}));
}

TEST(ModelConfig, RejectsSlidingAttentionLayer) {
  json j = flat_4b();
  j["layer_types"][5] = "sliding_attention";
  EXPECT_TRUE(rejects(j, {"layer_types", "[5]", "'sliding_attention'"}));
  j["layer_types"][5] = 7;
  EXPECT_TRUE(rejects(j, {"layer_types", "[5]", "7"}));
}

TEST(ModelConfig, RejectsValueHeadsNotMultipleOfKeyHeads) {
  json j = flat_4b();
  j["linear_num_value_heads"] = 24;
  j["linear_num_key_heads"] = 16;
  EXPECT_TRUE(rejects(j, {"linear_num_value_heads", "24", "linear_num_key_heads", "16"}));
}

TEST(ModelConfig, RejectsAttentionHeadsNotMultipleOfKvHeads) {
  json j = flat_4b();
  j["num_key_value_heads"] = 3;
  EXPECT_TRUE(rejects(j, {"num_attention_heads", "16", "num_key_value_heads", "3"}));
}

TEST(ModelConfig, RejectsHiddenSizeAsString) {
  json j = flat_4b();
  j["hidden_size"] = "2560";
  EXPECT_TRUE(rejects(j, {"hidden_size", "\"2560\"", "integer"}));
  j["hidden_size"] = 2560.5;
  EXPECT_TRUE(rejects(j, {"hidden_size", "2560.5", "integer"}));
}

TEST(ModelConfig, RejectsNegativeIntermediateSize) {
  json j = flat_4b();
  j["intermediate_size"] = -9216;
  EXPECT_TRUE(rejects(j, {"intermediate_size", "-9216", "positive"}));
  j["intermediate_size"] = 0;
  EXPECT_TRUE(rejects(j, {"intermediate_size", "0", "positive"}));
}

TEST(ModelConfig, RejectsIntegerOutOfRange) {
  json j = flat_4b();
  j["hidden_size"] = uint64_t(18446744073709551615ull);  // would wrap to -1 as int64
  EXPECT_TRUE(rejects(j, {"hidden_size", "18446744073709551615"}));
}

TEST(ModelConfig, RejectsMissingHiddenSize) {
  json j = flat_4b();
  j.erase("hidden_size");
  EXPECT_TRUE(rejects(j, {"hidden_size", "missing"}));
  j = flat_4b();
  j["hidden_size"] = nullptr;
  EXPECT_TRUE(rejects(j, {"hidden_size", "missing"}));
  json n = nested_4b();
  n["text_config"].erase("hidden_size");
  EXPECT_TRUE(rejects(n, {"text_config.hidden_size", "missing"}));
}

TEST(ModelConfig, RejectsOtherMalformedValues) {
  EXPECT_TRUE(rejects(json::array(), {"object", "array"}));
  json n = nested_4b();
  n["text_config"] = "qwen";
  EXPECT_TRUE(rejects(n, {"text_config", "object", "string"}));
  json j = flat_4b();
  j["rms_norm_eps"] = 0.0;
  EXPECT_TRUE(rejects(j, {"rms_norm_eps", "0"}));
  j = flat_4b();
  j["eos_token_id"] = "</s>";
  EXPECT_TRUE(rejects(j, {"eos_token_id", "\"</s>\""}));
  j["eos_token_id"] = {1, "x"};
  EXPECT_TRUE(rejects(j, {"eos_token_id", "\"x\""}));
  j = flat_4b();
  j["tie_word_embeddings"] = 1;
  EXPECT_TRUE(rejects(j, {"tie_word_embeddings", "1"}));
}

// ------------------------------------------------------------------------------------------------
// Files

TEST_F(ModelConfigFilesTest, LoadsConfigJson) {
  write_text(dir_ / "config.json", nested_4b().dump(2));
  const ModelConfig c = load_model_config(dir_);
  EXPECT_TRUE(c.nested);
  expect_4b_values(c);
}

TEST_F(ModelConfigFilesTest, InvalidJsonNamesTheFile) {
  write_text(dir_ / "config.json", "{\"hidden_size\": 2560,");
  const std::string path = (dir_ / "config.json").string();
  EXPECT_TRUE(throws_error_with([&] { load_model_config(dir_); }, {path, "JSON"}));
}

TEST_F(ModelConfigFilesTest, ErrorsInTheFileNameTheFile) {
  json j = flat_4b();
  j["hidden_act"] = "gelu";
  write_text(dir_ / "config.json", j.dump());
  const std::string path = (dir_ / "config.json").string();
  EXPECT_TRUE(throws_error_with([&] { load_model_config(dir_); }, {path, "hidden_act", "gelu"}));
}

TEST_F(ModelConfigFilesTest, MissingConfigJson) {
  const std::string path = (dir_ / "config.json").string();
  EXPECT_TRUE(throws_error_with([&] { load_model_config(dir_); }, {path, "no such file"}));
  EXPECT_TRUE(throws_error_with([&] { load_model_config(dir_ / "nope"); }, {"config.json", "no such file"}));
}

}  // namespace
}  // namespace di
