#pragma once
// Golden gates: the engine against Hugging Face transformers on the tiny model. The suite is
// defined here once and instantiated by the CPU tests (tests/engine/test_golden.cpp, both
// precisions) and by the GPU tests (tests/gpu/test_gpu_golden.cpp, the bf16 run on the GPU).
//
// The fixtures in tests/fixtures/golden/tiny-seed0 were recorded by tools/golden/make_golden.py
// (docs/golden.md says how). The model is regenerated here and must hash to the bytes the
// reference saw. Each precision of the engine is compared with the run of the same precision:
//   - full logits at the recorded positions (the tolerance helper's golden rows);
//   - the argmax and next-token log-probability at every prompt position;
//   - the 32 greedy steps of transformers' generate, teacher-forced through the engine's decode
//     path: the engine's argmax must equal the reference token at every step whose top-two margin
//     exceeds twice the logit tolerance; steps below it are reported, never silently skipped; and
//     at least 28 of the 32 steps must agree whatever their margin (in bf16, where the tolerance
//     is wide, this agreement rate is the token gate);
//   - free-running greedy generation, equal to the reference up to the first low-margin step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#if DI_HAVE_CUDA
#include "core/cuda.h"
#include "engine/cuda_ops.h"
#include "gdn/dispatch.h"
#endif
#include "core/sha256.h"
#include "engine/sequence.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di::golden {

using nlohmann::json;
using testing::Tolerance;

const std::filesystem::path kGoldenDir = std::filesystem::path(DI_FIXTURE_DIR) / "golden" / "tiny-seed0";

inline const json& manifest() {
  static const json m = [] {
    std::ifstream in(kGoldenDir / "manifest.json");
    EXPECT_TRUE(in.good()) << "missing golden manifest in " << kGoldenDir;
    return json::parse(in);
  }();
  return m;
}

// Row r of the recorded logits of a precision, as float.
inline std::vector<float> reference_logits(const std::string& precision, int64_t row) {
  const json& run = manifest()["runs"][precision];
  const int64_t vocab = run["vocab"];
  const bool bf16 = run["logits_dtype"] == "bf16";
  const size_t elem = bf16 ? 2 : 4;
  std::ifstream in(kGoldenDir / run["logits_file"].get<std::string>(), std::ios::binary);
  in.seekg(std::streamoff(row * vocab * int64_t(elem)));
  std::vector<char> bytes(size_t(vocab) * elem);
  in.read(bytes.data(), std::streamsize(bytes.size()));
  EXPECT_EQ(in.gcount(), std::streamsize(bytes.size())) << "logits file too short for row " << row;
  std::vector<float> out(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    if (bf16) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + i * 2, 2);
      out[i] = bf16_to_f32(bits);
    } else {
      std::memcpy(&out[i], bytes.data() + i * 4, 4);
    }
  }
  return out;
}

struct GoldenCase {
  std::string precision;  // "f32" or "bf16"
  std::string prompt;     // "short" or "long"
  std::string device = "cpu";  // "cpu" (CpuOps) or "cuda" (CudaOps, bf16 only)
  std::string gdn_backend;     // cuda: the GDN prefill backend forced ("" = production dispatch)
};

inline void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.device << " " << c.precision << " " << c.prompt << (c.gdn_backend.empty() ? "" : " gdn " + c.gdn_backend);
}

