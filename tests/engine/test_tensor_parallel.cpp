// Tensor parallelism on the CPU (model/tensor_parallel.h, engine/tensor_parallel_runner.h), ranks as
// threads joined by HostCollectives:
// - sizes that do not split a model are refused with the count that does not divide;
// - every rank's slice holds exactly its heads' rows and columns, KV and GDN key heads replicated
//   where there are more ranks than heads, each with the q or value heads that read it;
// - 2, 4 and 8 ranks give the logits of one (float32: summation order only), every rank the same;
// - the engine on 2 and 4 ranks (bf16) gives every request the greedy tokens it gets on one rank
//   alone, and frees every slot and block;
// - a rank that fails before a collective ends the step with its own error instead of leaving the
//   other ranks waiting.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/engine.h"
#include "engine/engine_host.h"
#include "engine/engine_test_support.h"
#include "engine/sequence.h"
#include "engine/tensor_parallel_runner.h"
#include "kernels/cpu_ops.h"
#include "model/tensor_parallel.h"
#include "model/tiny_model.h"
#include "support/seed.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di {
namespace {

ModelConfig preset(const std::string& name) { return tiny_model_config({.preset = name}); }

void expect_refused(const ModelConfig& c, int size, const std::string& reason) {
  const std::string why = tensor_parallel_unsupported(c, size);
  EXPECT_NE(why.find(reason), std::string::npos) << "size " << size << ": '" << why << "' lacks '" << reason << "'";
  EXPECT_THROW(rank_config(c, size), Error);
}

TEST(TensorParallelConfig, SizesThatDoNotSplitTheModelAreRefusedWithTheReason) {
  const ModelConfig four_b = preset("4b-geometry"), big = preset("27b-geometry");
  for (int size : {1, 2, 4, 8}) {
    EXPECT_EQ(tensor_parallel_unsupported(four_b, size), "");
    EXPECT_EQ(tensor_parallel_unsupported(big, size), "");
  }
  const ModelConfig r4b = rank_config(four_b, 8), r27b = rank_config(big, 8);
  EXPECT_EQ(std::vector<int64_t>({r4b.num_attention_heads, r4b.num_kv_heads, r4b.linear_num_key_heads,
                                  r4b.linear_num_value_heads, r4b.intermediate_size, r4b.vocab_size}),
            std::vector<int64_t>({2, 1, 2, 4, 1152, 248320}));
  EXPECT_EQ(std::vector<int64_t>({r27b.num_attention_heads, r27b.num_kv_heads, r27b.linear_num_key_heads,
                                  r27b.linear_num_value_heads, r27b.intermediate_size}),
            std::vector<int64_t>({3, 1, 2, 6, 2176}));

  expect_refused(four_b, 0, "not a positive count");
  expect_refused(preset("tiny"), 3, "does not divide the 4 attention heads");
  expect_refused(preset("tiny"), 8, "does not divide the 4 attention heads");
  ModelConfig c = four_b;
  c.num_kv_heads = 3;
  expect_refused(c, 2, "neither divides the 3 KV heads");
  c = four_b;
  c.linear_num_value_heads = 36;
  c.linear_num_key_heads = 12;
  expect_refused(c, 8, "does not divide the 36 GDN value heads");
  c.linear_num_value_heads = 48;
  expect_refused(c, 8, "neither divides the 12 GDN key heads");
  c = four_b;
  c.intermediate_size = 9220;
  expect_refused(c, 8, "intermediate size 9220");
  c = four_b;
  c.vocab_size = 248322;
  expect_refused(c, 4, "vocabulary of 248322");
}

// Row `row` of a tensor viewed as [rows, ...].
const uint8_t* row_of(const TensorView& t, int64_t row) {
  return static_cast<const uint8_t*>(t.data) + size_t(row) * (t.nbytes() / size_t(t.dim(0)));
}
bool same_rows(const TensorView& a, int64_t a_row, const TensorView& b, int64_t b_row, int64_t n) {
  const size_t bytes = a.nbytes() / size_t(a.dim(0));
  return bytes == b.nbytes() / size_t(b.dim(0)) && std::memcmp(row_of(a, a_row), row_of(b, b_row), bytes * n) == 0;
}
bool same_columns(const TensorView& a, int64_t a_col, const TensorView& b, int64_t b_col, int64_t n) {
  if (a.dim(0) != b.dim(0)) return false;
  const size_t e = dtype_size(a.dtype);
  for (int64_t i = 0; i < a.dim(0); ++i)
    if (std::memcmp(static_cast<const uint8_t*>(a.data) + (i * a.dim(1) + a_col) * e,
                    static_cast<const uint8_t*>(b.data) + (i * b.dim(1) + b_col) * e, size_t(n) * e) != 0)
      return false;
  return true;
}

// What each rank holds, checked head by head against the whole model: a local head's rows are its
// global head's, and the KV (key) head it reads locally is the one its global head reads.
TEST(TensorParallelWeights, EveryRankHoldsItsHeadsAndTheHeadsTheyRead) {
  const LoadedModel& m = testing::tiny_wide_model();
  const ModelConfig& c = m.config;
  const int64_t D = c.head_dim, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, H = c.hidden_size;
  for (int size : {2, 4, 8}) {
    for (int rank = 0; rank < size; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(size));
      const RankWeights rw = shard_weights(c, m.weights, size, rank);
      const ModelConfig& rc = rw.config;
      const ModelWeights& w = rw.weights;
      const int64_t V = c.vocab_size / size;
      EXPECT_EQ(rw.vocab_begin, rank * V);
      EXPECT_TRUE(same_rows(w.embed_tokens, 0, m.weights.embed_tokens, rank * V, V));
      EXPECT_EQ(w.lm_head.data, w.embed_tokens.data) << "a tied head shares the embedding's slice";
      EXPECT_LT(rank_weight_bytes(rw), rank_weight_bytes(shard_weights(c, m.weights, 1, 0)));
      for (size_t l = 0; l < w.layers.size(); ++l) {
        SCOPED_TRACE("layer " + std::to_string(l));
        const LayerWeights& R = w.layers[l];
        const LayerWeights& F = m.weights.layers[l];
        const int64_t I = rc.intermediate_size;
        EXPECT_TRUE(same_rows(R.mlp.gate_proj, 0, F.mlp.gate_proj, rank * I, I));
        EXPECT_TRUE(same_rows(R.mlp.up_proj, 0, F.mlp.up_proj, rank * I, I));
        EXPECT_TRUE(same_columns(R.mlp.down_proj, 0, F.mlp.down_proj, rank * I, I));
        EXPECT_EQ(R.input_layernorm.data, F.input_layernorm.data);
        if (R.kind == LayerKind::linear_attention) {
          const int64_t hv = rc.linear_num_value_heads, hk = rc.linear_num_key_heads;
          ASSERT_EQ(R.gdn.in_proj_qkv.dim(0), rc.gdn_conv_dim());
          for (int64_t j = 0; j < hv; ++j) {
            const int64_t gv = rank * hv + j;                                          // global value head
            const int64_t lk = j / (hv / hk), gk = gv / (c.linear_num_value_heads / c.linear_num_key_heads);
            for (const auto& [r, f] : {std::pair{&R.gdn.in_proj_qkv, &F.gdn.in_proj_qkv}, {&R.gdn.conv1d, &F.gdn.conv1d}}) {
              EXPECT_TRUE(same_rows(*r, lk * dk, *f, gk * dk, dk)) << "Q rows of value head " << gv;
              EXPECT_TRUE(same_rows(*r, hk * dk + lk * dk, *f, c.gdn_key_dim() + gk * dk, dk)) << "K rows";
              EXPECT_TRUE(same_rows(*r, 2 * hk * dk + j * dv, *f, 2 * c.gdn_key_dim() + gv * dv, dv)) << "V rows";
            }
            EXPECT_TRUE(same_rows(R.gdn.in_proj_z, j * dv, F.gdn.in_proj_z, gv * dv, dv));
            for (const auto& [r, f] : {std::pair{&R.gdn.in_proj_a, &F.gdn.in_proj_a}, {&R.gdn.in_proj_b, &F.gdn.in_proj_b},
                                       {&R.gdn.A_log, &F.gdn.A_log}, {&R.gdn.dt_bias, &F.gdn.dt_bias}})
              EXPECT_TRUE(same_rows(*r, j, *f, gv, 1));
            EXPECT_TRUE(same_columns(R.gdn.out_proj, j * dv, F.gdn.out_proj, gv * dv, dv));
          }
          EXPECT_EQ(R.gdn.out_proj.dim(0), H);
        } else {
          const int64_t hq = rc.num_attention_heads, hkv = rc.num_kv_heads;
          for (int64_t i = 0; i < hq; ++i) {
            const int64_t gq = rank * hq + i, lkv = i / (hq / hkv), gkv = gq / (c.num_attention_heads / c.num_kv_heads);
            EXPECT_TRUE(same_rows(R.attn.q_proj, i * 2 * D, F.attn.q_proj, gq * 2 * D, 2 * D)) << "q head " << gq;
            EXPECT_TRUE(same_rows(R.attn.k_proj, lkv * D, F.attn.k_proj, gkv * D, D)) << "its KV head " << gkv;
            EXPECT_TRUE(same_rows(R.attn.v_proj, lkv * D, F.attn.v_proj, gkv * D, D));
            EXPECT_TRUE(same_columns(R.attn.o_proj, i * D, F.attn.o_proj, gq * D, D));
          }
        }
      }
    }
  }
}

