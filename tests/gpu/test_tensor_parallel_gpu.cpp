// Tensor parallelism on GPUs (model/tensor_parallel.h; CudaOps ranks joined by an NCCL DeviceGroup,
// driven by a TensorParallelRunner):
// - a group of one rank runs every collective path on one GPU (partial GEMMs in float32, all-reduce,
//   one rounding; the vocabulary-slice embedding and its all-reduce; the all-gather of the logits)
//   and gives the plain path's logits within the bf16 run-to-run tolerance;
// - with 2, 4 or 8 GPUs (skipped where fewer are visible), on the tiny-wide model and, where the GPU
//   round provides them, the 4B and 27B geometries (DI_4B_MODEL_DIR, DI_27B_MODEL_DIR): teacher-forced
//   on one GPU's greedy continuation, the ranks' logits are one GPU's within the bf16 run-to-run
//   tolerance, and the lone greedy tokens equal one GPU's up to a token whose top-two margin is
//   within twice the logit difference measured there;
// - the engine on the ranks (decode graphs on and off) gives 24 concurrent requests of 1 to 3000
//   tokens their lone greedy tokens and frees every slot and block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>

#include "engine/cuda_ops.h"
#include "engine/device_group.h"
#include "engine/engine.h"
#include "engine/engine_test_support.h"
#include "engine/sequence.h"
#include "engine/tensor_parallel_runner.h"
#include "gpu/gpu_test.h"
#include "model/tensor_parallel.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di {
namespace {

using testing::Alone;

OpsModelRunner::DeviceSampler sampler_of(CudaOps& ops) {
  return [&ops](const Tensor& logits, const std::vector<SamplingParams>& params, const std::vector<uint64_t>& steps) {
    std::vector<sampling::SamplingRow> rows;
    for (size_t i = 0; i < params.size(); ++i) rows.push_back(sampling::make_sampling_row(params[i], steps[i]));
    return ops.sample(logits, rows);
  };
}

// `size` ranks of a model on GPUs 0..size-1.
struct GpuRanks {
  DeviceGroup group;
  TensorParallelRunner runner;
  GpuRanks(const LoadedModel& m, int size, const CudaOpsOptions& base)
      : group(size),
        runner(
            size,
            [&](int rank) {
              DI_CUDA_CHECK(cudaSetDevice(rank));
              TensorParallelRunner::Rank r;
              r.weights = std::make_unique<RankWeights>(shard_weights(m.config, m.weights, size, rank));
              CudaOpsOptions o = base;
              o.group = &group;
              o.rank = rank;
              auto ops = std::make_unique<CudaOps>(r.weights->config, r.weights->weights, o);
              OpsModelRunner::DeviceSampler sampler = sampler_of(*ops);
              r.ops = std::move(ops);
              r.model = std::make_unique<Qwen35Model>(r.weights->config, r.weights->weights);
              r.runner = std::make_unique<OpsModelRunner>(*r.model, *r.ops, std::move(sampler));
              return r;
            },
            [this] { group.abort(); }) {}

  // Rank 0's lone greedy run of each prompt (every rank runs it; they agree by construction).
  std::vector<Alone> greedy_alone(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    std::vector<Alone> out;
    runner.on_every_rank([&](int rank, TensorParallelRunner::Rank& r) {
      for (const auto& p : prompts) {
        Alone a = testing::greedy_alone(*r.model, *r.ops, p, max_tokens);
        if (rank == 0) out.push_back(std::move(a));
      }
    });
    return out;
  }
};

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng));
  return t;
}

class TensorParallelGpu : public testing::SeededGpuTest<> {};

TEST_F(TensorParallelGpu, AOneRankGroupRunsTheCollectivePathsOnOneGpu) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const LoadedModel& m = testing::tiny_wide_model();
  const std::vector<int32_t> tokens = random_tokens(300, m.config.vocab_size, rng_);
  const Qwen35Model model(m.config, m.weights);
  CudaOps plain(m.config, m.weights, CudaOpsOptions{.max_slots = 1});
  std::vector<float> expected;
  {
    Sequence s(model, plain);
    expected = s.feed(tokens, /*all_logits=*/true);
  }
  DeviceGroup group(1);
  CudaOps grouped(m.config, m.weights, CudaOpsOptions{.max_slots = 1, .group = &group, .rank = 0});
  Sequence s(model, grouped);
  const std::vector<float> got = s.feed(tokens, /*all_logits=*/true);
  // The partial GEMM's float32 output is rounded by its own kernel instead of cuBLASLt's epilogue, and
  // cuBLASLt may pick another algorithm for it: rounding flips, nothing more.
  EXPECT_TRUE(testing::all_close(got, expected, testing::kBf16RunLogit, "logits of 300 tokens"));
  double sum = 0;
  for (size_t i = 0; i < got.size(); ++i) sum += std::fabs(double(got[i]) - double(expected[i]));
  EXPECT_LE(sum / double(got.size()), testing::kBf16RunLogitMean);
  std::printf("[ tp ] one-rank group against the plain path: mean |logit error| %.4f (%s)\n", sum / double(got.size()),
              group.describe().c_str());
}

