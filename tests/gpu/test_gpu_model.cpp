// The GPU engine end to end on the tiny model and on the full 4B geometry:
//   - every named intermediate of a forward pass, GPU against the CPU reference in bf16;
//   - a 3000-token prompt prefilled in pieces of 1, 63, 64, 65 and 512 tokens against one piece
//     (the logits, and the conv and recurrent state of every GDN layer);
//   - sequences batched together (prefill, then decode) against each run alone, in both of the sm90
//     GDN kernel's CTA shapes;
//   - the 4b-geometry preset, all 32 layers, prefilling 2048 tokens and decoding 128.
// The GPU runs bf16 activations; two bf16 runs that sum in different orders (chunking, GEMM
// blocking) differ by rounding flips that spread through the layers, so whole-model comparisons use
// the tolerance rows written for that (kBf16RunLogit with a bound on the mean for logits,
// kBf16RunState for states).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <map>
#include <numeric>

#include "core/cuda.h"
#include "engine/cuda_ops.h"
#include "engine/sequence.h"
#include "gdn/context_split.h"
#include "gpu/gpu_test.h"
#include "kernels/gemm/small_batch_linear.h"
#include "model/tiny_model.h"
#include "support/seed.h"
#include "support/tiny_model_fixture.h"
#include "support/tolerance.h"

