// deltainfer tokenize and detokenize.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"

namespace di::cli {

namespace {
// The tokenizer of a model directory (or a directory holding just the tokenizer files).
Tokenizer open_tokenizer(const std::string& dir) {
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    fail("no tokenizer.json in {}", dir);
  return Tokenizer::load(dir);
}
}  // namespace

Command add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "text to token ids (the text from the argument, or stdin)");
  struct Opts {
    std::string model_dir, text;
    bool no_special = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model_dir, "model or tokenizer directory")->required();
  cmd->add_option("text", o->text, "text to encode (default: all of stdin)");
  cmd->add_flag("--no-special", o->no_special, "encode the text of special tokens as ordinary text");
  cmd->add_flag("--json", o->json, "print {\"ids\": [...], \"tokens\": [...]}");
  return Command{cmd, [o] {
    const Tokenizer tok = open_tokenizer(o->model_dir);
    if (o->text.empty()) o->text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    const std::vector<int32_t> ids = tok.encode(o->text, !o->no_special);
    if (o->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (int32_t id : ids) pieces.push_back(tok.decode(std::vector<int32_t>{id}));
      std::printf("%s\n", nlohmann::json({{"ids", ids}, {"tokens", pieces}}).dump().c_str());
      return;
    }
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ",%d" : "%d", ids[i]);
    std::printf("\n");
  }};
}

Command add_detokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("detokenize", "token ids to text");
  struct Opts {
    std::string model_dir, ids;
    bool skip_special = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model_dir, "model or tokenizer directory")->required();
  cmd->add_option("--ids", o->ids, "comma-separated token ids")->required();
  cmd->add_flag("--skip-special", o->skip_special, "leave special tokens out");
  return Command{cmd, [o] {
    const Tokenizer tok = open_tokenizer(o->model_dir);
    const std::vector<int32_t> ids = parse_ids(o->ids, "--ids");
    const std::string text = tok.decode(ids, o->skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  }};
}

}  // namespace di::cli
