#include "server/openai_protocol.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/chat.h"

namespace di::server {

namespace {

[[noreturn]] void reject(const std::string& message, const std::string& param = "", int status = 400,
                         const std::string& code = "") {
  throw ApiException{ApiError{status, message, "invalid_request_error", param, code}};
}

const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const nlohmann::json& body, const char* name, bool fallback) {
  const nlohmann::json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) reject(fmt::format("'{}' must be a boolean", name), name);
  return v->get<bool>();
}

std::optional<double> get_number(const nlohmann::json& body, const char* name) {
  const nlohmann::json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) reject(fmt::format("'{}' must be a number", name), name);
  return v->get<double>();
}

std::optional<int64_t> get_integer(const nlohmann::json& body, const char* name) {
  const nlohmann::json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) reject(fmt::format("'{}' must be an integer", name), name);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
    reject(fmt::format("'{}' is out of range", name), name);
  return v->get<int64_t>();
}

std::vector<int32_t> token_ids(const nlohmann::json& list, const char* name, int64_t vocab) {
  std::vector<int32_t> ids;
  for (const nlohmann::json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      reject(fmt::format("'{}' must be a string or a list of non-negative token ids", name), name);
    if (v.get<int64_t>() >= vocab)
      reject(fmt::format("'{}': token id {} is outside the vocabulary of {}", name, v.get<int64_t>(), vocab), name);
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ids;
}

// The text of ids, skipping those past the tokenizer's vocabulary (the embedding's padding rows).
std::string text_of(const std::vector<int32_t>& ids, const Tokenizer& tokenizer) {
  std::vector<int32_t> known;
  for (int32_t id : ids)
    if (id < tokenizer.vocab_size()) known.push_back(id);
  return tokenizer.decode(known);
}

std::vector<int32_t> chat_prompt(const nlohmann::json& body, const Tokenizer& tokenizer) {
  const nlohmann::json* messages = field(body, "messages");
  if (!messages) reject("'messages' is required", "messages");
  if (!messages->is_array() || messages->empty()) reject("'messages' must be a non-empty list", "messages");
  ChatOptions options;
  if (const nlohmann::json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) reject("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    if (const nlohmann::json* thinking = field(*kwargs, "enable_thinking")) {
      if (!thinking->is_boolean())
        reject("'chat_template_kwargs.enable_thinking' must be a boolean", "chat_template_kwargs");
      options.enable_thinking = thinking->get<bool>();
    }
  }
  nlohmann::ordered_json tools = nullptr;
  if (const nlohmann::json* t = field(body, "tools")) {
    if (!t->is_array()) reject("'tools' must be a list", "tools");
    tools = nlohmann::ordered_json::parse(t->dump());
  }
  std::string text;
  try {
    // The renderer keeps key order, which the body's nlohmann::json does not: re-read it ordered.
    text = render_qwen35_chat(nlohmann::ordered_json::parse(messages->dump()), tools, options);
  } catch (const std::exception& e) {  // di::Error from the template's rules, or a JSON type error
    reject(fmt::format("messages: {}", e.what()), "messages");
  }
  return tokenizer.encode(text, /*parse_special=*/true);
}

constexpr std::string_view kThinkEnd = "</think>";

}  // namespace