// Ranks of the tiny-wide model on CpuOps, one HostCollectives group.
struct CpuRanks {
  HostCollectives group;
  TensorParallelRunner runner;
  CpuRanks(int size, Precision precision, const std::function<void(int, RankWeights&)>& tamper = {})
      : group(size),
        runner(
            size,
            [&](int rank) {
              const LoadedModel& m = testing::tiny_wide_model();
              TensorParallelRunner::Rank r;
              r.weights = std::make_unique<RankWeights>(shard_weights(m.config, m.weights, size, rank));
              if (tamper) tamper(rank, *r.weights);
              r.ops = std::make_unique<CpuOps>(r.weights->config, precision, &group, rank);
              r.model = std::make_unique<Qwen35Model>(r.weights->config, r.weights->weights);
              r.runner = std::make_unique<OpsModelRunner>(*r.model, *r.ops);
              return r;
            },
            [this] { group.abort(); }) {}
};

std::vector<int32_t> random_tokens(int64_t n, std::mt19937& rng) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = std::uniform_int_distribution<int32_t>(0, 248319)(rng);
  return t;
}

class TensorParallelCpu : public ::testing::Test {
 protected:
  uint32_t seed_ = testing::fresh_seed();
  std::mt19937 rng_{seed_};
};

// A prompt prefilled in two pieces and three decode steps: every step's last-token logits.
std::vector<std::vector<float>> prefill_and_decode(const Qwen35Model& model, Ops& ops,
                                                   const std::vector<int32_t>& tokens) {
  Sequence seq(model, ops);
  std::vector<std::vector<float>> steps;
  steps.push_back(seq.feed(std::span(tokens).first(70)));
  steps.push_back(seq.feed(std::span(tokens).subspan(70, tokens.size() - 73)));
  for (size_t i = tokens.size() - 3; i < tokens.size(); ++i) steps.push_back(seq.feed(std::span(tokens).subspan(i, 1)));
  return steps;
}