class TensorParallelSizes : public testing::SeededGpuTest<>, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    testing::SeededGpuTest<>::SetUp();
    if (IsSkipped()) return;
    if (cuda::device_count() < GetParam())
      GTEST_SKIP() << GetParam() << " ranks need " << GetParam() << " GPUs, " << cuda::device_count() << " visible";
  }
};

// Logits after the prompt and after each continuation token fed one at a time (teacher forcing).
std::vector<std::vector<float>> forced_logits(const Qwen35Model& model, Ops& ops, const std::vector<int32_t>& prompt,
                                              const std::vector<int32_t>& continuation) {
  Sequence seq(model, ops);
  std::vector<std::vector<float>> steps{seq.feed(prompt)};
  for (size_t i = 0; i + 1 < continuation.size(); ++i) steps.push_back(seq.feed(std::span(continuation).subspan(i, 1)));
  return steps;
}

// One model, the same prompts on one GPU and on the ranks:
// - teacher-forced on one GPU's greedy continuation, the ranks' logits differ from one GPU's by at
//   most `tol` (mean within `mean_bound`): only the float32 order of three partial sums per layer
//   differs, so rounding flips are all there is;
// - the lone greedy tokens are equal, or part where one GPU's top two logits are within twice the
//   largest difference just measured on that prompt (the prefix up to a divergence is the forced
//   one, so a flip needs a margin that small).
void expect_ranks_match_one_gpu(const LoadedModel& m, int size, const std::vector<int64_t>& lengths, int64_t max_tokens,
                                testing::Tolerance tol, double mean_bound, std::mt19937_64& rng,
                                const std::string& name) {
  if (const std::string why = tensor_parallel_unsupported(m.config, size); !why.empty()) {
    std::printf("[ tp ] %s: %s\n", name.c_str(), why.c_str());
    return;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t n : lengths) prompts.push_back(random_tokens(n, m.config.vocab_size, rng));
  std::vector<Alone> one;
  std::vector<std::vector<std::vector<float>>> one_forced;
  {
    DI_CUDA_CHECK(cudaSetDevice(0));
    const Qwen35Model model(m.config, m.weights);
    CudaOps ops(m.config, m.weights, CudaOpsOptions{.max_slots = 1, .kv_cache_tokens = 8192});
    for (const auto& p : prompts) {
      one.push_back(testing::greedy_alone(model, ops, p, max_tokens));
      one_forced.push_back(forced_logits(model, ops, p, one.back().tokens));
    }
  }
  GpuRanks ranks(m, size, CudaOpsOptions{.max_slots = 1, .kv_cache_tokens = 8192});
  const std::vector<Alone> parallel = ranks.greedy_alone(prompts, max_tokens);
  std::vector<std::vector<std::vector<float>>> parallel_forced(prompts.size());
  ranks.runner.on_every_rank([&](int rank, TensorParallelRunner::Rank& r) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto steps = forced_logits(*r.model, *r.ops, prompts[i], one[i].tokens);
      if (rank == 0) parallel_forced[i] = std::move(steps);
    }
  });
  int equal = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = name + ", prompt of " + std::to_string(lengths[i]) + " tokens";
    double max_err = 0, sum = 0;
    size_t count = 0;
    for (size_t step = 0; step < one_forced[i].size(); ++step) {
      EXPECT_TRUE(testing::all_close(parallel_forced[i][step], one_forced[i][step], tol,
                                     what + ", forced step " + std::to_string(step)));
      for (size_t v = 0; v < one_forced[i][step].size(); ++v) {
        const double e = std::fabs(double(parallel_forced[i][step][v]) - double(one_forced[i][step][v]));
        max_err = std::max(max_err, e);
        sum += e;
        ++count;
      }
    }
    const double mean = sum / double(std::max<size_t>(count, 1));
    EXPECT_LE(mean, mean_bound) << what;
    // The margin rule with the measured difference: a tie is a margin within 2 * max_err.
    size_t first_diff = 0;
    while (first_diff < parallel[i].tokens.size() && first_diff < one[i].tokens.size() &&
           parallel[i].tokens[first_diff] == one[i].tokens[first_diff])
      ++first_diff;
    if (first_diff == one[i].tokens.size()) {
      EXPECT_EQ(parallel[i].tokens.size(), one[i].tokens.size()) << what;
      ++equal;
      std::printf("[ tp ] %s: forced logits max |diff| %.4f, mean %.5f; all %zu greedy tokens equal\n", what.c_str(),
                  max_err, mean, one[i].tokens.size());
    } else {
      EXPECT_LE(one[i].margin[first_diff], 2 * max_err)
          << what << ": token " << first_diff << " differs with one GPU's margin " << one[i].margin[first_diff]
          << ", more than twice the largest logit difference " << max_err;
      std::printf("[ tp ] %s: forced logits max |diff| %.4f, mean %.5f; tokens equal up to %zu of %zu, where one "
                  "GPU's margin is %.4f\n",
                  what.c_str(), max_err, mean, first_diff, one[i].tokens.size(), one[i].margin[first_diff]);
    }
  }
  std::printf("[ tp ] %s, %d ranks: %d of %zu prompts give one GPU's %lld greedy tokens\n", name.c_str(), size, equal,
              prompts.size(), static_cast<long long>(max_tokens));
}

