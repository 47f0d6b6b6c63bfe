// End-to-end throughput of the GPU engine on one model directory (the 4b-geometry preset in the GPU
// round): prefill tokens/s for (length x sequences) batches, decode tokens/s at several batch sizes,
// where a decode step's time goes by stage, the time from process start to the first token, and peak
// GPU memory. Each prefill case is run
// on fresh state slots; times are wall clock around whole steps that end in a stream
// synchronisation (prefill: the logits of each sequence's last token are computed; decode: the
// greedy token of each sequence is sampled on the GPU and copied back), median of several runs.
//
// Floors: a forward pass does 2 FLOP per parameter per token in its GEMMs (plus attention and the
// GDN recurrence), so prefill MFU = tokens/s x 2 x params / 784 TFLOP/s; a decode step must stream
// every weight once, so its floor is weight bytes / 4.3 TB/s.
#include <CLI/CLI.hpp>
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "core/cuda.h"
#include "engine/cuda_ops.h"
#include "engine/qwen35_model.h"
#include "gpu_timing.h"
#include "kernels/sampling/ref.h"
#include "model/weights.h"

namespace di::bench {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int32_t> random_tokens(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> id(0, 248043);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& t : out) t = id(rng);
  return out;
}

// One forward step over fresh prompts of `len` tokens for `seqs` sequences; returns seconds.
// One prefill step of `seqs` fresh prompts of `len` tokens; its seconds. `profiled`: between
// cudaProfilerStart and Stop.
double prefill_once(const Qwen35Model& model, CudaOps& ops, int64_t len, int64_t seqs, std::mt19937_64& rng,
                    bool profiled = false) {
  BatchPlan plan;
  std::vector<int64_t> rows;
  std::vector<int> slots;
  for (int64_t s = 0; s < seqs; ++s) {
    slots.push_back(ops.alloc_slot());
    const std::vector<int32_t> ids = random_tokens(len, rng);
    plan.seqs.push_back({plan.n_tokens(), len, 0, slots.back()});
    plan.token_ids.insert(plan.token_ids.end(), ids.begin(), ids.end());
    for (int64_t i = 0; i < len; ++i) plan.positions.push_back(i);
    rows.push_back(plan.n_tokens() - 1);
  }
  DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
  if (profiled) DI_CUDA_CHECK(cudaProfilerStart());
  const auto t0 = Clock::now();
  Tensor logits = model.forward(plan, rows, ops);
  DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
  const double s = seconds_since(t0);
  if (profiled) DI_CUDA_CHECK(cudaProfilerStop());
  for (int slot : slots) ops.free_slot(slot);
  return s;
}