TEST_F(TensorParallelCpu, RanksGiveTheLogitsOfTheWholeModel) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const LoadedModel& m = testing::tiny_wide_model();
  const std::vector<int32_t> tokens = random_tokens(150, rng_);
  CpuOps one(m.config, Precision::f32);
  const Qwen35Model whole(m.config, m.weights);
  const std::vector<std::vector<float>> expected = prefill_and_decode(whole, one, tokens);
  for (int size : {2, 4, 8}) {
    SCOPED_TRACE(std::to_string(size) + " ranks");
    CpuRanks ranks(size, Precision::f32);
    std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(size));
    ranks.runner.on_every_rank([&](int rank, TensorParallelRunner::Rank& r) {
      got[size_t(rank)] = prefill_and_decode(*r.model, *r.ops, tokens);
    });
    for (size_t step = 0; step < expected.size(); ++step) {
      // Float32 partial sums added over ranks: the whole model's arithmetic in another order.
      EXPECT_TRUE(testing::all_close(got[0][step], expected[step], testing::kF32ReorderLogit,
                                     "logits of step " + std::to_string(step)));
      for (int rank = 1; rank < size; ++rank)
        EXPECT_TRUE(testing::all_close(got[size_t(rank)][step], got[0][step], testing::kExactF32,
                                       "rank " + std::to_string(rank) + " against rank 0"));
    }
  }
}

