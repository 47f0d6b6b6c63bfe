// Kernel lab of the Gated DeltaNet: every registered chunked-prefill backend at the shapes of the
// GPU issue, and the decode step at several batch sizes. For each: the median time over many
// repetitions (CUDA events, inputs rotated past the 50 MB L2), the work it must do, and the
// achieved fraction of the H200's measured ceilings. Prints a table; --json writes the report.
//
// FLOPs of the chunked prefill per token per value head, counted as GDN_KERNELS.md 9.1 does for
// the fused algebra (full C x C squares, chunk C = 64): F = 2C(2K + 2V) + 6KV = 163,840 at
// K = V = 128. Bytes of a decode step per sequence and value head: the float32 state read and
// written once, 2 K V 4, plus q, k, v, o and the gates (small).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include <deltainfer/gdn.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/cuda.h"
#include "gdn/decode_step.h"
#include "gdn/dispatch.h"
#include "gdn/prep.h"
#include "gdn/sm90_prefill.h"
#include "gdn/sm90_timeline.h"
#include "gpu_timing.h"

namespace di::bench {
namespace {

constexpr double kL2Bytes = 60e6;

// A batch of sequences: "NxT" (N sequences of T tokens) or "a+b+..." (one of each length).
struct PrefillCase {
  std::string name;
  std::vector<int> lengths;
  int num_seqs() const { return int(lengths.size()); }
};

PrefillCase parse_prefill_case(const std::string& name) {
  PrefillCase pc{name, {}};
  int n = 0, t = 0;
  char tail = 0;
  if (std::sscanf(name.c_str(), "%dx%d%c", &n, &t, &tail) == 2 && n > 0 && t > 0) {
    pc.lengths.assign(size_t(n), t);
    return pc;
  }
  size_t at = 0;
  while (at <= name.size()) {
    const size_t plus = name.find('+', at);
    const std::string part = name.substr(at, plus == std::string::npos ? std::string::npos : plus - at);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 9)
      fail("prefill shape '{}': want NxT or lengths joined by '+'", name);
    pc.lengths.push_back(std::stoi(part));
    if (plus == std::string::npos) break;
    at = plus + 1;
  }
  return pc;
}

// The mixes of the peer comparison (docs/benchmarks/gdn-peers.md).
const std::vector<std::string> kPrefillMixes = {"1x2048", "1x8192",  "1x32768",   "4x8192",
                                                "8x2048", "32x1024", "4096+28672"};

std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng, float stddev, bool unit_rows = false,
                                  int row = 128) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  if (unit_rows)
    for (size_t r = 0; r + size_t(row) <= n; r += size_t(row)) {
      double s = 0;
      for (int i = 0; i < row; ++i) s += double(v[r + size_t(i)]) * v[r + size_t(i)];
      for (int i = 0; i < row; ++i) v[r + size_t(i)] = float(v[r + size_t(i)] / std::sqrt(s + 1e-6));
    }
  std::vector<uint16_t> bits(n);
  for (size_t i = 0; i < n; ++i) bits[i] = f32_to_bf16(v[i]);
  return bits;
}

// One set of prefill inputs and outputs; several sets rotate so that each repetition reads cold data.
struct PrefillSet {
  cuda::DeviceBuffer<uint16_t> q, k, v, out;
  cuda::DeviceBuffer<float> g, beta, state;
  cuda::DeviceBuffer<int32_t> cu_seqlens;
};

