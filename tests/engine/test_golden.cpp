// Golden gates of the CPU engine, both precisions (the suite: support/golden_suite.h).
#include "support/golden_suite.h"

namespace di::golden {
namespace {

TEST(GoldenFixture, ModelBytesMatchTheReference) { expect_fixture_model_bytes(); }

INSTANTIATE_TEST_SUITE_P(TinyModel, GoldenTest,
                         ::testing::Values(GoldenCase{"f32", "short"}, GoldenCase{"f32", "long"},
                                           GoldenCase{"bf16", "short"}, GoldenCase{"bf16", "long"}),
                         case_name);

// The bf16 emulation must be what brings the engine close to transformers' bf16 run: its logits
// are nearer to that run than the engine's float32 logits are. A rounding point missed or added
// would erase that advantage.
TEST(GoldenBf16Emulation, IsCloserToTheBf16ReferenceThanFloat32Is) {
  const LoadedModel& m = testing::tiny_model();
  Qwen35Model model(m.config, m.weights);
  const int64_t vocab = m.config.vocab_size;
  for (const std::string prompt_name : {"short", "long"}) {
    const json& p = manifest()["prompts"][prompt_name];
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    double mean_error[2] = {0, 0};
    int i = 0;
    for (Precision precision : {Precision::bf16, Precision::f32}) {
      CpuOps ops(m.config, precision);
      Sequence seq(model, ops);
      const std::vector<float> logits = seq.feed(ids, true);
      double sum = 0;
      int64_t count = 0;
      for (const json& r : manifest()["runs"]["bf16"]["prompts"][prompt_name]["logit_rows"]) {
        const std::vector<float> ref = reference_logits("bf16", r["row"]);
        const int64_t pos = r["position"];
        for (int64_t v = 0; v < vocab; ++v, ++count) sum += std::fabs(logits[pos * vocab + v] - ref[v]);
      }
      mean_error[i++] = sum / double(count);
    }
    std::printf("[ golden ] %s: mean |logit error| against the bf16 reference: bf16 emulation %.4f, float32 %.4f\n",
                prompt_name.c_str(), mean_error[0], mean_error[1]);
    EXPECT_LT(mean_error[0], 0.85 * mean_error[1]) << prompt_name;
  }
}

}  // namespace
}  // namespace di::golden