namespace di {
namespace {

using testing::all_close;

std::vector<int32_t> random_tokens(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(0, 248043);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& t : out) t = id(rng);
  return out;
}

// Logits of two bf16 runs: every element within kBf16RunLogit and the mean |error| within
// kBf16RunLogitMean (both printed, so the round's log records them).
::testing::AssertionResult logits_close(const std::vector<float>& actual, const std::vector<float>& expected,
                                        const std::string& what, testing::Tolerance tol = testing::kBf16RunLogit,
                                        double mean_bound = testing::kBf16RunLogitMean) {
  ::testing::AssertionResult max_ok = all_close(actual, expected, tol, what);
  if (!max_ok) return max_ok;
  double sum = 0, max_err = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(double(actual[i]) - double(expected[i]));
    sum += err;
    max_err = std::max(max_err, err);
  }
  const double mean = sum / double(std::max<size_t>(actual.size(), 1));
  std::printf("[ logits ] %s: max |error| %.4f, mean |error| %.4f over %zu logits\n", what.c_str(), max_err, mean,
              actual.size());
  if (mean <= mean_bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": mean |error| " << mean << " above " << mean_bound;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

class GpuModel : public testing::SeededGpuTest<> {
 protected:
  const LoadedModel& tiny() const { return testing::tiny_model(); }
};

// Layer by layer, the GPU against the CPU bf16 reference: a table of the largest difference of
// every named intermediate, and the logits within the bf16 run-to-run tolerance; with the production
// GDN prefill backend and with the float32 baseline forced (the CPU's GDN arithmetic is float32, so
// the tensor-core backend gets its own max bound, kBf16RunLogitTensorCoreGdn).
TEST_F(GpuModel, EveryIntermediateTracksTheCpuReference) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  Qwen35Model model(tiny().config, tiny().weights);
  CpuOps cpu(tiny().config, Precision::bf16);
  const std::vector<int32_t> tokens = random_tokens(200, rng_);
  std::map<std::string, std::vector<float>> cpu_values;
  model.observer = [&](const std::string& name, const Tensor& t) { cpu_values[name] = cpu.to_host(t); };
  Sequence cs(model, cpu);
  const std::vector<float> cpu_logits = cs.feed(tokens, true);
  for (const std::string forced : {"", "baseline"}) {
    CudaOps gpu(tiny().config, tiny().weights, CudaOpsOptions{.gdn_prefill_backend = forced});
    const std::string backend = gpu.gdn_prefill_backend().name;
    if (forced.empty() && backend == "baseline") continue;  // the second pass covers it
    SCOPED_TRACE("GDN prefill backend " + backend);
    std::printf("GDN prefill backend %s\n%-28s %12s %12s\n", backend.c_str(), "intermediate", "max |gpu-cpu|",
                "max |cpu|");
    model.observer = [&](const std::string& name, const Tensor& t) {
      const std::vector<float> g = gpu.to_host(t);
      const std::vector<float>& c = cpu_values.at(name);
      ASSERT_EQ(g.size(), c.size()) << name;
      double err = 0;
      for (size_t i = 0; i < g.size(); ++i) err = std::max(err, double(std::fabs(g[i] - c[i])));
      std::printf("%-28s %12.4g %12.4g\n", name.c_str(), err, max_abs(c));
    };
    Sequence gs(model, gpu);
    const std::vector<float> gpu_logits = gs.feed(tokens, true);
    EXPECT_TRUE(logits_close(gpu_logits, cpu_logits, "logits of 200 tokens",
                             backend == "baseline" ? testing::kBf16RunLogit : testing::kBf16RunLogitTensorCoreGdn));
  }
}

// A 3000-token prompt prefilled in pieces equals one piece: logits and every GDN layer's state, with
// the production GDN prefill backend and with the baseline forced. Layer 0 sees identical inputs in
// both runs, so its recurrent states differ only by the backend's arithmetic at other chunk
// boundaries: float32 summation order for the baseline (kF32ChunkingState), bf16 tensor-core operands
// for sm90 (kF32GdnTensorCoreState, the kernel's own error against the oracle); deeper layers see
// rounding flips (kBf16RunState, kBf16RunStateTensorCoreGdn). Pieces of up to 16 tokens (the last
// piece included) are the exception: their projections take the small-batch kernel, whose float32
// sums run in another order than cuBLASLt's, so layer 0's inputs too may differ by a bf16 rounding
// flip (its conv state by kBf16RoundingFlips; its recurrent state as a deeper layer's).
TEST_F(GpuModel, ChunkedPrefillEqualsWholePrefill) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const ModelConfig& c = tiny().config;
  Qwen35Model model(c, tiny().weights);
  const std::vector<int32_t> tokens = random_tokens(3000, rng_);
  for (const std::string forced : {"", "baseline"}) {
    CudaOps gpu(c, tiny().weights, CudaOpsOptions{.max_slots = 2, .gdn_prefill_backend = forced});
    const std::string backend = gpu.gdn_prefill_backend().name;
    if (forced.empty() && backend == "baseline") continue;  // the second pass covers it
    SCOPED_TRACE("GDN prefill backend " + backend);
    const testing::Tolerance layer0_state =
        backend == "baseline" ? testing::kF32ChunkingState : testing::kF32GdnTensorCoreState;
    const double logit_mean =
        backend == "baseline" ? testing::kBf16RunLogitMean : testing::kBf16RunLogitMeanTensorCoreGdn;
    const testing::Tolerance deeper_state =
        backend == "baseline" ? testing::kBf16RunState : testing::kBf16RunStateTensorCoreGdn;
    Sequence whole(model, gpu);
    const std::vector<float> whole_logits = whole.feed(tokens);
    const int64_t gdn_layers = c.num_layers_of(LayerKind::linear_attention);
    for (int64_t piece : {1, 63, 64, 65, 512}) {
      SCOPED_TRACE("pieces of " + std::to_string(piece));
      Sequence pieces(model, gpu);
      std::vector<float> logits;
      for (size_t i = 0; i < tokens.size(); i += size_t(piece))
        logits = pieces.feed(std::span<const int32_t>(tokens).subspan(i, std::min(tokens.size() - i, size_t(piece))));
      EXPECT_TRUE(logits_close(logits, whole_logits, "last-token logits", testing::kBf16RunLogit, logit_mean));
      for (int64_t l = 0; l < gdn_layers; ++l) {
        const std::string layer = "GDN layer " + std::to_string(l);
        // Layer 0: the same bf16 conv state; deeper layers see rounding flips.
        const std::vector<float> conv_w = gpu.conv_state(whole.slot(), l), conv_p = gpu.conv_state(pieces.slot(), l);
        const std::vector<float> rec_w = gpu.recurrent_state(whole.slot(), l),
                                 rec_p = gpu.recurrent_state(pieces.slot(), l);
        const int64_t last_piece = int64_t(tokens.size()) % piece == 0 ? piece : int64_t(tokens.size()) % piece;
        const bool small_batch = std::min(piece, last_piece) <= kernels::SmallBatchLinearParams::kMaxRows;
        if (l == 0) {
          EXPECT_TRUE(all_close(conv_p, conv_w, small_batch ? testing::kBf16RoundingFlips : testing::kExactF32,
                                layer + " conv state"));
          EXPECT_TRUE(all_close(rec_p, rec_w, small_batch ? deeper_state : layer0_state, layer + " recurrent state"));
        } else {
          EXPECT_TRUE(all_close(conv_p, conv_w, deeper_state, layer + " conv state"));
          EXPECT_TRUE(all_close(rec_p, rec_w, deeper_state, layer + " recurrent state"));
        }
      }
    }
  }
}

