// deltainfer bench-offline: many requests of given input and output lengths through the engine in
// this process (no HTTP), with at most --concurrency in flight; throughput, TTFT and TPOT percentiles.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/provenance.h"
#include "engine/engine_host.h"

namespace di::cli {
namespace {

struct BenchOptions {
  EngineCliOptions engine;
  int64_t num_requests = 64;
  int64_t input_len = 1024;
  int64_t output_len = 256;
  int64_t concurrency = 16;
  int64_t warmup = -1;  // -1: min(concurrency, num_requests)
  uint64_t seed = 0;
  std::string json_out;
};

using Clock = std::chrono::steady_clock;

struct Timing {
  double ttft_s = 0;     // submit to the first token
  double tpot_s = 0;     // (last token - first token) / (tokens - 1)
  double latency_s = 0;  // submit to the last token
  int64_t tokens = 0;
  std::string finish;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

nlohmann::json summary(const std::vector<double>& v) {
  return {{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)},
          {"mean", v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size())}};
}

void run_bench(const BenchOptions& o) {
  if (o.num_requests < 1 || o.input_len < 1 || o.output_len < 1 || o.concurrency < 1)
    fail("bench-offline: --num-requests, --input-len, --output-len and --concurrency must be >= 1");
  EngineHostOptions h = o.engine.host_options();
  h.max_waiting = std::max<int64_t>(o.concurrency, 1);
  h.max_model_len = o.input_len + o.output_len;
  EngineHost host(h);
  Engine& engine = host.engine();
  const int64_t vocab = host.config().vocab_size;

  // Random prompts (ids drawn uniformly, seeded), each request generating exactly output_len tokens.
  // The warm-up requests come first, from the same generator, and are not timed: they take the
  // one-time costs (cuBLASLt's algorithm choice, NCCL's connections, decode-graph captures).
  const int64_t warmup = o.warmup >= 0 ? o.warmup : std::min(o.concurrency, o.num_requests);
  std::mt19937_64 rng(o.seed);
  auto make_prompts = [&](int64_t n) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n));
    for (auto& p : prompts) {
      p.resize(static_cast<size_t>(o.input_len));
      for (auto& t : p) t = int32_t(std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng));
    }
    return prompts;
  };
  const std::vector<std::vector<int32_t>> warmup_prompts = make_prompts(warmup);
  const std::vector<std::vector<int32_t>> prompts = make_prompts(o.num_requests);

  // Runs `batch` with at most --concurrency in flight; every request's timings.
  auto run_requests = [&](const std::vector<std::vector<int32_t>>& batch) {
    std::vector<Timing> timings(batch.size());
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::string failure;
    std::mutex failure_mutex;
    auto client = [&] {
      for (size_t i; (i = next.fetch_add(1)) < batch.size() && !failed;) {
        const Clock::time_point submitted = Clock::now();
        const Submitted s = engine.submit({.prompt = batch[i], .max_tokens = o.output_len, .ignore_eos = true});
        Timing& t = timings[i];
        Clock::time_point first{}, last{};
        while (true) {
          const std::optional<TokenEvent> e = engine.next(s.id, std::chrono::minutes(10));
          if (!e) {
            std::lock_guard lock(failure_mutex);
            failure = fmt::format("request {}: no event for 10 minutes", i);
            failed = true;
            return;
          }
          if (e->token >= 0) {
            last = Clock::now();
            if (t.tokens++ == 0) first = last;
          }
          if (e->finished) {
            t.finish = e->reason == FinishReason::length ? "length" : e->error.empty() ? "other" : e->error;
            break;
          }
        }
        if (t.tokens == 0 || t.finish != "length") {
          std::lock_guard lock(failure_mutex);
          failure = fmt::format("request {} ended with {} tokens: {}", i, t.tokens, t.finish);
          failed = true;
          return;
        }
        t.ttft_s = std::chrono::duration<double>(first - submitted).count();
        t.latency_s = std::chrono::duration<double>(last - submitted).count();
        t.tpot_s = t.tokens > 1 ? std::chrono::duration<double>(last - first).count() / double(t.tokens - 1) : 0.0;
      }
    };
    std::vector<std::thread> clients;
    for (int64_t c = 0; c < std::min<int64_t>(o.concurrency, int64_t(batch.size())); ++c) clients.emplace_back(client);
    for (std::thread& t : clients) t.join();
    if (failed) fail("bench-offline: {}", failure);
    return timings;
  };
  run_requests(warmup_prompts);
  const EngineStats before = engine.stats();
  const Clock::time_point start = Clock::now();
  const std::vector<Timing> timings = run_requests(prompts);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, latency;
  int64_t out_tokens = 0;
  for (const Timing& t : timings) {
    ttft.push_back(t.ttft_s);
    tpot.push_back(t.tpot_s);
    latency.push_back(t.latency_s);
    out_tokens += t.tokens;
  }
  const int64_t in_tokens = o.num_requests * o.input_len;
  EngineStats stats = engine.stats();
  stats.steps -= before.steps;
  stats.preemptions -= before.preemptions;
  stats.runner_seconds -= before.runner_seconds;
  std::printf("%s\n", host.describe().c_str());
  std::printf("%lld requests of %lld in / %lld out, concurrency %lld: %.2f s (after %lld warm-up requests)\n",
              static_cast<long long>(o.num_requests), static_cast<long long>(o.input_len),
              static_cast<long long>(o.output_len), static_cast<long long>(o.concurrency), wall,
              static_cast<long long>(warmup));
  std::printf("output tokens/s %.1f   total tokens/s %.1f   requests/s %.2f   steps %lld   preemptions %lld\n",
              double(out_tokens) / wall, double(in_tokens + out_tokens) / wall, double(o.num_requests) / wall,
              static_cast<long long>(stats.steps), static_cast<long long>(stats.preemptions));
  // Where a step's time goes: the model runner (forward and sampling, the GPU busy) and everything
  // else of the engine's loop (scheduling, detokenising, handing out events), the GPU idle.
  const double per_step_ms = stats.steps > 0 ? 1e3 / double(stats.steps) : 0.0;
  std::printf("engine loop: %.3f ms a step in the model runner, %.3f ms outside it\n",
              stats.runner_seconds * per_step_ms, (wall - stats.runner_seconds) * per_step_ms);
  std::printf("%-8s %10s %10s %10s\n", "ms", "p50", "p90", "p99");
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"TTFT", &ttft}, {"TPOT", &tpot},
                                {"latency", &latency}})
    std::printf("%-8s %10.2f %10.2f %10.2f\n", name, 1e3 * percentile(*v, 50), 1e3 * percentile(*v, 90),
                1e3 * percentile(*v, 99));
  if (!o.json_out.empty()) {
    const EngineHost::MemoryUse memory = host.memory_use();
    nlohmann::json report = {
        {"build", nlohmann::json::parse(build_info_json())},
        {"engine", host.describe()},
        {"model", o.engine.model.model_dir},
        {"device", host.device()},
        {"tensor_parallel_size", o.engine.tensor_parallel_size},
        {"gdn_prefill_backend",
         o.engine.model.gdn_prefill_backend.empty() ? std::string("production dispatch") : o.engine.model.gdn_prefill_backend},
        {"memory", {{"gdn_prefill_backend", memory.gdn_prefill_backend},
                    {"gdn_scratch_bytes", memory.gdn_scratch_bytes},
                    {"device_used_bytes", memory.device_used_bytes}}},
        {"workload", {{"num_requests", o.num_requests}, {"input_len", o.input_len}, {"output_len", o.output_len},
                      {"concurrency", o.concurrency}, {"seed", o.seed}, {"warmup_requests", warmup}}},
        {"scheduler", {{"state_slots", host.scheduler_config().num_state_slots},
                       {"kv_blocks", host.scheduler_config().num_kv_blocks},
                       {"block_size", host.scheduler_config().block_size},
                       {"max_num_batched_tokens", host.scheduler_config().max_num_batched_tokens}}},
        {"wall_s", wall},
        {"output_tokens", out_tokens},
        {"output_tokens_per_s", double(out_tokens) / wall},
        {"total_tokens_per_s", double(in_tokens + out_tokens) / wall},
        {"steps", stats.steps},
        {"runner_s", stats.runner_seconds},
        {"preemptions", stats.preemptions},
        {"ttft_s", summary(ttft)},
        {"tpot_s", summary(tpot)},
        {"latency_s", summary(latency)},
        {"requests", nlohmann::json::array()}};
    for (const Timing& t : timings)
      report["requests"].push_back({{"ttft_s", t.ttft_s}, {"tpot_s", t.tpot_s}, {"latency_s", t.latency_s}, {"tokens", t.tokens}});
    std::ofstream out(o.json_out);
    if (!out) fail("bench-offline: cannot write {}", o.json_out);
    out << report.dump(2) << "\n";
  }
}

}  // namespace

Command add_bench_offline(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-offline",
                                 "time many requests through the engine in process: throughput, TTFT and TPOT percentiles");
  auto o = std::make_shared<BenchOptions>();
  o->engine.add_to(cmd, /*with_max_model_len=*/false);  // the workload sets it
  cmd->add_option("--num-requests", o->num_requests, "requests in all")->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "prompt tokens of each request (random ids)")->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "tokens each request generates (end of sequence ignored)")
      ->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "requests in flight at once")->capture_default_str();
  cmd->add_option("--warmup", o->warmup,
                  "untimed requests of the same shape run first (default: as many as --concurrency)");
  cmd->add_option("--seed", o->seed, "prompt seed")->capture_default_str();
  cmd->add_option("--json", o->json_out, "write the report (every request's timings) here");
  return Command{cmd, [o] { run_bench(*o); }};
}

}  // namespace di::cli
