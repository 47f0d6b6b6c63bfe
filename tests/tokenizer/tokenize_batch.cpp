// Batch driver of the tokenizer for tests/tokenizer/hf_equality.py: reads JSON lines on stdin and
// writes one JSON line per request on stdout.
//
//   {"text": "...", "parse_special": true}
//       -> {"ids": [...], "decoded": decode(ids), "decoded_skip": decode(ids, skip_special)}
//   {"decode": [ids...], "skip_special": false}
//       -> {"decoded": decode(ids), "stream": the concatenated StreamDecoder output}
//
// A request that fails gives {"error": "..."}.
//
// usage: di_tokenize_batch TOKENIZER_DIR < requests.jsonl > replies.jsonl
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string reply(const di::Tokenizer& tok, const nlohmann::json& req) {
  nlohmann::json out;
  if (const auto it = req.find("text"); it != req.end()) {
    const bool parse_special = req.value("parse_special", true);
    const std::vector<int32_t> ids = tok.encode(it->get_ref<const std::string&>(), parse_special);
    std::string s = "{\"ids\":[";
    for (size_t i = 0; i < ids.size(); ++i) fmt::format_to(std::back_inserter(s), "{}{}", i ? "," : "", ids[i]);
    s += "],\"decoded\":";
    s += nlohmann::json(tok.decode(ids, false)).dump();
    s += ",\"decoded_skip\":";
    s += nlohmann::json(tok.decode(ids, true)).dump();
    s += "}";
    return s;
  }
  if (const auto it = req.find("decode"); it != req.end()) {
    const bool skip = req.value("skip_special", false);
    const std::vector<int32_t> ids = it->get<std::vector<int32_t>>();
    di::StreamDecoder stream(tok, skip);
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    out["decoded"] = tok.decode(ids, skip);
    out["stream"] = streamed;
    return out.dump();
  }
  throw di::Error("a request needs \"text\" or \"decode\"");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR < requests.jsonl\n", argv[0]);
    return 2;
  }
  std::ios::sync_with_stdio(false);
  try {
    const di::Tokenizer tok = di::Tokenizer::load(argv[1]);
    std::string line;
    std::string out;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      try {
        out += reply(tok, nlohmann::json::parse(line));
      } catch (const std::exception& e) {
        out += nlohmann::json{{"error", e.what()}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
      out += '\n';
      if (out.size() > (1 << 16)) {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "di_tokenize_batch: %s\n", e.what());
    return 1;
  }
  return 0;
}