// segment_tokens (sm90 only): its context split as sm90_run_split() takes it; 0 the backend's own.
// qk_l2norm: DI_GDN_QK_L2NORM (the backend normalises q and k, as the engine calls it). unit_qk_rows:
// q and k rows of norm 1 (what the flag's absence assumes), else N(0, 1) entries. The two go
// together except to ask whether the flag's cost is its code or its data. length_hint: the longest
// sequence's length as max_seq_tokens (as the engine passes it), else 0.
nlohmann::json bench_prefill(const di_gdn_prefill_backend& backend, const di_gdn_geometry& geo, const PrefillCase& pc,
                             cudaStream_t stream, std::mt19937_64& rng, bool once, int32_t segment_tokens,
                             bool qk_l2norm, bool unit_qk_rows, bool length_hint) {
  std::vector<int32_t> cu(1, 0);
  for (int len : pc.lengths) cu.push_back(cu.back() + len);
  const int num_seqs = pc.num_seqs();
  const int64_t T = cu.back(), Hk = geo.num_k_heads, Hv = geo.num_v_heads;
  const int64_t K = geo.k_dim, V = geo.v_dim;
  const double set_bytes = double(T) * (2 * Hk * K * 2 + 2 * Hv * V * 2 + Hv * 8) + double(num_seqs) * Hv * K * V * 4;
  const int sets = int(std::clamp(std::ceil(2 * kL2Bytes / set_bytes), 1.0, 8.0));
  std::vector<PrefillSet> data(static_cast<size_t>(sets));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (PrefillSet& s : data) {
    s.q = cuda::DeviceBuffer<uint16_t>(
        std::span<const uint16_t>(random_bf16(size_t(T * Hk * K), rng, 1, unit_qk_rows, int(K))));
    s.k = cuda::DeviceBuffer<uint16_t>(
        std::span<const uint16_t>(random_bf16(size_t(T * Hk * K), rng, 1, unit_qk_rows, int(K))));
    s.v = cuda::DeviceBuffer<uint16_t>(std::span<const uint16_t>(random_bf16(size_t(T * Hv * V), rng, 1)));
    s.out = cuda::DeviceBuffer<uint16_t>(size_t(T * Hv * V));
    std::vector<float> g(size_t(T * Hv)), beta(g.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::log(0.5f + 0.5f * u(rng)), beta[i] = u(rng);
    s.g = cuda::DeviceBuffer<float>(std::span<const float>(g));
    s.beta = cuda::DeviceBuffer<float>(std::span<const float>(beta));
    s.state = cuda::DeviceBuffer<float>(size_t(num_seqs * Hv * K * V));
    s.state.fill_bytes(0);
    s.cu_seqlens = cuda::DeviceBuffer<int32_t>(std::span<const int32_t>(cu));
  }
  const int64_t longest = length_hint ? *std::max_element(pc.lengths.begin(), pc.lengths.end()) : 0;
  const di_gdn_prefill_shape shape{geo, num_seqs, T, longest};
  const bool forced_split = segment_tokens != 0 && std::string(backend.name) == "sm90";
  const size_t scratch_bytes =
      forced_split ? gdn::sm90_split_scratch_bytes(&shape, segment_tokens) : backend.scratch_bytes(&shape);
  cuda::DeviceBuffer<uint8_t> scratch(scratch_bytes);
  auto run = [&](int rep) {
    PrefillSet& s = data[size_t(rep % sets)];
    di_gdn_prefill_args a{};
    a.abi_version = DI_GDN_ABI_VERSION;
    a.geometry = geo;
    a.state_layout = DI_GDN_STATE_KV;
    a.num_seqs = num_seqs;
    a.total_tokens = T;
    a.max_seq_tokens = longest;
    a.scale = 1.0f / std::sqrt(float(K));
    a.flags = qk_l2norm ? uint32_t(DI_GDN_QK_L2NORM) : 0u;
    a.cu_seqlens = s.cu_seqlens.data();
    a.q = s.q.data();
    a.k = s.k.data();
    a.v = s.v.data();
    a.g = s.g.data();
    a.beta = s.beta.data();
    a.initial_state = s.state.data();
    a.final_state = s.state.data();
    a.out = s.out.data();
    const auto st = reinterpret_cast<di_gdn_stream>(stream);
    const int status = forced_split ? gdn::sm90_run_split(&a, scratch.data(), scratch_bytes, st, segment_tokens)
                                    : backend.run(&a, scratch.data(), scratch_bytes, st);
    if (status != DI_GDN_OK) fail("backend {} returned status {}", backend.name, status);
  };
  // once: a single launch (for a profiler), no warm-up.
  const Timing t = once ? time_on_stream(stream, 0, 1, run) : time_on_stream(stream, 3, T >= 32768 ? 10 : 30, run);
  const double flop = double(T) * Hv * (2.0 * 64 * (2 * K + 2 * V) + 6.0 * K * V);
  const double tflops = flop / (t.median_ms * 1e-3) / 1e12;
  const double bytes = set_bytes + double(num_seqs) * Hv * K * V * 4;  // + the state written back
  return {{"backend", backend.name},
          {"heads", std::to_string(Hk) + "/" + std::to_string(Hv)},
          {"shape", pc.name},
          {"segment_tokens", forced_split ? nlohmann::json(segment_tokens) : nlohmann::json("backend's choice")},
          {"qk_l2norm", qk_l2norm},
          {"max_seq_tokens", longest},
          {"qk_rows", unit_qk_rows ? "unit" : "raw"},
          {"median_ms", t.median_ms},
          {"min_ms", t.min_ms},
          {"tflops", tflops},
          {"fraction_of_bf16_peak", tflops / kBf16TensorTflops},
          {"gbytes_per_s", bytes / (t.median_ms * 1e-3) / 1e9},
          {"token_heads_per_s", double(T) * Hv / (t.median_ms * 1e-3)},
          {"scratch_bytes", scratch_bytes},
          {"reps", t.reps},
          {"input_sets", sets}};
}

// What a decode measurement runs: the step alone, with the output norm fused in (as the engine runs
// it on sm_90), or the one-token conv kernel and then that step (the GDN layer's decode after its
// input projections).
const std::vector<std::string> kDecodeForms = {"plain", "normed", "conv_then_normed"};

// The decode step at `batch` sequences in one of kDecodeForms. A sample times kLaunches steps back
// to back (each on other slots), as a decode step follows the kernel ahead of it, so a launch's
// overhead is not counted per step.
nlohmann::json bench_decode(const di_gdn_geometry& geo, int batch, const std::string& form, cudaStream_t stream,
                            std::mt19937_64& rng) {
  const bool normed = form != "plain", conv = form == "conv_then_normed";
  constexpr int kLaunches = 10;
  const int64_t Hk = geo.num_k_heads, Hv = geo.num_v_heads, K = geo.k_dim, V = geo.v_dim;
  const int64_t row = 2 * Hk * K + Hv * V;
  const double state_bytes_per_seq = double(Hv) * K * V * 4;
  // Enough slots that the states of consecutive repetitions do not share L2.
  const int slots = int(std::max<double>(batch, std::ceil(3 * kL2Bytes / state_bytes_per_seq) + batch));
  cuda::DeviceBuffer<float> state(size_t(slots) * Hv * K * V);
  state.fill_bytes(0);
  const int sets = 4;
  std::vector<cuda::DeviceBuffer<uint16_t>> qkv, a, b;
  for (int s = 0; s < sets; ++s) {
    qkv.emplace_back(std::span<const uint16_t>(random_bf16(size_t(batch * row), rng, 1)));
    a.emplace_back(std::span<const uint16_t>(random_bf16(size_t(batch * Hv), rng, 1)));
    b.emplace_back(std::span<const uint16_t>(random_bf16(size_t(batch * Hv), rng, 1)));
  }
  std::vector<float> A_log(size_t(Hv), -1.0f), dt_bias(size_t(Hv), 0.5f);
  cuda::DeviceBuffer<float> dA(std::span<const float>(A_log.data(), A_log.size())),
      ddt(std::span<const float>(dt_bias.data(), dt_bias.size()));
  cuda::DeviceBuffer<uint16_t> out(size_t(batch * Hv * V));
  const std::vector<uint16_t> z_host = random_bf16(size_t(batch * Hv * V), rng, 1);
  cuda::DeviceBuffer<uint16_t> z(std::span<const uint16_t>(z_host.data(), z_host.size()));
  const std::vector<float> norm_host(size_t(V), 1.0f);
  cuda::DeviceBuffer<float> norm_weight(std::span<const float>(norm_host.data(), norm_host.size()));
  // The conv's taps, its state pool (the recurrent state's slots) and its output.
  std::vector<float> taps(size_t(row) * 4);
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = 0.25f * float(int(i % 7) - 3);
  cuda::DeviceBuffer<float> conv_weight(std::span<const float>(taps.data(), taps.size()));
  cuda::DeviceBuffer<uint16_t> conv_state(conv ? size_t(slots) * size_t(row) * 4 : 0), conv_out(size_t(batch * row));
  if (conv) conv_state.fill_bytes(0);
  std::vector<int32_t> firsts(size_t(batch) + 1), rows(static_cast<size_t>(batch));
  for (int i = 0; i <= batch; ++i) firsts[size_t(i)] = i;
  for (int i = 0; i < batch; ++i) rows[size_t(i)] = i;
  cuda::DeviceBuffer<int32_t> cu_seqlens{std::span<const int32_t>(firsts)}, token_seq{std::span<const int32_t>(rows)};
  // Repetition r uses slots starting at (r * batch) mod slots: fresh state every time.
  const int index_sets = std::max(1, slots / batch);
  std::vector<cuda::DeviceBuffer<int32_t>> indices;
  for (int r = 0; r < index_sets; ++r) {
    std::vector<int32_t> idx(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) idx[size_t(i)] = (r * batch + i) % slots;
    indices.emplace_back(std::span<const int32_t>(idx));
  }
  auto launch = [&](int rep) {
    gdn::GdnDecodeParams p{};
    p.geometry = geo;
    p.state_layout = DI_GDN_STATE_KV;
    p.num_seqs = batch;
    p.qkv = form == "conv_then_normed" ? conv_out.data() : qkv[size_t(rep % sets)].data();
    p.qkv_row_stride = row;
    p.a = a[size_t(rep % sets)].data();
    p.b = b[size_t(rep % sets)].data();
    p.A_log = dA.data();
    p.dt_bias = ddt.data();
    p.state = state.data();
    p.state_indices = indices[size_t(rep % index_sets)].data();
    p.out = out.data();
    p.scale = 1.0f / std::sqrt(float(K));
    if (normed) p.z = z.data(), p.norm_weight = norm_weight.data();
    if (form == "conv_then_normed") {
      const gdn::ConvParams c{.x = qkv[size_t(rep % sets)].data(), .weight = conv_weight.data(),
                              .conv_state = conv_state.data(), .cu_seqlens = cu_seqlens.data(),
                              .token_seq = token_seq.data(), .seq_slot = p.state_indices, .out = conv_out.data(),
                              .tokens = batch, .num_seqs = batch, .channels = int32_t(row), .kernel = 4,
                              .one_token_each = true};
      DI_CUDA_CHECK(gdn::launch_conv1d_silu(c, stream));
    }
    DI_CUDA_CHECK(gdn::launch_gdn_decode_step(p, stream));
  };
  auto run = [&](int rep) {
    for (int i = 0; i < kLaunches; ++i) launch(rep * kLaunches + i);
  };
  Timing t = time_on_stream(stream, 2, 30, run);
  t.median_ms /= kLaunches, t.min_ms /= kLaunches, t.max_ms /= kLaunches;
  const double bytes = double(batch) * (2 * state_bytes_per_seq + double(row) * 2 + Hv * V * 2 + Hv * 4);
  const double tbps = bytes / (t.median_ms * 1e-3) / 1e12;
  return {{"kernel", "gdn_decode_step"},
          {"heads", std::to_string(Hk) + "/" + std::to_string(Hv)},
          {"batch", batch},
          {"form", form},
          {"launches_per_sample", kLaunches},
          {"median_us", t.median_ms * 1e3},
          {"min_us", t.min_ms * 1e3},
          {"tbytes_per_s", tbps},
          {"fraction_of_copy_bandwidth", tbps / kCopyTBps},
          {"reps", t.reps}};
}

// The sm90 kernel's stage timeline of a case's last launch, as a report (cycles, and microseconds at
// the SM clock).
nlohmann::json timeline_report(const std::vector<uint64_t>& stamps, int64_t ctas, int chunks, double clock_mhz) {
  const gdn::Sm90TimelineSummary summary = gdn::summarise_sm90_timeline(stamps, ctas, chunks);
  if (summary.out_of_order > 0) fail("{} chunks' timeline stamps are out of order", summary.out_of_order);
  if (summary.groups.empty()) fail("the timeline recorded nothing (a sequence of fewer than 5 chunks?)");
  nlohmann::json groups = nlohmann::json::array();
  for (const gdn::Sm90TimelineGroup& g : summary.groups) {
    nlohmann::json stages = nlohmann::json::array();
    for (const gdn::Sm90TimelineStage& st : g.stages) stages.push_back({{"stage", st.name}, {"median_cycles", st.median_cycles}});
    groups.push_back({{"warpgroup", g.group == gdn::kTimelineAuxGroup ? std::string("auxiliary") : "state " + std::to_string(g.group)},
                      {"chunk_period_cycles", g.chunk_period_cycles},
                      {"chunk_period_us", g.chunk_period_cycles / clock_mhz},
                      {"chunks_summarised", g.chunks},
                      {"stages", stages}});
  }
  return {{"clock_mhz", clock_mhz}, {"warpgroups", groups}};
}

}  // namespace
}  // namespace di::bench