// Sequences of different lengths prefilled in one batch, then decoded together, give each
// sequence's logits alone. A prompt of at most 16 tokens alone takes the small-batch kernel for its
// projections (batched, cuBLASLt), whose float32 sums run in another order: its logits differ by the
// rounding flips that propagate from there, as in ChunkedPrefillEqualsWholePrefill's short pieces
// (the one-token prompt measured a mean of 0.26 with seed 2529224767 and the sm90 prefill, 0.0 with
// others); every longer prompt takes the same kernels both ways.
// Sequences of `lengths` tokens, each prefilled and decoded alone, against one prefill step of all
// of them and decode steps of all together: the logits of every sequence at every step. With
// `sm90_only`, a GPU whose production GDN prefill backend is another skips the test.
void expect_batched_equal_alone(const LoadedModel& m, const std::vector<int64_t>& lengths, std::mt19937_64& rng,
                                bool sm90_only = false) {
  const ModelConfig& c = m.config;
  Qwen35Model model(c, m.weights);
  CudaOps gpu(c, m.weights, CudaOpsOptions{.max_slots = int(lengths.size())});
  const bool sm90 = std::string(gpu.gdn_prefill_backend().name) == "sm90";
  if (sm90_only && !sm90) GTEST_SKIP() << "the GDN prefill backend is " << gpu.gdn_prefill_backend().name;
  const int64_t vocab = c.vocab_size, decode_steps = 5;
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t n : lengths) prompts.push_back(random_tokens(n + decode_steps, rng));

  // Alone: prefill the prompt, then feed the decode tokens one at a time.
  std::vector<std::vector<std::vector<float>>> alone(lengths.size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    Sequence seq(model, gpu);
    alone[s].push_back(seq.feed(std::span<const int32_t>(prompts[s]).first(size_t(lengths[s]))));
    for (int64_t d = 0; d < decode_steps; ++d)
      alone[s].push_back(seq.feed(std::span<const int32_t>(prompts[s]).subspan(size_t(lengths[s] + d), 1)));
  }
  // Together: one prefill step of all prompts, then decode steps of all sequences.
  std::vector<int> slots;
  for (size_t s = 0; s < lengths.size(); ++s) slots.push_back(gpu.alloc_slot());
  for (int64_t step = 0; step <= decode_steps; ++step) {
    BatchPlan plan;
    std::vector<int64_t> rows;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t n_past = step == 0 ? 0 : lengths[s] + step - 1, n = step == 0 ? lengths[s] : 1;
      plan.seqs.push_back({plan.n_tokens(), n, n_past, slots[s]});
      for (int64_t i = 0; i < n; ++i) {
        plan.token_ids.push_back(prompts[s][size_t(n_past + i)]);
        plan.positions.push_back(n_past + i);
      }
      rows.push_back(plan.n_tokens() - 1);
    }
    const std::vector<float> logits = gpu.to_host(model.forward(plan, rows, gpu));
    for (size_t s = 0; s < lengths.size(); ++s) {
      const std::vector<float> mine(logits.begin() + int64_t(s) * vocab, logits.begin() + int64_t(s + 1) * vocab);
      const bool flips = lengths[s] <= kernels::SmallBatchLinearParams::kMaxRows;
      const std::string what = "sequence " + std::to_string(s) + " step " + std::to_string(step);
      if (flips && sm90)
        EXPECT_TRUE(logits_close(mine, alone[s][size_t(step)], what, testing::kBf16RunLogitTensorCoreGdn,
                                 testing::kBf16RunLogitMeanTensorCoreGdn));
      else
        EXPECT_TRUE(logits_close(mine, alone[s][size_t(step)], what));
    }
  }
  for (int slot : slots) gpu.free_slot(slot);
}

TEST_F(GpuModel, BatchedSequencesEqualEachAlone) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  expect_batched_equal_alone(tiny(), {1, 63, 64, 65, 300}, rng_);
}

