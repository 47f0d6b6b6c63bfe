// di_split_cost_fit: fits the context split's cost model (gdn/context_split.h, SplitCosts) to timings
// of the sm90 prefill, and shows how the constants in the tree and the fitted ones estimate each one.
//
// Input: one timing per line, "HEADS SHAPE SEGMENT_TOKENS MS" (e.g. "2/8 4096+28672 1024 0.541"),
// as scripts/gdn_split_sweep.sh writes them: SEGMENT_TOKENS -1 is the batch unsplit, a positive
// multiple of 64 a forced split, 0 the backend's own choice (shown, not fitted). Lines starting with
// '#' are skipped; repeated timings of one run count as their mean. The model sees the batch's real
// lengths, and the policy its longest as the ABI's max_seq_tokens hint, as di_gdn_bench passes it.
//
// The fit minimises the sum of squared log(model / measured) by coordinate descent on the logarithms
// of the constants (each tried a step up and down, the step halved when no constant moves).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gdn/context_split.h"

namespace {

using di::gdn::SplitCosts;

struct Timing {
  std::string heads, shape;
  int num_v_heads = 0;
  std::vector<int64_t> lengths;
  int32_t segment_tokens = 0;
  double measured_us = 0;
  int samples = 1;
};

// "2/8" -> 8; "4x8192" -> 4 x 8192; "4096+28672" -> 4096, 28672.
int parse_v_heads(const std::string& heads) {
  const size_t slash = heads.find('/');
  if (slash == std::string::npos) throw std::runtime_error("heads '" + heads + "' is not HK/HV");
  return std::stoi(heads.substr(slash + 1));
}
std::vector<int64_t> parse_lengths(const std::string& shape) {
  std::vector<int64_t> lengths;
  if (const size_t x = shape.find('x'); x != std::string::npos) {
    const int n = std::stoi(shape.substr(0, x));
    lengths.assign(size_t(n), std::stoll(shape.substr(x + 1)));
  } else {
    std::stringstream in(shape);
    for (std::string part; std::getline(in, part, '+');) lengths.push_back(std::stoll(part));
  }
  if (lengths.empty()) throw std::runtime_error("shape '" + shape + "' has no sequences");
  for (int64_t l : lengths)
    if (l <= 0) throw std::runtime_error("shape '" + shape + "' has a sequence of no tokens");
  return lengths;
}

std::vector<Timing> read_timings(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<Timing> timings;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Timing t;
    double ms = 0;
    if (!(fields >> t.heads >> t.shape >> t.segment_tokens >> ms) || ms <= 0)
      throw std::runtime_error(path + ":" + std::to_string(line_number) + ": expected 'HEADS SHAPE SEGMENT_TOKENS MS'");
    if (t.segment_tokens < -1 || (t.segment_tokens > 0 && t.segment_tokens % di::gdn::kContextSplitChunk != 0))
      throw std::runtime_error(path + ":" + std::to_string(line_number) +
                               ": segment tokens must be -1, 0 or a multiple of 64");
    t.num_v_heads = parse_v_heads(t.heads);
    t.lengths = parse_lengths(t.shape);
    t.measured_us = ms * 1000.0;
    // Repeated timings of one run (a sweep's passes) count as their mean.
    const auto same = std::find_if(timings.begin(), timings.end(), [&](const Timing& o) {
      return o.heads == t.heads && o.shape == t.shape && o.segment_tokens == t.segment_tokens;
    });
    if (same == timings.end()) {
      timings.push_back(t);
    } else {
      same->measured_us = (same->measured_us * same->samples + t.measured_us) / (same->samples + 1);
      ++same->samples;
    }
  }
  return timings;
}

// The policy's split of a batch (segment_tokens 0: none), given its longest length as di_gdn_bench does.
int32_t policy_segment_tokens(const Timing& t, int num_sms) {
  int64_t total = 0;
  for (int64_t l : t.lengths) total += l;
  const int64_t longest = *std::max_element(t.lengths.begin(), t.lengths.end());
  return di::gdn::choose_context_split(int(t.lengths.size()), total, longest, t.num_v_heads, num_sms).segment_tokens;
}

// The model's time for a timing at `costs` (the policy's own choice for segment_tokens 0).
double model_us(const Timing& t, int num_sms, const SplitCosts& costs) {
  int64_t total = 0;
  for (int64_t l : t.lengths) total += l;
  const int num_seqs = int(t.lengths.size());
  int32_t segment_tokens = t.segment_tokens;
  if (segment_tokens == 0) segment_tokens = policy_segment_tokens(t, num_sms);
  di::gdn::SplitWorkload w;
  w.segment_tokens = segment_tokens > 0 ? segment_tokens : 1;
  w.num_v_heads = t.num_v_heads;
  for (int64_t l : t.lengths) w.add(l);
  if (segment_tokens <= 0) return w.unsplit_us(num_sms, costs);
  const di::gdn::ContextSplit s = di::gdn::context_split_of(num_seqs, total, t.num_v_heads, num_sms, segment_tokens);
  return w.split_us(num_sms, di::gdn::split_launches(s), costs);
}

