// deltainfer score: per-position log-probabilities and full logits (docs/score-format.md).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/provenance.h"
#include "engine/sequence.h"

namespace di::cli {

namespace {

double log_softmax_at(const float* logits, int64_t vocab, int64_t index) {
  double best = logits[0];
  for (int64_t i = 1; i < vocab; ++i) best = std::max(best, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - best);
  return double(logits[index]) - best - std::log(sum);
}

}  // namespace

Command add_score(CLI::App& app) {
  auto* cmd = app.add_subcommand("score", "log-probabilities of a token sequence, and full logits of chosen positions");
  struct Opts {
    ModelOptions model;
    std::string prompt_ids, out, trace_out;
    std::vector<int64_t> logit_positions;
  };
  auto o = std::make_shared<Opts>();
  o->model.add_to(cmd);
  cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated token ids")->required();
  cmd->add_option("--out", o->out, "output JSON file (format in docs/score-format.md)")->required();
  cmd->add_option("--logits-at", o->logit_positions, "positions whose full logits are written (negative counts from the end)")
      ->delimiter(',');
  cmd->add_option("--trace-out", o->trace_out,
                  "also write every named intermediate of the forward pass to this JSON file (debugging)");
  return Command{cmd, [o] {
    const std::vector<int32_t> ids = parse_ids(o->prompt_ids, "--prompt-ids");
    Runner r = open_model(o->model);
    const int64_t vocab = r.loaded.config.vocab_size, n = int64_t(ids.size());
    check_ids_in_vocab(ids, vocab, "--prompt-ids");
    std::vector<int64_t> positions;
    for (int64_t p : o->logit_positions) {
      const int64_t q = p < 0 ? n + p : p;
      if (q < 0 || q >= n) fail("--logits-at: position {} is outside the {} prompt positions", p, n);
      positions.push_back(q);
    }
    nlohmann::json trace = nlohmann::json::object();
    if (!o->trace_out.empty()) {
      r.model->observer = [&](const std::string& name, const Tensor& value) {
        if (name == "logits") return;  // written below at the chosen positions
        trace[name] = {{"shape", value.shape()}, {"values", r.ops->to_host(value)}};
      };
    }
    Sequence seq(*r.model, *r.ops);
    const std::vector<float> logits = seq.feed(ids, /*all_logits=*/true);
    if (!o->trace_out.empty()) {
      std::ofstream tout(o->trace_out);
      tout << trace.dump() << "\n";
      if (!tout) fail("cannot write {}", o->trace_out);
    }
    nlohmann::json j;
    j["format"] = "deltainfer-score-v1";
    j["model"] = o->model.model_dir;
    j["precision"] = o->model.precision;
    j["build"] = nlohmann::json::parse(build_info_json());
    j["prompt_ids"] = ids;
    nlohmann::json logprobs = nlohmann::json::array(), argmax_ids = nlohmann::json::array();
    logprobs.push_back(nullptr);  // nothing predicts the first token
    for (int64_t t = 0; t < n; ++t) {
      const float* row = logits.data() + t * vocab;
      if (t + 1 < n) logprobs.push_back(log_softmax_at(row, vocab, ids[t + 1]));
      argmax_ids.push_back(argmax(row, vocab));
    }
    j["logprobs"] = logprobs;
    j["argmax"] = argmax_ids;
    nlohmann::json full = nlohmann::json::array();
    for (int64_t p : positions)
      full.push_back({{"position", p}, {"values", std::vector<float>(logits.begin() + p * vocab, logits.begin() + (p + 1) * vocab)}});
    j["logits"] = full;
    std::ofstream out(o->out);
    out << j.dump() << "\n";
    if (!out) fail("cannot write {}", o->out);
    spdlog::info("wrote {} ({} positions, {} full logit rows)", o->out, n, positions.size());
  }};
}


}  // namespace di::cli