ReasoningSplitter::Parts ReasoningSplitter::push(const std::string& text, bool last) {
  Parts out;
  held_ += text;
  if (in_reasoning_) {
    const size_t end = held_.find(kThinkEnd);
    if (end == std::string::npos) {
      // Keep back the longest tail that could be the start of the tag.
      size_t keep = 0;
      if (!last)
        for (size_t n = std::min(held_.size(), kThinkEnd.size() - 1); n > 0; --n)
          if (held_.compare(held_.size() - n, n, kThinkEnd, 0, n) == 0) {
            keep = n;
            break;
          }
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, end);
    held_.erase(0, end + kThinkEnd.size());
    in_reasoning_ = false;
    after_tag_ = true;
  }
  if (after_tag_) {
    const size_t first = held_.find_first_not_of('\n');
    if (first == std::string::npos) {
      held_.clear();
      return out;
    }
    held_.erase(0, first);
    after_tag_ = false;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

nlohmann::json ApiError::body() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", code.empty() ? nlohmann::json(status) : nlohmann::json(code)}}}};
}

std::vector<int32_t> tokenize_body(const nlohmann::json& body, const Tokenizer& tokenizer) {
  if (!body.is_object()) reject("the body must be a JSON object");
  if (field(body, "messages")) return chat_prompt(body, tokenizer);
  const nlohmann::json* prompt = field(body, "prompt");
  if (!prompt || !prompt->is_string()) reject("'prompt' (a string) or 'messages' is required", "prompt");
  return tokenizer.encode(prompt->get<std::string>(), /*parse_special=*/true);
}

ParsedRequest parse_request(Endpoint endpoint, const nlohmann::json& body, const Tokenizer& tokenizer,
                            const ProtocolLimits& limits) {
  if (!body.is_object()) reject("the body must be a JSON object");
  ParsedRequest r;
  r.endpoint = endpoint;
  if (const nlohmann::json* model = field(body, "model")) {
    if (!model->is_string()) reject("'model' must be a string", "model");
    if (model->get<std::string>() != limits.model_name)
      reject(fmt::format("the model '{}' does not exist; this server serves '{}'", model->get<std::string>(),
                         limits.model_name),
             "model", 404, "model_not_found");
  }
  if (const auto n = get_integer(body, "n"); n && *n != 1) reject("'n' must be 1", "n");
  // Log-probabilities: completions' "logprobs" is how many alternatives (0-20); chat's is a switch,
  // with "top_logprobs" the count.
  int32_t logprobs = -1;
  if (endpoint == Endpoint::completions) {
    if (const auto n = get_integer(body, "logprobs")) {
      if (*n < 0 || *n > 20) reject("'logprobs' must be in [0, 20]", "logprobs");
      logprobs = int32_t(*n);
    }
  } else {
    const bool wanted = get_bool(body, "logprobs", false);
    const auto top = get_integer(body, "top_logprobs");
    if (top && (*top < 0 || *top > 20)) reject("'top_logprobs' must be in [0, 20]", "top_logprobs");
    if (top && !wanted) reject("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (wanted) logprobs = top ? int32_t(*top) : 0;
  }

  // The prompt.
  std::vector<int32_t>& ids = r.generation.prompt;
  if (endpoint == Endpoint::chat) {
    ids = chat_prompt(body, tokenizer);
    // The generation prompt ends "<think>\n" unless thinking is off (then "</think>\n\n").
    const std::vector<int32_t> open = tokenizer.encode("<think>\n", /*parse_special=*/true);
    r.prompt_opens_thinking = ids.size() >= open.size() && std::equal(open.begin(), open.end(), ids.end() - open.size());
  } else {
    const nlohmann::json* prompt = field(body, "prompt");
    if (!prompt) reject("'prompt' is required", "prompt");
    std::string text;
    if (prompt->is_string()) {
      text = prompt->get<std::string>();
      ids = tokenizer.encode(text, /*parse_special=*/true);
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
      text = (*prompt)[0].get<std::string>();
      ids = tokenizer.encode(text, /*parse_special=*/true);
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
      ids = token_ids(*prompt, "prompt", limits.vocab_size > 0 ? limits.vocab_size : tokenizer.vocab_size());
      text = text_of(ids, tokenizer);
    } else {
      reject("'prompt' must be a string, a list of one string, or a list of token ids", "prompt");
    }
    if (get_bool(body, "echo", false)) r.echo_text = text;
  }
  const int64_t prompt_len = int64_t(ids.size());
  if (prompt_len == 0) reject("the prompt is empty", endpoint == Endpoint::chat ? "messages" : "prompt");
  if (prompt_len >= limits.max_model_len)
    reject(fmt::format("this model's maximum context length is {} tokens; the prompt has {}", limits.max_model_len,
                       prompt_len),
           endpoint == Endpoint::chat ? "messages" : "prompt");

  // How much to generate.
  std::optional<int64_t> max_tokens = get_integer(body, "max_tokens");
  if (endpoint == Endpoint::chat)
    if (const auto alias = get_integer(body, "max_completion_tokens")) max_tokens = alias;
  if (max_tokens && *max_tokens < 1) reject(fmt::format("'max_tokens' must be at least 1, found {}", *max_tokens), "max_tokens");
  const int64_t room = limits.max_model_len - prompt_len;
  if (max_tokens && *max_tokens > room)
    reject(fmt::format("this model's maximum context length is {} tokens; the prompt has {} and max_tokens asks for {}",
                       limits.max_model_len, prompt_len, *max_tokens),
           "max_tokens");
  r.generation.max_tokens = max_tokens ? *max_tokens : endpoint == Endpoint::chat ? room : std::min<int64_t>(16, room);

  // Sampling.
  SamplingParams& s = r.generation.sampling;
  if (const auto t = get_number(body, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0)) reject("'temperature' must be in [0, 2]", "temperature");
    s.temperature = float(*t);
  } else {
    s.temperature = 1.0f;  // the API's default
  }
  if (const auto p = get_number(body, "top_p")) {
    if (!(*p > 0.0 && *p <= 1.0)) reject("'top_p' must be in (0, 1]", "top_p");
    s.top_p = float(*p);
  }
  if (const auto k = get_integer(body, "top_k")) {
    if (*k < -1) reject("'top_k' must be -1 or 0 (off) or at least 1", "top_k");
    s.top_k = *k < 0 ? 0 : *k;
  }
  if (const auto m = get_number(body, "min_p")) {
    if (!(*m >= 0.0 && *m <= 1.0)) reject("'min_p' must be in [0, 1]", "min_p");
    s.min_p = float(*m);
  }
  if (const auto seed = get_integer(body, "seed")) s.seed = uint64_t(*seed);
  s.logprobs = logprobs;
  r.generation.ignore_eos = get_bool(body, "ignore_eos", false);
  if (const nlohmann::json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.generation.stop_strings.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const nlohmann::json& v : *stop) {
        if (!v.is_string()) reject("'stop' must be a string or a list of strings", "stop");
        r.generation.stop_strings.push_back(v.get<std::string>());
      }
    } else {
      reject("'stop' must be a string or a list of strings", "stop");
    }
    for (const std::string& st : r.generation.stop_strings)
      if (st.empty()) reject("'stop' strings must not be empty", "stop");
  }

  r.stream = get_bool(body, "stream", false);
  if (const nlohmann::json* so = field(body, "stream_options")) {
    if (!so->is_object()) reject("'stream_options' must be an object", "stream_options");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  return r;
}