TEST_F(TensorParallelCpu, TheEngineOnRanksGivesTheGreedyTokensOfOneRank) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const LoadedModel& m = testing::tiny_wide_model();
  std::vector<GenerationRequest> requests;
  for (int64_t len : {1, 2, 63, 64, 65, 130, 7, 300}) {
    GenerationRequest g;
    g.prompt = random_tokens(len, rng_);
    g.max_tokens = std::uniform_int_distribution<int64_t>(1, 12)(rng_);
    g.ignore_eos = true;
    requests.push_back(std::move(g));
  }
  CpuOps one(m.config, Precision::bf16);
  const Qwen35Model whole(m.config, m.weights);
  std::vector<testing::Alone> alone;
  for (const GenerationRequest& g : requests) alone.push_back(testing::greedy_alone(whole, one, g.prompt, g.max_tokens));

  for (int size : {2, 4}) {
    SCOPED_TRACE(std::to_string(size) + " ranks");
    EngineHostOptions o;
    o.model_dir = testing::tiny_wide_model_dir().string();
    o.device = "cpu";
    o.tensor_parallel_size = size;
    o.max_num_seqs = 4;  // fewer slots than requests: some wait for others
    o.max_num_batched_tokens = 64;
    o.max_model_len = 512;
    EngineHost host(o);
    Engine& engine = host.engine();
    std::vector<int64_t> ids;
    for (const GenerationRequest& g : requests) ids.push_back(engine.submit(g).id);
    for (size_t i = 0; i < ids.size(); ++i) {
      const testing::Drained d = testing::drain(engine, ids[i]);
      // Partial sums added over ranks in float32, then rounded: flips only where bf16 rounds a tie.
      testing::expect_greedy_matches(d.tokens, alone[i], testing::kBf16RunLogit, "request " + std::to_string(i));
    }
    const EngineStats s = engine.stats();
    EXPECT_EQ(s.free_slots, s.total_slots);
    EXPECT_EQ(s.free_kv_blocks, s.total_kv_blocks);
    EXPECT_EQ(s.runner_slots, 0);
  }
}

TEST_F(TensorParallelCpu, ARankThatFailsEndsTheStepWithItsErrorInsteadOfHanging) {
  // Rank 1's first GDN input projection takes the wrong width: it throws before the layer's
  // all-reduce, where rank 0 is then waiting.
  CpuRanks ranks(2, Precision::f32, [](int rank, RankWeights& w) {
    if (rank == 1) w.weights.layers[0].gdn.in_proj_z.shape[1] -= 1;
  });
  ranks.runner.add(7, SamplingParams{});
  StepPlan plan;
  plan.items.push_back(StepItem{.request_id = 7, .start = 0, .tokens = random_tokens(5, rng_), .samples = true});
  try {
    ranks.runner.run(plan);
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not take"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ranks.runner.run(plan), Error) << "the runner stays failed";
}

}  // namespace
}  // namespace di