// LENxSEQS: SEQS prompts of LEN tokens.
std::pair<int64_t, int64_t> prefill_shape(const char* option, const std::string& shape) {
  long long len = 0, seqs = 0;
  if (std::sscanf(shape.c_str(), "%lldx%lld", &len, &seqs) != 2 || len < 1 || seqs < 1 || seqs > 64)
    fail("{} {}: expected LENxSEQS with LEN >= 1 and 1 <= SEQS <= 64", option, shape);
  return {len, seqs};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `batch` sequences, each prefilled (together) with a prompt of `context` tokens, ready to decode.
struct DecodeBatch {
  std::vector<int> slots;
  std::vector<int64_t> n_past;

  DecodeBatch(const Qwen35Model& model, CudaOps& ops, int64_t batch, std::mt19937_64& rng, int64_t context = 128) {
    BatchPlan plan;
    std::vector<int64_t> rows;
    for (int64_t s = 0; s < batch; ++s) {
      slots.push_back(ops.alloc_slot());
      const auto ids = random_tokens(context, rng);
      plan.seqs.push_back({plan.n_tokens(), context, 0, slots.back()});
      plan.token_ids.insert(plan.token_ids.end(), ids.begin(), ids.end());
      for (int64_t i = 0; i < context; ++i) plan.positions.push_back(i);
      rows.push_back(plan.n_tokens() - 1);
      n_past.push_back(context);
    }
    model.forward(plan, rows, ops);
  }
  // The next decode step: one random token for every sequence.
  BatchPlan next_step(std::mt19937_64& rng) {
    BatchPlan d;
    for (size_t s = 0; s < slots.size(); ++s) {
      d.seqs.push_back({int64_t(s), 1, n_past[s], slots[s]});
      d.token_ids.push_back(int32_t(rng() % 248000));
      d.positions.push_back(n_past[s]++);
    }
    return d;
  }
  void release(CudaOps& ops) {
    for (int slot : slots) ops.free_slot(slot);
  }
};

// Where a decode step's GPU time goes: eager decode steps with a CUDA event recorded at every named
// intermediate of the model (its trace points), and each interval charged to the stage that ends
// it, summed over the layers of a kind ("gdn mixed" = a GDN layer's input projections, "attn gated"
// = rope, KV append, attention and the sigmoid gate, "out" = the residual add fused with the next
// layer's norm). Eager launches leave small host gaps the graphs do not have, so the stages add up
// to a little more than a graphed step.
nlohmann::json decode_stages(const Qwen35Model& model, const ModelWeights& weights, CudaOps& ops, int64_t batch,
                             std::mt19937_64& rng) {
  constexpr int kSteps = 8;
  DecodeBatch sequences(model, ops, batch, rng);

  std::vector<cudaEvent_t> events;
  std::vector<std::string> stages;
  size_t used = 0;
  const auto mark = [&](const std::string& stage) {
    if (used == events.size()) {
      events.emplace_back();
      DI_CUDA_CHECK(cudaEventCreate(&events.back()));
    }
    DI_CUDA_CHECK(cudaEventRecord(events[used++], ops.stream()));
    stages.push_back(stage);
  };
  // "layers.7.gdn.core" -> "gdn core", "layers.3.post_norm" -> "attn post_norm" by the layer's kind.
  const auto stage_of = [&](const std::string& name) -> std::string {
    if (name.rfind("layers.", 0) != 0) return name;
    const size_t dot = name.find('.', 7);
    const int64_t layer = std::stoll(name.substr(7, dot - 7));
    std::string rest = name.substr(dot + 1);
    for (const char* kind : {"gdn.", "attn."})
      if (rest.rfind(kind, 0) == 0) rest = rest.substr(std::string(kind).size());
    const bool gdn = weights.layers[size_t(layer)].kind == LayerKind::linear_attention;
    return std::string(gdn ? "gdn " : "attn ") + rest;
  };
  std::map<std::string, double> ms;
  Qwen35Model traced = model;
  traced.observer = [&](const std::string& name, const Tensor&) { mark(stage_of(name)); };
  traced.observer_reads_values = false;
  const std::vector<sampling::SamplingRow> greedy(static_cast<size_t>(batch),
                                                  sampling::make_sampling_row(SamplingParams{}, 0));
  double step_ms = 0;
  for (int step = 0; step < kSteps + 1; ++step) {
    const BatchPlan d = sequences.next_step(rng);
    std::vector<int64_t> drows(static_cast<size_t>(batch));
    std::iota(drows.begin(), drows.end(), 0);
    DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
    used = 0;
    stages.clear();
    mark("start");
    ops.sample(traced.forward(d, drows, ops), greedy);
    mark("sampling");
    DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
    if (step == 0) continue;  // warm-up
    for (size_t i = 1; i < used; ++i) {
      float t = 0;
      DI_CUDA_CHECK(cudaEventElapsedTime(&t, events[i - 1], events[i]));
      ms[stages[i]] += t / kSteps;
      step_ms += t / kSteps;
    }
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  sequences.release(ops);
  std::printf("\ndecode step at batch %lld by stage (eager, events at the trace points): %.3f ms\n",
              (long long)batch, step_ms);
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [stage, t] : ms) order.push_back({t, stage});
  std::sort(order.rbegin(), order.rend());
  nlohmann::json out = {{"batch", batch}, {"step_ms", step_ms}, {"stages_ms", nlohmann::json::object()}};
  for (const auto& [t, stage] : order) {
    std::printf("  %-18s %8.3f ms %6.1f%%\n", stage.c_str(), t, 100 * t / step_ms);
    out["stages_ms"][stage] = t;
  }
  return out;
}

// One eager decode step (and its greedy sampling) between cudaProfilerStart and Stop, after a few
// warm-up steps: a profiler started with --profile-from-start off (scripts/profile_decode.sh) sees the
// step's kernels and nothing else.
void profile_one_step(const Qwen35Model& model, CudaOps& ops, int64_t batch, std::mt19937_64& rng) {
  DecodeBatch sequences(model, ops, batch, rng);
  const std::vector<sampling::SamplingRow> greedy(static_cast<size_t>(batch),
                                                  sampling::make_sampling_row(SamplingParams{}, 0));
  std::vector<int64_t> drows(static_cast<size_t>(batch));
  std::iota(drows.begin(), drows.end(), 0);
  for (int step = 0; step < 4; ++step) {
    const BatchPlan d = sequences.next_step(rng);
    DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
    if (step == 3) DI_CUDA_CHECK(cudaProfilerStart());
    ops.sample(model.forward(d, drows, ops), greedy);
    DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
    if (step == 3) DI_CUDA_CHECK(cudaProfilerStop());
  }
  sequences.release(ops);
  std::printf("profiled one eager decode step at batch %lld\n", (long long)batch);
}

}  // namespace
}  // namespace di::bench