const char* finish_reason_text(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    default: return "abort";
  }
}

nlohmann::json Usage::json() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<TokenWithLogprobs>& tokens, const Tokenizer& tokenizer,
                             int64_t first_offset) {
  // A token's own text (byte-level pieces of a character decode to U+FFFD, as in other servers).
  auto text = [&](int32_t id) {
    const int32_t one[1] = {id};
    return id < tokenizer.vocab_size() ? tokenizer.decode(one) : std::string();
  };
  auto bytes = [](const std::string& t) {
    nlohmann::json b = nlohmann::json::array();
    for (unsigned char c : t) b.push_back(int(c));
    return b;
  };
  if (endpoint == Endpoint::chat) {
    nlohmann::json content = nlohmann::json::array();
    for (const auto& [id, lp] : tokens) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [alt, alt_lp] : lp.top) {
        const std::string t = text(alt);
        top.push_back({{"token", t}, {"logprob", alt_lp}, {"bytes", bytes(t)}});
      }
      const std::string t = text(id);
      content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  nlohmann::json out = {{"tokens", nlohmann::json::array()},
                        {"token_logprobs", nlohmann::json::array()},
                        {"top_logprobs", nlohmann::json::array()},
                        {"text_offset", nlohmann::json::array()}};
  int64_t offset = first_offset;
  for (const auto& [id, lp] : tokens) {
    const std::string t = text(id);
    out["tokens"].push_back(t);
    out["token_logprobs"].push_back(lp.logprob);
    nlohmann::json top = nlohmann::json::object();
    for (const auto& [alt, alt_lp] : lp.top) top[text(alt)] = alt_lp;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += int64_t(t.size());
  }
  return out;
}

nlohmann::json completion_response(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const char* finish_reason, const Usage& usage,
                                   const nlohmann::json& logprobs, const std::optional<std::string>& reasoning) {
  nlohmann::json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", logprobs}};
  if (endpoint == Endpoint::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    if (reasoning) choice["message"]["reasoning_content"] = *reasoning;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", nlohmann::json::array({choice})},
          {"usage", usage.json()}};
}

nlohmann::json stream_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                            const std::string& text, bool first, const char* finish_reason,
                            const std::optional<Usage>& usage, const nlohmann::json& logprobs,
                            const std::string& reasoning) {
  nlohmann::json choice = {{"index", 0},
                           {"finish_reason", finish_reason ? nlohmann::json(finish_reason) : nlohmann::json(nullptr)},
                           {"logprobs", logprobs}};
  if (endpoint == Endpoint::chat) {
    nlohmann::json delta = nlohmann::json::object();
    if (first) delta["role"] = "assistant";
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!text.empty() || (first && reasoning.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  nlohmann::json chunk = {{"id", id},
                          {"object", endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created},
                          {"model", model},
                          {"choices", nlohmann::json::array({choice})}};
  if (usage) chunk["usage"] = usage->json();
  return chunk;
}

nlohmann::json usage_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage) {
  return {{"id", id},
          {"object", endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", nlohmann::json::array()},
          {"usage", usage.json()}};
}

}  // namespace di::server