// The same with enough (sequence, value head) pairs in the prefill step for sm90's whole-head CTAs
// (more than half the SMs' worth, gdn/context_split.h): the tiny model's five sequences and four
// value heads take half-head CTAs, so without this only multi-sequence kernel tests and long
// engine runs reach the other shape. Ten sequences over the tiny-wide model's eight value heads.
TEST_F(GpuModel, BatchedSequencesEqualEachAloneInWholeHeadCtas) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const LoadedModel& wide = testing::tiny_wide_model();
  const std::vector<int64_t> lengths = {1, 2, 63, 64, 65, 127, 128, 129, 300, 40};
  const int64_t pairs = int64_t(lengths.size()) * wide.config.linear_num_value_heads;
  if (!gdn::whole_head_ctas(pairs, cuda::current_device().num_sms))
    GTEST_SKIP() << pairs << " (sequence, value head) pairs take half-head CTAs on this GPU's "
                 << cuda::current_device().num_sms << " SMs";
  expect_batched_equal_alone(wide, lengths, rng_, /*sm90_only=*/true);
}

// Decode steps replayed from CUDA graphs give the logits of the same steps run eagerly (a graph
// fixes the attention's split count for the longest context of its block-table width, so the two
// differ by float32 reordering there, then by bf16 rounding flips). The longest sequence crosses
// 16 blocks of 64 tokens on the way, so the steps need a graph of width 16 and then one of 32.
TEST_F(GpuModel, DecodeGraphsMatchEagerSteps) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  const ModelConfig& c = tiny().config;
  Qwen35Model model(c, tiny().weights);
  CudaOps graphs(c, tiny().weights, CudaOpsOptions{.max_slots = 4, .kv_cache_tokens = 4096});
  CudaOps eager(c, tiny().weights, CudaOpsOptions{.max_slots = 4, .kv_cache_tokens = 4096, .decode_graphs = false});
  const std::vector<int64_t> lengths = {5, 64, 1020};
  const int64_t batch = int64_t(lengths.size()), vocab = c.vocab_size;
  std::vector<std::vector<int32_t>> tokens;
  for (int64_t n : lengths) tokens.push_back(random_tokens(n + 12, rng_));
  std::vector<int> g_slots, e_slots;
  for (int64_t i = 0; i < batch; ++i) g_slots.push_back(graphs.alloc_slot()), e_slots.push_back(eager.alloc_slot());
  for (int64_t step = 0; step <= 12; ++step) {
    auto plan_for = [&](const std::vector<int>& slots) {
      BatchPlan plan;
      for (int64_t s = 0; s < batch; ++s) {
        const int64_t n_past = step == 0 ? 0 : lengths[size_t(s)] + step - 1, n = step == 0 ? lengths[size_t(s)] : 1;
        plan.seqs.push_back({plan.n_tokens(), n, n_past, slots[size_t(s)]});
        for (int64_t i = 0; i < n; ++i) {
          plan.token_ids.push_back(tokens[size_t(s)][size_t(n_past + i)]);
          plan.positions.push_back(n_past + i);
        }
      }
      return plan;
    };
    const BatchPlan gp = plan_for(g_slots), ep = plan_for(e_slots);
    std::vector<int64_t> rows;
    for (const SequenceSpan& s : gp.seqs) rows.push_back(s.first_token + s.n_tokens - 1);
    const std::vector<float> g = graphs.to_host(graphs.run_forward(gp, rows, true, [&] { return model.forward(gp, rows, graphs); }));
    const std::vector<float> e = eager.to_host(eager.run_forward(ep, rows, true, [&] { return model.forward(ep, rows, eager); }));
    ASSERT_EQ(g.size(), size_t(batch * vocab));
    EXPECT_TRUE(logits_close(g, e, "decode step " + std::to_string(step)));
  }
  EXPECT_EQ(graphs.captured_graphs(), 2u) << "decode steps of batch 3 are captured once per block-table width";
  EXPECT_EQ(eager.captured_graphs(), 0u);
}