TEST_P(TensorParallelSizes, GreedyTokensEqualOneGpu) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int size = GetParam();
  expect_ranks_match_one_gpu(testing::tiny_wide_model(), size, {1, 2, 63, 64, 65, 500, 3000}, 16,
                             testing::kBf16RunLogit, testing::kBf16RunLogitMean, rng_, "tiny-wide");
  for (const auto& [env, name] : {std::pair{"DI_4B_MODEL_DIR", "4b-geometry"}, {"DI_27B_MODEL_DIR", "27b-geometry"}}) {
    const char* dir = std::getenv(env);
    if (dir == nullptr) {
      std::printf("[ tp ] %s: %s not set, not run\n", name, env);
      continue;
    }
    const LoadedModel m = load_model(dir);
    expect_ranks_match_one_gpu(m, size, {17, 1000, 4000}, 32, testing::kBf16RunLogit32, testing::kBf16RunLogitMean32,
                               rng_, name);
  }
}

TEST_P(TensorParallelSizes, TheEngineOnRanksGivesEveryRequestItsLoneGreedyTokens) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const int size = GetParam();
  const LoadedModel& m = testing::tiny_wide_model();
  std::vector<int64_t> lengths = {1, 63, 64, 65, 3000};
  while (lengths.size() < 24) lengths.push_back(std::uniform_int_distribution<int64_t>(1, 3000)(rng_));
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int32_t>> prompts;
  int64_t total = 0;
  for (int64_t n : lengths) {
    GenerationRequest g;
    g.prompt = random_tokens(n, m.config.vocab_size, rng_);
    g.max_tokens = std::uniform_int_distribution<int64_t>(1, 12)(rng_);
    g.ignore_eos = true;
    total += n + g.max_tokens;
    prompts.push_back(g.prompt);
    requests.push_back(std::move(g));
  }
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "decode graphs" : "eager");
    const int64_t blocks = (total + 24 * 64) / 64;
    GpuRanks ranks(m, size, CudaOpsOptions{.max_slots = 24, .kv_cache_tokens = blocks * 64, .decode_graphs = graphs});
    std::vector<Alone> alone;
    for (size_t i = 0; i < requests.size(); ++i)
      alone.push_back(ranks.greedy_alone({prompts[i]}, requests[i].max_tokens).front());
    SchedulerConfig sc;
    sc.num_state_slots = 24;
    sc.max_num_seqs = 24;
    sc.num_kv_blocks = blocks;
    sc.block_size = 64;
    sc.max_num_batched_tokens = 512;
    sc.max_model_len = 3000 + 16;
    Engine engine(ranks.runner, m.config.vocab_size, EngineOptions{.scheduler = sc});
    std::vector<int64_t> ids;
    for (const GenerationRequest& g : requests) ids.push_back(engine.submit(g).id);
    int equal = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      equal += !testing::expect_greedy_matches(testing::drain(engine, ids[i]).tokens, alone[i], testing::kBf16RunLogit,
                                               "request of " + std::to_string(lengths[i]) + " tokens");
    std::printf("[ tp ] engine on %d ranks, %s: %d of 24 requests equal to alone, the others diverge at a low margin\n",
                size, graphs ? "graphs" : "eager", equal);
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.free_slots, s.total_slots);
    EXPECT_EQ(s.free_kv_blocks, s.total_kv_blocks);
    EXPECT_EQ(s.runner_slots, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelSizes, ::testing::Values(2, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

}  // namespace
}  // namespace di
