// Tokenizer benchmark: the load time of tokenizer.json and single-threaded encode throughput on a
// text file. bench/tokenizer_bench.py drives it next to Hugging Face tokenizers on the same text.
//
// usage: di_tokenizer_bench TOKENIZER_DIR TEXT_FILE [RUNS] [IDS_OUT] [lines]
// Prints one JSON object: load seconds (each run, and the median), encode seconds of each run (a
// fresh tokenizer for every run, so that each starts with an empty word cache), the median MB/s,
// and the token count. IDS_OUT, when given (and not "-"), receives the ids (one line, space
// separated). With "lines", each line (with its '\n') is encoded by its own call.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.6f}", i ? ", " : "", v[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR TEXT_FILE [RUNS] [IDS_OUT]\n", argv[0]);
    return 2;
  }
  const int runs = argc > 3 ? std::max(1, std::atoi(argv[3])) : 7;
  try {
    std::ifstream f(argv[2], std::ios::binary);
    if (!f) throw std::runtime_error(std::string("cannot read ") + argv[2]);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();

    std::vector<double> loads;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const di::Tokenizer tok = di::Tokenizer::load(argv[1]);
      loads.push_back(seconds_since(t0));
    }
    const di::Tokenizer tok = di::Tokenizer::load(argv[1]);
    const bool by_line = argc > 5 && std::string(argv[5]) == "lines";
    std::vector<std::string_view> lines;
    for (size_t pos = 0; pos < text.size();) {
      const size_t nl = text.find('\n', pos);
      const size_t end = nl == std::string::npos ? text.size() : nl + 1;
      lines.push_back(std::string_view(text).substr(pos, end - pos));
      pos = end;
    }
    std::vector<double> times;
    std::vector<int32_t> ids;
    for (int i = 0; i < runs; ++i) {
      const di::Tokenizer fresh = di::Tokenizer::load(argv[1]);  // an empty word cache each run
      const auto t0 = std::chrono::steady_clock::now();
      if (by_line) {
        ids.clear();
        for (const std::string_view line : lines) {
          const std::vector<int32_t> part = fresh.encode(line);
          ids.insert(ids.end(), part.begin(), part.end());
        }
      } else {
        ids = fresh.encode(text);
      }
      times.push_back(seconds_since(t0));
    }
    if (argc > 4 && std::string(argv[4]) != "-") {
      std::ofstream out(argv[4]);
      for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
      out << "\n";
    }
    const double mb = double(text.size()) / 1e6;
    std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"load_s\": %s, \"load_median_s\": %.6f, \"encode_s\": %s, "
                "\"encode_median_s\": %.6f, \"mb_per_s\": %.3f}\n",
                text.size(), ids.size(), json_list(loads).c_str(), median(loads), json_list(times).c_str(),
                median(times), mb / median(times));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "di_tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