int main(int argc, char** argv) {
  using namespace di;
  CLI::App app{"GDN kernel lab: prefill backends and the decode step on this GPU"};
  std::string json_out, only_backend, only_shape, heads = "16/32";
  bool once = false, timeline = false;
  app.add_option("--json", json_out, "write the report here");
  app.add_option("--backend", only_backend, "only this prefill backend (and no decode step)");
  app.add_option("--shape", only_shape, "only this prefill shape: NxT (e.g. 4x8192) or lengths joined by '+'");
  int32_t segment_tokens = 0;
  app.add_option("--segment-tokens", segment_tokens,
                 "sm90's context split: 0 the backend's choice, -1 none, or segments of this many tokens (a "
                 "multiple of 64)");
  app.add_option("--heads", heads, "Hk/Hv of the prefill cases");
  std::string qk_rows;
  bool qk_l2norm = false;
  app.add_flag("--qk-l2norm", qk_l2norm,
               "raw q and k with DI_GDN_QK_L2NORM, the backend normalising them as the engine asks (default: unit "
               "rows, no flag)");
  app.add_option("--qk-rows", qk_rows, "q and k rows: unit or raw (default: raw with --qk-l2norm, else unit)")
      ->check(CLI::IsMember({"unit", "raw"}));
  app.add_flag("--once", once, "one launch per case, no warm-up (for a profiler)");
  bool no_length_hint = false;
  app.add_flag("--no-length-hint", no_length_hint,
               "pass max_seq_tokens 0 (the longest sequence not known), where the engine passes its length");
  std::vector<int> decode_batches = {1, 8, 64, 256};
  std::vector<std::string> decode_forms = {"plain"};
  bool decode_only = false;
  app.add_option("--decode-batches", decode_batches, "the decode step's batch sizes")->delimiter(',');
  app.add_option("--decode-forms", decode_forms,
                 "what a decode measurement runs: plain, normed (the output norm fused in, as the engine runs it), "
                 "conv_then_normed (the one-token conv kernel, then the normed step); several are timed in A B .. "
                 "B A order")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::kDecodeForms));
  app.add_flag("--decode-only", decode_only, "only the decode step (no prefill backend)");
  app.add_flag("--timeline", timeline,
               "record the sm90 kernel's stage timeline of each case's last launch and print its medians (a build "
               "configured with -DDI_SM90_TIMELINE=ON; with --backend sm90)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (cuda::device_count() == 0) fail("no CUDA device visible");
    cudaStream_t stream;
    DI_CUDA_CHECK(cudaStreamCreate(&stream));
    std::mt19937_64 rng(1234);
    const cuda::DeviceInfo d = cuda::current_device();
    const di_gdn_device dev{d.sm_major, d.sm_minor, d.num_sms, d.shared_memory_per_block_optin};
    int hk = 0, hv = 0;
    if (std::sscanf(heads.c_str(), "%d/%d", &hk, &hv) != 2 || hk <= 0 || hv <= 0) fail("--heads wants Hk/Hv, got '{}'", heads);
    if (timeline && only_backend != "sm90") fail("--timeline records the sm90 kernel: add --backend sm90");
    const di_gdn_geometry geo{hk, hv, 128, 128};
    nlohmann::json report = {{"provenance", bench::provenance()}, {"prefill", nlohmann::json::array()},
                             {"decode", nlohmann::json::array()}};
    std::printf("%-10s %-6s %-11s %10s %9s %8s %9s %8s\n", "backend", "heads", "shape", "ms", "TFLOP/s", "of 784",
                "GB/s", "scratch");
    for (const di_gdn_prefill_backend* b : gdn::prefill_backends()) {
      if (decode_only || (!only_backend.empty() && only_backend != b->name)) continue;
      const gdn::Verdict v = gdn::ask(*b, geo, dev, DI_GDN_STATE_KV);
      if (!v.ok) {
        std::printf("%-10s refuses: %s\n", b->name, v.reason.c_str());
        continue;
      }
      std::vector<std::string> mixes = bench::kPrefillMixes;
      if (!only_shape.empty()) mixes = {only_shape};
      for (const std::string& mix : mixes) {
        const bench::PrefillCase pc = bench::parse_prefill_case(mix);
        const int max_len = *std::max_element(pc.lengths.begin(), pc.lengths.end());
        // The timeline of the case's last launch: a slot for every CTA of either shape (a CTA per half
        // head at most), every chunk.
        const int64_t timeline_ctas = int64_t(pc.num_seqs()) * hv * 2;
        const int timeline_chunks = int((max_len + 63) / 64);
        // A context split's launches have other CTAs (segments, two launches with output or state alone)
        // than the slots above: its case runs without the timeline, and says so.
        int64_t total_tokens = 0;
        for (int len : pc.lengths) total_tokens += len;
        const di_gdn_prefill_shape shape{geo, pc.num_seqs(), total_tokens, no_length_hint ? 0 : max_len};
        const bool splits = timeline && gdn::sm90_split_scratch_bytes(&shape, segment_tokens) > 0;
        const bool record = timeline && !splits;
        if (splits)
          std::printf("  timeline not recorded for %s: it runs as a context split (--segment-tokens -1 runs it whole)\n",
                      mix.c_str());
        cuda::DeviceBuffer<uint64_t> stamps(record ? size_t(timeline_ctas) * timeline_chunks *
                                                         gdn::kTimelineGroups * gdn::kTimelineEvents
                                                   : 0);
        if (record) {
          stamps.fill_bytes(0);
          const std::string e = gdn::sm90_timeline_attach({stamps.data(), timeline_chunks});
          if (!e.empty()) fail("{}", e);
        }
        nlohmann::json r = bench::bench_prefill(*b, geo, pc, stream, rng, once, segment_tokens, qk_l2norm,
                                                      qk_rows.empty() ? !qk_l2norm : qk_rows == "unit", !no_length_hint);
        if (record) {
          const std::string e = gdn::sm90_timeline_attach({});
          if (!e.empty()) fail("{}", e);
          int khz = 0;
          DI_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
          r["timeline"] = bench::timeline_report(stamps.download(), timeline_ctas, timeline_chunks, khz / 1e3);
        }
        std::printf("%-10s %-6s %-11s %10.3f %9.1f %7.1f%% %9.0f %8zu\n", b->name,
                    r["heads"].get<std::string>().c_str(), r["shape"].get<std::string>().c_str(),
                    r["median_ms"].get<double>(), r["tflops"].get<double>(),
                    100 * r["fraction_of_bf16_peak"].get<double>(), r["gbytes_per_s"].get<double>(),
                    r["scratch_bytes"].get<size_t>());
        if (record)
          for (const auto& g : r["timeline"]["warpgroups"]) {
            std::printf("  timeline %-10s chunk %7.0f cycles (%.2f us):", g["warpgroup"].get<std::string>().c_str(),
                        g["chunk_period_cycles"].get<double>(), g["chunk_period_us"].get<double>());
            for (const auto& st : g["stages"])
              std::printf(" %s %.0f;", st["stage"].get<std::string>().c_str(), st["median_cycles"].get<double>());
            std::printf("\n");
          }
        report["prefill"].push_back(r);
      }
    }
    if (!only_backend.empty()) {
      if (!json_out.empty()) std::ofstream(json_out) << report.dump(2) << "\n";
      cudaStreamDestroy(stream);
      return 0;
    }
    // Each batch in every form asked for, the forms in one order and then the other (A B .. B A).
    std::printf("\n%-16s %-6s %6s %-17s %10s %8s %9s\n", "kernel", "heads", "batch", "form", "us", "TB/s", "of 4.3");
    for (int batch : decode_batches)
      for (int pass = 0; pass < (decode_forms.size() > 1 ? 2 : 1); ++pass)
        for (size_t f = 0; f < decode_forms.size(); ++f) {
          const std::string& form = decode_forms[pass == 0 ? f : decode_forms.size() - 1 - f];
          const nlohmann::json r = bench::bench_decode(geo, batch, form, stream, rng);
          std::printf("%-16s %-6s %6d %-17s %10.2f %8.2f %8.1f%%\n", "gdn_decode_step",
                      r["heads"].get<std::string>().c_str(), batch, form.c_str(), r["median_us"].get<double>(),
                      r["tbytes_per_s"].get<double>(), 100 * r["fraction_of_copy_bandwidth"].get<double>());
          report["decode"].push_back(r);
        }
    if (!json_out.empty()) std::ofstream(json_out) << report.dump(2) << "\n";
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