// The full 4B geometry (32 layers, random weights): 2048 tokens of prefill then 128 greedy decode
// steps. Two comparisons, against a prefill of the whole sequence that gives the logits of the same
// 128 positions: the last step's logits within the bf16 run-to-run tolerance of a 32-layer model,
// and the greedy tokens equal to the prefill's argmax wherever its top-two margin exceeds twice that
// tolerance (the golden gates' margin rule). For scale, the GPU against the CPU bf16 reference on
// the first 32 tokens is printed (and held to the same tolerance).
TEST_F(GpuModel, FullSize4bGeometryPrefillsAndDecodes) {
  SCOPED_TRACE(testing::seed_trace(seed_));
  // The GPU round writes the checkpoint once for this test and the benchmarks (DI_4B_MODEL_DIR).
  const char* shared = std::getenv("DI_4B_MODEL_DIR");
  const std::filesystem::path dir = shared ? std::filesystem::path(shared) : testing::fresh_temp_dir("4b");
  auto t0 = std::chrono::steady_clock::now();
  if (!shared) write_tiny_model(dir, TinyModelOptions{.preset = "4b-geometry"});
  const LoadedModel m = load_model(dir);
  ASSERT_EQ(m.config.num_layers, 32);
  const int64_t vocab = m.config.vocab_size;
  Qwen35Model model(m.config, m.weights);
  CudaOps gpu(m.config, m.weights, CudaOpsOptions{.max_slots = 2, .kv_cache_tokens = 8192});
  std::printf("4b-geometry written, loaded and uploaded in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const std::vector<int32_t> prompt = random_tokens(2048, rng_);

  {  // the scale of bf16 run-to-run differences at 32 layers: GPU against the CPU reference
    const std::span<const int32_t> head = std::span<const int32_t>(prompt).first(32);
    CpuOps cpu(m.config, Precision::bf16);
    Sequence c(model, cpu), g(model, gpu);
    EXPECT_TRUE(logits_close(g.feed(head), c.feed(head), "4b: GPU against CPU bf16, last of 32 tokens",
                             testing::kBf16RunLogit32, testing::kBf16RunLogitMean32));
  }

  Sequence seq(model, gpu);
  std::vector<float> logits = seq.feed(prompt);
  std::vector<int32_t> all = prompt;
  for (int64_t step = 0; step < 128; ++step) {
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << "non-finite logit at decode step " << step;
    const int32_t next = int32_t(argmax(logits.data(), vocab));
    all.push_back(next);
    if (step == 127) break;
    const int32_t one[1] = {next};
    logits = seq.feed(one);
  }
  EXPECT_EQ(seq.n_past(), 2048 + 127);

  // One prefill of the 2175 tokens fed above, with the logits of the positions that chose the 128 tokens.
  const int slot = gpu.alloc_slot();
  BatchPlan plan;
  plan.token_ids.assign(all.begin(), all.end() - 1);
  plan.positions.resize(plan.token_ids.size());
  std::iota(plan.positions.begin(), plan.positions.end(), 0);
  plan.seqs.push_back({0, plan.n_tokens(), 0, slot});
  std::vector<int64_t> rows;
  for (int64_t p = 2047; p < plan.n_tokens(); ++p) rows.push_back(p);
  const std::vector<float> prefill = gpu.to_host(model.forward(plan, rows, gpu));
  gpu.free_slot(slot);
  const std::vector<float> last(prefill.end() - vocab, prefill.end());
  EXPECT_TRUE(logits_close(logits, last, "4b: logits of decode step 127 against the prefill",
                           testing::kBf16RunLogit32, testing::kBf16RunLogitMean32));
  int above = 0, agree_above = 0, agree = 0;
  for (size_t s = 0; s < rows.size(); ++s) {
    const float* row = prefill.data() + s * size_t(vocab);
    const int64_t best = argmax(row, vocab);
    float second = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i)
      if (i != best) second = std::max(second, row[i]);
    const bool same = best == all[2048 + s];
    agree += same;
    if (row[best] - second > 2 * testing::allowed_error(testing::kBf16RunLogit32, row[best])) {
      ++above;
      agree_above += same;
      EXPECT_TRUE(same) << "decode step " << s << ": greedy token " << all[2048 + s] << ", prefill argmax " << best
                        << " with margin " << row[best] - second;
    }
  }
  std::printf("4b: greedy decode tokens equal the prefill argmax at %d of 128 steps (%d of %d above the margin)\n",
              agree, agree_above, above);
  // The random 4B model's top-two margins rarely exceed twice kBf16RunLogit32 (0 and 4 of 128 steps
  // in the H200 runs), so the agreement rate is the token gate here, as in the bf16 golden gates
  // (measured 109 and 114 of 128).
  EXPECT_GE(agree, 96) << "greedy decode tokens against the prefill's argmax";
  if (!shared) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace di