int main(int argc, char** argv) {
  using namespace di;
  using namespace di::bench;
  const auto process_start = Clock::now();
  CLI::App app{"End-to-end GPU engine benchmark"};
  std::string model_dir, json_out;
  int decode_steps = 32;
  int64_t context = 128;
  std::vector<std::string> prefill_shapes{"128x8", "2048x1", "8192x1", "32768x1"};
  std::vector<int64_t> decode_batches{1, 8, 16, 64};
  int64_t profile_batch = 0;
  std::string profile_prefill;
  bool skip_prefill = false;
  app.add_option("--model", model_dir, "model directory")->required();
  app.add_option("--json", json_out, "write the report here");
  app.add_option("--decode-steps", decode_steps, "decode steps timed per batch size")->capture_default_str();
  app.add_flag("--skip-prefill", skip_prefill, "time decode steps only");
  app.add_option("--prefill", prefill_shapes, "timed prefill steps, LENxSEQS: SEQS fresh prompts of LEN tokens in one step")
      ->capture_default_str();
  app.add_option("--context", context, "prompt tokens of each sequence before the timed decode steps")
      ->check(CLI::Range(1, 32768))
      ->capture_default_str();
  app.add_option("--decode-batches", decode_batches, "batch sizes of the timed decode steps")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--profile-step", profile_batch,
                 "run one eager decode step of this batch size between cudaProfilerStart and Stop, then exit")
      ->check(CLI::Range(1, 64));
  app.add_option("--profile-prefill", profile_prefill,
                 "run one prefill step of this shape, LENxSEQS, between cudaProfilerStart and Stop (after one "
                 "unprofiled), then exit");
  CLI11_PARSE(app, argc, argv);
  try {
    if (cuda::device_count() == 0) fail("no CUDA device visible");
    std::mt19937_64 rng(7);
    // Start to first token: load (the checkpoint is expected in the page cache), upload, prefill a
    // short prompt, take the argmax on the host.
    const LoadedModel m = load_model(model_dir);
    const double load_s = seconds_since(process_start);
    Qwen35Model model(m.config, m.weights);
    // Room for 64 sequences of the context and their decode steps.
    const int64_t kv_tokens = std::max<int64_t>(40960, 64 * (context + decode_steps + 64));
    CudaOps ops(m.config, m.weights, CudaOpsOptions{.max_slots = 64, .kv_cache_tokens = kv_tokens});
    const double upload_s = seconds_since(process_start) - load_s;
    int64_t first_token = 0;
    {
      const int slot = ops.alloc_slot();
      BatchPlan plan;
      plan.token_ids = random_tokens(16, rng);
      plan.positions.resize(16);
      std::iota(plan.positions.begin(), plan.positions.end(), 0);
      plan.seqs.push_back({0, 16, 0, slot});
      const std::vector<float> logits = ops.to_host(model.forward(plan, {15}, ops));
      first_token = argmax(logits.data(), m.config.vocab_size);
      ops.free_slot(slot);
    }
    const double ttft_s = seconds_since(process_start);
    std::printf("start to first token: %.2f s (load %.2f s, upload %.2f s); token %lld\n", ttft_s, load_s, upload_s,
                (long long)first_token);
    if (profile_batch > 0) {
      profile_one_step(model, ops, profile_batch, rng);
      return 0;
    }
    if (!profile_prefill.empty()) {
      const auto [len, seqs] = prefill_shape("--profile-prefill", profile_prefill);
      prefill_once(model, ops, len, seqs, rng);  // GEMM plans, pool growth
      const double s = prefill_once(model, ops, len, seqs, rng, /*profiled=*/true);
      std::printf("profiled one prefill step of %lldx%lld (%.2f ms under the profiler)\n", (long long)len,
                  (long long)seqs, 1e3 * s);
      return 0;
    }

    size_t weight_bytes = 0;
    int64_t params = m.weights.parameter_count;
    weight_bytes = size_t(params) * 2;
    nlohmann::json report = {{"provenance", provenance()},
                             {"model", model_dir},
                             {"parameters", params},
                             {"start_to_first_token_s", ttft_s},
                             {"load_s", load_s},
                             {"upload_s", upload_s},
                             {"prefill", nlohmann::json::array()},
                             {"decode", nlohmann::json::array()}};

    std::printf("\n%-12s %12s %10s %8s\n", "prefill", "tokens/s", "ms", "MFU");
    for (const std::string& shape : prefill_shapes) {
      if (skip_prefill) break;
      const auto [len, seqs] = prefill_shape("--prefill", shape);
      std::vector<double> runs;
      prefill_once(model, ops, len, seqs, rng);  // warm-up: GEMM plans, pool growth
      for (int r = 0; r < 3; ++r) runs.push_back(prefill_once(model, ops, len, seqs, rng));
      const double s = median(runs), tok_s = double(len * seqs) / s;
      const double mfu = tok_s * 2.0 * double(params) / (kBf16TensorTflops * 1e12);
      std::printf("%5lldx%-6lld %12.0f %10.2f %7.1f%%\n", (long long)len, (long long)seqs, tok_s, s * 1e3, 100 * mfu);
      report["prefill"].push_back({{"len", len}, {"seqs", seqs}, {"tokens_per_s", tok_s}, {"median_ms", s * 1e3},
                                   {"mfu_2n", mfu}, {"runs", runs.size()}});
    }

    const double floor_ms = double(weight_bytes) / (kCopyTBps * 1e12) * 1e3;
    std::printf("\n%-8s %-7s %12s %10s %14s   (after %lld tokens of context)\n", "decode", "mode", "tokens/s",
                "ms/step", "of the floor", (long long)context);
    report["decode_context"] = context;
    for (int64_t batch : decode_batches)
    for (bool graphed : {true, false}) {
      DecodeBatch sequences(model, ops, batch, rng, context);
      // Greedy sampling on the GPU: only the token ids come back to the host.
      const std::vector<sampling::SamplingRow> greedy(static_cast<size_t>(batch),
                                                      sampling::make_sampling_row(SamplingParams{}, 0));
      std::vector<double> steps;
      for (int step = 0; step < decode_steps + 2; ++step) {
        const BatchPlan d = sequences.next_step(rng);
        std::vector<int64_t> drows(static_cast<size_t>(batch));
        std::iota(drows.begin(), drows.end(), 0);
        DI_CUDA_CHECK(cudaStreamSynchronize(ops.stream()));
        const auto t0 = Clock::now();
        // Graphed steps: the first of a batch size runs eagerly, the second is captured; eager
        // steps run every op from the host.
        const std::vector<int32_t> tokens =
            graphed ? ops.sample(ops.run_forward(d, drows, true, [&] { return model.forward(d, drows, ops); }), greedy)
                    : ops.sample(model.forward(d, drows, ops), greedy);
        if (step >= 2) steps.push_back(seconds_since(t0));  // two warm-up steps
      }
      sequences.release(ops);
      const double s = median(steps);
      const double tok_s = double(batch) / s;
      std::printf("%-8lld %-7s %12.1f %10.3f %13.1f%%\n", (long long)batch, graphed ? "graph" : "eager", tok_s,
                  s * 1e3, 100 * floor_ms / (s * 1e3));
      report["decode"].push_back({{"batch", batch}, {"cuda_graph", graphed}, {"tokens_per_s", tok_s},
                                  {"median_ms_per_step", s * 1e3},
                                  {"weight_streaming_floor_ms", floor_ms},
                                  {"fraction_of_floor", floor_ms / (s * 1e3)}, {"steps", steps.size()}});
    }
    report["decode_stages"] = nlohmann::json::array();
    for (int64_t batch : {1, 16}) report["decode_stages"].push_back(decode_stages(model, m.weights, ops, batch, rng));

    cudaMemPool_t pool;
    DI_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ops.device().ordinal));
    uint64_t pool_high = 0;
    DI_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &pool_high));
    const double peak_gib = double(ops.resident_bytes() + pool_high) / (1 << 30);
    std::printf("\npeak GPU memory: %.2f GiB (resident %.2f GiB: weights, 64 state slots, KV cache; activations "
                "pool high-water %.2f GiB)\n",
                peak_gib, double(ops.resident_bytes()) / (1 << 30), double(pool_high) / (1 << 30));
    report["peak_gpu_gib"] = peak_gib;
    report["resident_gib"] = double(ops.resident_bytes()) / (1 << 30);
    report["activation_pool_high_gib"] = double(pool_high) / (1 << 30);
    if (!json_out.empty()) std::ofstream(json_out) << report.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