double loss(const std::vector<Timing>& timings, int num_sms, const SplitCosts& costs) {
  double sum = 0;
  for (const Timing& t : timings)
    if (t.segment_tokens != 0) {
      const double r = std::log(model_us(t, num_sms, costs) / t.measured_us);
      sum += r * r;
    }
  return sum;
}

// The constants by name (for --hold).
const std::vector<std::string> kCostNames = {"half_head_chunk",     "whole_head_chunk", "state_only_half_head_chunk",
                                             "state_only_whole_head_chunk", "full_wave_slowdown", "cta_start_end",
                                             "carry_step",          "launch"};
std::vector<double*> cost_fields(SplitCosts& c) {
  return {&c.half_head_chunk_us,  &c.whole_head_chunk_us, &c.state_only_half_head_chunk_us,
          &c.state_only_whole_head_chunk_us, &c.full_wave_slowdown, &c.cta_start_end_us,
          &c.carry_step_us, &c.launch_us};
}

// The constants not named in `held` fitted, starting from `costs`.
SplitCosts fit(const std::vector<Timing>& timings, int num_sms, SplitCosts costs,
               const std::vector<std::string>& held) {
  std::vector<double*> params;
  const std::vector<double*> fields = cost_fields(costs);
  for (size_t i = 0; i < fields.size(); ++i)
    if (std::find(held.begin(), held.end(), kCostNames[i]) == held.end()) params.push_back(fields[i]);
  double best = loss(timings, num_sms, costs);
  for (double step = 0.5; step > 1e-4;) {
    bool moved = false;
    for (double* p : params)
      for (double factor : {std::exp(step), std::exp(-step)}) {
        const double kept = *p;
        *p = kept * factor;
        const double l = loss(timings, num_sms, costs);
        if (l < best) {
          best = l, moved = true;
        } else {
          *p = kept;
        }
      }
    if (!moved) step /= 2;
  }
  return costs;
}

void print_costs(const char* what, const SplitCosts& c, double l, size_t n) {
  std::printf("%s: half-head chunk %.2f, whole-head chunk %.2f, state-only half-head chunk %.2f, state-only "
              "whole-head chunk %.2f us, full-wave slowdown %.3f, CTA start and end %.1f, carry step %.2f, launch "
              "%.2f us; rms log error %.3f\n",
              what, c.half_head_chunk_us, c.whole_head_chunk_us, c.state_only_half_head_chunk_us,
              c.state_only_whole_head_chunk_us, c.full_wave_slowdown, c.cta_start_end_us, c.carry_step_us, c.launch_us,
              n ? std::sqrt(l / double(n)) : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fit the sm90 context split's cost model to timings (see the file's header)"};
  std::string path;
  int num_sms = 132;
  app.add_option("timings", path, "file of 'HEADS SHAPE SEGMENT_TOKENS MS' lines")->required();
  app.add_option("--sms", num_sms, "the GPU's SM count")->check(CLI::PositiveNumber);
  std::vector<std::string> held;
  app.add_option("--hold", held, "constants kept at the tree's values")
      ->delimiter(',')
      ->check(CLI::IsMember(kCostNames));
  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<Timing> timings = read_timings(path);
    size_t fitted = 0;
    for (const Timing& t : timings) fitted += t.segment_tokens != 0;
    if (fitted == 0) throw std::runtime_error(path + " has no unsplit or forced-split timing to fit");
    const SplitCosts in_tree = di::gdn::kH200SplitCosts;
    const SplitCosts best = fit(timings, num_sms, in_tree, held);
    print_costs("in the tree", in_tree, loss(timings, num_sms, in_tree), fitted);
    print_costs("fitted     ", best, loss(timings, num_sms, best), fitted);
    std::printf("\n%-6s %-11s %8s %10s %10s %7s %10s %7s\n", "heads", "shape", "L", "measured", "tree", "ratio",
                "fitted", "ratio");
    for (const Timing& t : timings) {
      const double a = model_us(t, num_sms, in_tree), b = model_us(t, num_sms, best);
      std::string split = std::to_string(t.segment_tokens);
      if (t.segment_tokens == 0) {
        const int32_t chosen = policy_segment_tokens(t, num_sms);
        split = "0=" + (chosen > 0 ? std::to_string(chosen) : std::string("none"));
      }
      std::printf("%-6s %-11s %8s %10.1f %10.1f %7.3f %10.1f %7.3f\n", t.heads.c_str(), t.shape.c_str(), split.c_str(),
                  t.measured_us, a, a / t.measured_us, b, b / t.measured_us);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