inline std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string backend = info.param.gdn_backend;
  std::replace(backend.begin(), backend.end(), '-', '_');  // test names are identifiers
  return info.param.precision + "_" + info.param.prompt + (backend.empty() ? "" : "_" + backend);
}

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {
 protected:
  void SetUp() override {
    precision_ = GetParam().precision == "f32" ? Precision::f32 : Precision::bf16;
    tol_ = precision_ == Precision::f32 ? testing::kGoldenF32Logit : testing::kGoldenBf16Logit;
    if (GetParam().device == "cuda") {
#if DI_HAVE_CUDA
      if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
      const std::string& backend = GetParam().gdn_backend;
      if (!backend.empty()) {
        const cuda::DeviceInfo d = cuda::current_device();
        const di_gdn_device device{d.sm_major, d.sm_minor, d.num_sms, d.shared_memory_per_block_optin};
        const di_gdn_geometry geometry{int32_t(testing::tiny_model().config.linear_num_key_heads),
                                       int32_t(testing::tiny_model().config.linear_num_value_heads),
                                       int32_t(testing::tiny_model().config.linear_key_head_dim),
                                       int32_t(testing::tiny_model().config.linear_value_head_dim)};
        for (const di_gdn_prefill_backend* b : gdn::prefill_backends())
          if (backend == b->name)
            if (const gdn::Verdict v = gdn::ask(*b, geometry, device, DI_GDN_STATE_KV); !v.ok)
              GTEST_SKIP() << "GDN backend " << backend << " does not run here: " << v.reason;
      }
      auto gpu = std::make_unique<CudaOps>(testing::tiny_model().config, testing::tiny_model().weights,
                                           CudaOpsOptions{.gdn_prefill_backend = backend});
      // A GDN backend with bf16 tensor-core operands rounds at other points than the float32 one:
      // its own tolerance row (tolerance.h), whether forced or chosen by the production dispatch.
      if (const std::string name = gpu->gdn_prefill_backend().name; name == "sm90")
        tol_ = testing::kGoldenBf16LogitTensorCoreGdn;
      else if (name == "flashinfer-sm90")
        tol_ = testing::kGoldenBf16LogitExternalGdn;
      ops_ = std::move(gpu);
#else
      GTEST_SKIP() << "built without CUDA";
#endif
    } else {
      ops_ = std::make_unique<CpuOps>(testing::tiny_model().config, precision_);
    }
    model_ = std::make_unique<Qwen35Model>(testing::tiny_model().config, testing::tiny_model().weights);
  }
  const json& prompt() const { return manifest()["prompts"][GetParam().prompt]; }
  const json& run() const { return manifest()["runs"][GetParam().precision]["prompts"][GetParam().prompt]; }
  std::vector<int32_t> prompt_ids() const { return prompt()["ids"].get<std::vector<int32_t>>(); }
  // Two logits each within the tolerance can swap order only when closer than twice its error.
  double margin_needed(double top_logit) const { return 2 * testing::allowed_error(tol_, top_logit); }

  Precision precision_;
  Tolerance tol_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Qwen35Model> model_;
};

inline void expect_fixture_model_bytes() {
  const json& m = manifest()["model"];
  EXPECT_EQ(sha256_file(testing::tiny_model_dir() / "model.safetensors"), m["safetensors_sha256"].get<std::string>())
      << "make-tiny-model no longer writes the checkpoint the golden fixtures were recorded on; regenerate them "
         "(docs/golden.md)";
  EXPECT_EQ(sha256_file(testing::tiny_model_dir() / "config.json"), m["config_sha256"].get<std::string>());
  EXPECT_EQ(manifest()["environment"]["fla_importable"], false);
  EXPECT_EQ(manifest()["environment"]["causal_conv1d_importable"], false);
}

TEST_P(GoldenTest, PrefillLogitsMatch) {
  const std::vector<int32_t> ids = prompt_ids();
  const int64_t vocab = testing::tiny_model().config.vocab_size, n = int64_t(ids.size());
  Sequence seq(*model_, *ops_);
  const std::vector<float> logits = seq.feed(ids, /*all_logits=*/true);
  ASSERT_EQ(int64_t(logits.size()), n * vocab);

  for (const json& r : run()["logit_rows"]) {
    const int64_t pos = r["position"];
    std::vector<float> ours(logits.begin() + pos * vocab, logits.begin() + (pos + 1) * vocab);
    EXPECT_TRUE(testing::all_close(ours, reference_logits(GetParam().precision, r["row"]), tol_,
                                   "logits at position " + std::to_string(pos)));
  }

  // Argmax and log-probability of the next token at every position.
  const auto ref_argmax = run()["argmax"].get<std::vector<int64_t>>();
  const auto ref_margin = run()["argmax_margin"].get<std::vector<double>>();
  const json& ref_logprob = run()["next_token_logprob"];
  int low_margin = 0, agree = 0, ties = 0;
  std::vector<double> ours_lp, ref_lp;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits.data() + t * vocab;
    const int64_t mine = argmax(row, vocab);
    // A margin of exactly 0 is a tie in the reference (common in bf16): its argmax is arbitrary.
    if (ref_margin[t] == 0) ++ties;
    else agree += (mine == ref_argmax[t]);
    if (ref_margin[t] > margin_needed(row[mine])) {
      EXPECT_EQ(mine, ref_argmax[t]) << "argmax at position " << t << " (reference margin " << ref_margin[t] << ")";
    } else {
      ++low_margin;
      std::printf("[ golden ] %s %s/%s position %lld: reference margin %.4g below %.4g; argmax ours %lld, ref %lld\n",
                  GetParam().device.c_str(), GetParam().precision.c_str(), GetParam().prompt.c_str(), (long long)t, ref_margin[t],
                  margin_needed(row[mine]), (long long)mine, (long long)ref_argmax[t]);
    }
    if (t + 1 < n) {
      double best = row[0], sum = 0;
      for (int64_t i = 1; i < vocab; ++i) best = std::max(best, double(row[i]));
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - best);
      ours_lp.push_back(double(row[ids[t + 1]]) - best - std::log(sum));
      ref_lp.push_back(ref_logprob[t + 1].get<double>());
    }
  }
  EXPECT_TRUE(testing::all_close(ours_lp, ref_lp, tol_, "next-token log-probabilities"));
  std::printf("[ golden ] %s %s/%s: %lld positions, %d below the margin; argmax agrees at %d of the %lld without a tie\n",
              GetParam().device.c_str(), GetParam().precision.c_str(), GetParam().prompt.c_str(), (long long)n,
              low_margin, agree,
              (long long)(n - ties));
  EXPECT_GE(agree, 0.9 * double(n - ties)) << "argmax agreement with transformers over the prompt";
}

