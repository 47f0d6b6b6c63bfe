#pragma once
// The OpenAI API's JSON, translated to and from the engine's requests and events: request bodies of
// /v1/completions and /v1/chat/completions validated field by field (a bad one is an ApiError that
// names the field), and the response objects and stream chunks the official clients expect.
// No HTTP here (server/http_server.h does that), so every rule is testable on its own.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace di::server {

// An error as the API reports it: the HTTP status and the body {"error": {...}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, or empty
  std::string code;   // a machine-readable code, or empty
  nlohmann::json body() const;
};

// Thrown by the parsers below.
struct ApiException {
  ApiError error;
};

enum class Endpoint { completions, chat };

// A validated request: what the engine runs and how to answer.
struct ParsedRequest {
  Endpoint endpoint = Endpoint::completions;
  bool prompt_opens_thinking = false;  // chat: the rendered prompt ends inside "<think>\n"
  GenerationRequest generation;  // prompt ids, max_tokens, sampling, stop strings, ignore_eos
  std::string echo_text;         // completions with echo: the prompt's text, sent before the output
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
};

struct ProtocolLimits {
  std::string model_name;     // the one model served
  int64_t max_model_len = 0;  // prompt + max_tokens
  int64_t vocab_size = 0;     // the model's: prompt token ids must be below it (0: the tokenizer's)
};

// Parses and validates a body (already JSON) of the given endpoint; throws ApiException.
ParsedRequest parse_request(Endpoint endpoint, const nlohmann::json& body, const Tokenizer& tokenizer,
                            const ProtocolLimits& limits);

// Qwen3's reasoning parser: splits a chat answer into its reasoning (before "</think>") and its
// content, piece by piece as the text streams. Text that could still become "</think>" waits for
// the next piece; the newlines right after the tag are dropped.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_in_reasoning) : in_reasoning_(starts_in_reasoning) {}
  struct Parts {
    std::string reasoning, content;
  };
  Parts push(const std::string& text, bool last);

 private:
  bool in_reasoning_;
  bool after_tag_ = false;  // newlines right after "</think>" are dropped
  std::string held_;
};

// The prompt ids of /tokenize's body ({"prompt": text} or {"messages": [...]}); throws ApiException.
std::vector<int32_t> tokenize_body(const nlohmann::json& body, const Tokenizer& tokenizer);

// "stop" for stop ids and strings, "length" for max_tokens; "abort" otherwise.
const char* finish_reason_text(FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  nlohmann::json json() const;
};

// The "logprobs" object of a choice for these tokens (each with its log-probabilities): completions'
// {tokens, token_logprobs, top_logprobs, text_offset}, chat's {content: [{token, logprob, bytes,
// top_logprobs}]}. `text_offset` counts from `first_offset` (the echoed prompt's length).
using TokenWithLogprobs = std::pair<int32_t, TokenLogprobs>;
nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<TokenWithLogprobs>& tokens, const Tokenizer& tokenizer,
                             int64_t first_offset);

// A whole (non-streamed) response; `logprobs` is the choice's (null when not asked); a chat answer
// split by the reasoning parser has its reasoning in `reasoning` (nullopt: no parser).
nlohmann::json completion_response(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const char* finish_reason, const Usage& usage,
                                   const nlohmann::json& logprobs = nullptr,
                                   const std::optional<std::string>& reasoning = std::nullopt);

// One streamed chunk: text (a delta) and, on the last, the finish reason and usage. The first chat
// chunk carries the assistant role.
nlohmann::json stream_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                            const std::string& text, bool first, const char* finish_reason,
                            const std::optional<Usage>& usage, const nlohmann::json& logprobs = nullptr,
                            const std::string& reasoning = "");

// The OpenAI-style extra chunk with no choices and the usage (stream_options.include_usage).
nlohmann::json usage_chunk(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage);

}  // namespace di::server