TEST_P(GoldenTest, GreedyStepsMatchUnderTeacherForcing) {
  const std::vector<int32_t> ids = prompt_ids();
  const int64_t vocab = testing::tiny_model().config.vocab_size;
  Sequence seq(*model_, *ops_);
  std::vector<float> logits = seq.feed(ids);
  int checked = 0, low_margin = 0, agree = 0;
  const json& steps = run()["greedy"];
  ASSERT_EQ(steps.size(), 32u);
  for (size_t s = 0; s < steps.size(); ++s) {
    const json& step = steps[s];
    const int32_t ref_token = step["token"];
    const double margin = step["margin"];
    const int64_t mine = argmax(logits.data(), vocab);
    agree += (mine == ref_token);
    // The decode-path logits of the reference's top-5 tokens.
    const auto top_ids = step["top_ids"].get<std::vector<int64_t>>();
    const auto top_logits = step["top_logits"].get<std::vector<double>>();
    std::vector<float> ours_top;
    for (int64_t id : top_ids) ours_top.push_back(logits[id]);
    EXPECT_TRUE(testing::all_close(ours_top, top_logits, tol_, "top-5 logits at greedy step " + std::to_string(s)));
    if (margin > margin_needed(top_logits[0])) {
      EXPECT_EQ(mine, ref_token) << "greedy step " << s << " (reference margin " << margin << ")";
      ++checked;
    } else {
      ++low_margin;
      std::printf("[ golden ] %s %s/%s greedy step %zu: reference margin %.4g below %.4g; ours %lld, ref %d\n",
                  GetParam().device.c_str(), GetParam().precision.c_str(), GetParam().prompt.c_str(), s, margin,
                  margin_needed(top_logits[0]),
                  (long long)mine, ref_token);
    }
    const int32_t next[1] = {ref_token};
    logits = seq.feed(next);
  }
  std::printf("[ golden ] %s %s/%s: %d greedy steps above the margin (all equal), %d below it; %d of 32 agree\n",
              GetParam().device.c_str(), GetParam().precision.c_str(), GetParam().prompt.c_str(), checked,
              low_margin, agree);
  EXPECT_GE(agree, 28) << "teacher-forced greedy agreement with transformers";
  if (precision_ == Precision::f32) {
    EXPECT_GT(checked, 16) << "too few steps with a real margin to make this a test";
  }
}

TEST_P(GoldenTest, FreeRunningGreedyMatchesUpToFirstLowMarginStep) {
  const std::vector<int32_t> ids = prompt_ids();
  GenerateOptions options;
  options.max_tokens = 32;
  const std::vector<int32_t> ours = generate(*model_, *ops_, ids, options);
  const json& steps = run()["greedy"];
  size_t s = 0;
  for (; s < steps.size(); ++s) {
    const double top = steps[s]["top_logits"][0];
    if (steps[s]["margin"].get<double>() <= margin_needed(top)) break;
    ASSERT_EQ(ours.at(s), steps[s]["token"].get<int32_t>()) << "free-running greedy token " << s;
  }
  std::printf("[ golden ] %s %s/%s: free-running greedy equal for %zu of 32 steps (the rest follow a low-margin step)\n",
              GetParam().device.c_str(), GetParam().precision.c_str(), GetParam().prompt.c_str(), s);
}

}  // namespace di::golden
