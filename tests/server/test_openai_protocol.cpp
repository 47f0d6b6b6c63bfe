// The OpenAI request rules (server/openai_protocol.h) field by field, without HTTP: every accepted
// form becomes the right engine request, every bad value is an error with its status and the field
// it names, and the response and chunk objects have the shapes the official clients read.
#include <gtest/gtest.h>

#include "server/openai_protocol.h"

namespace di::server {
namespace {

using nlohmann::json;

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::load(DI_TOKENIZER_DIR);
  return t;
}

const ProtocolLimits kLimits{"tiny", 64};

ParsedRequest parse(Endpoint e, const json& body) { return parse_request(e, body, tokenizer(), kLimits); }

// The error a body gets.
ApiError error_of(Endpoint e, const json& body) {
  try {
    parse(e, body);
  } catch (const ApiException& x) {
    return x.error;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return {};
}

TEST(OpenAiProtocol, ACompletionBecomesTheEngineRequest) {
  const ParsedRequest r = parse(Endpoint::completions,
                                {{"model", "tiny"}, {"prompt", "Hello world"}, {"max_tokens", 5}, {"temperature", 0},
                                 {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"seed", 7}, {"stop", "\n"},
                                 {"ignore_eos", true}, {"echo", true}, {"stream", true},
                                 {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(r.generation.prompt, tokenizer().encode("Hello world"));
  EXPECT_EQ(r.generation.max_tokens, 5);
  EXPECT_EQ(r.generation.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.generation.sampling.top_p, 0.9f);
  EXPECT_EQ(r.generation.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.generation.sampling.min_p, 0.05f);
  EXPECT_EQ(r.generation.sampling.seed, 7u);
  EXPECT_EQ(r.generation.stop_strings, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.generation.ignore_eos);
  EXPECT_EQ(r.echo_text, "Hello world");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiProtocol, DefaultsFollowTheApi) {
  const ParsedRequest c = parse(Endpoint::completions, {{"prompt", "Hi"}});
  EXPECT_EQ(c.generation.max_tokens, 16) << "completions default to 16 tokens";
  EXPECT_EQ(c.generation.sampling.temperature, 1.0f);
  EXPECT_FALSE(c.stream);
  const ParsedRequest chat = parse(Endpoint::chat, {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  EXPECT_EQ(chat.generation.max_tokens, 64 - int64_t(chat.generation.prompt.size())) << "chat: the rest of the context";
  const ParsedRequest ids = parse(Endpoint::completions, {{"prompt", {1, 2, 3}}, {"top_k", -1}});
  EXPECT_EQ(ids.generation.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.generation.sampling.top_k, 0) << "-1 turns top-k off";
  const ParsedRequest one = parse(Endpoint::completions, {{"prompt", {"Hi"}}, {"stop", {"a", "b"}}});
  EXPECT_EQ(one.generation.prompt, tokenizer().encode("Hi"));
  EXPECT_EQ(one.generation.stop_strings, (std::vector<std::string>{"a", "b"}));
}

TEST(OpenAiProtocol, ChatRendersTheQwen35FormatWithThinkingSwitchable) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  const ParsedRequest on = parse(Endpoint::chat, {{"messages", messages}});
  const ParsedRequest off =
      parse(Endpoint::chat, {{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  const std::string text_on = tokenizer().decode(on.generation.prompt), text_off = tokenizer().decode(off.generation.prompt);
  EXPECT_NE(text_on.find("<|im_start|>system\nBe brief.<|im_end|>"), std::string::npos) << text_on;
  EXPECT_TRUE(text_on.ends_with("<|im_start|>assistant\n<think>\n")) << text_on;
  EXPECT_TRUE(text_off.ends_with("<think>\n\n</think>\n\n")) << text_off;
  EXPECT_EQ(parse(Endpoint::chat, {{"messages", messages}, {"max_completion_tokens", 3}}).generation.max_tokens, 3);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(OpenAiProtocol, BadValuesAreErrorsNamingTheField) {
  const json ok = {{"model", "tiny"}, {"prompt", "Hi"}};
  struct Case {
    const char* what;
    json patch;
    int status;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"unknown model", {{"model", "gpt-4"}}, 404, "model"},
      {"model not a string", {{"model", 3}}, 400, "model"},
      {"prompt an object", {{"prompt", {{"a", 1}}}}, 400, "prompt"},
      {"two prompts", {{"prompt", {"a", "b"}}}, 400, "prompt"},
      {"negative token id", {{"prompt", {1, -2}}}, 400, "prompt"},
      {"empty prompt", {{"prompt", ""}}, 400, "prompt"},
      {"prompt past the context", {{"prompt", repeat(" hello", 100)}}, 400, "prompt"},
      {"max_tokens 0", {{"max_tokens", 0}}, 400, "max_tokens"},
      {"max_tokens negative", {{"max_tokens", -1}}, 400, "max_tokens"},
      {"max_tokens huge", {{"max_tokens", 1000000000}}, 400, "max_tokens"},
      {"max_tokens a string", {{"max_tokens", "8"}}, 400, "max_tokens"},
      {"max_tokens a float", {{"max_tokens", 8.5}}, 400, "max_tokens"},
      {"temperature a string", {{"temperature", "hot"}}, 400, "temperature"},
      {"temperature too high", {{"temperature", 2.5}}, 400, "temperature"},
      {"top_p zero", {{"top_p", 0}}, 400, "top_p"},
      {"top_k -2", {{"top_k", -2}}, 400, "top_k"},
      {"min_p above 1", {{"min_p", 1.5}}, 400, "min_p"},
      {"seed a string", {{"seed", "7"}}, 400, "seed"},
      {"stop a number", {{"stop", 3}}, 400, "stop"},
      {"stop empty", {{"stop", {""}}}, 400, "stop"},
      {"logprobs above 20", {{"logprobs", 21}}, 400, "logprobs"},
      {"logprobs a string", {{"logprobs", "yes"}}, 400, "logprobs"},
      {"n 2", {{"n", 2}}, 400, "n"},
      {"stream a string", {{"stream", "yes"}}, 400, "stream"},
      {"echo a number", {{"echo", 1}}, 400, "echo"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json body = ok;
    body.update(c.patch);
    const ApiError e = error_of(Endpoint::completions, body);
    EXPECT_EQ(e.status, c.status);
    EXPECT_EQ(e.param, c.param);
    EXPECT_FALSE(e.message.empty());
    const json b = e.body();
    EXPECT_TRUE(b["error"]["message"].is_string() && b["error"]["type"].is_string()) << b.dump();
  }
  EXPECT_EQ(error_of(Endpoint::chat, {{"messages", json::array()}}).param, "messages");
  const json hi = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(error_of(Endpoint::chat, {{"messages", hi}, {"top_logprobs", 2}}).param, "top_logprobs")
      << "top_logprobs without logprobs";
  EXPECT_EQ(error_of(Endpoint::chat, {{"messages", hi}, {"logprobs", 1}}).param, "logprobs") << "a switch, not a count";
  EXPECT_EQ(error_of(Endpoint::chat, {{"model", "tiny"}}).param, "messages");
  EXPECT_EQ(error_of(Endpoint::chat, {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}).param, "messages");
  EXPECT_EQ(error_of(Endpoint::completions, json::array({1, 2})).status, 400) << "a body that is not an object";
}

TEST(OpenAiProtocol, LogprobsAreACountForCompletionsAndASwitchForChat) {
  EXPECT_EQ(parse(Endpoint::completions, {{"prompt", "Hi"}}).generation.sampling.logprobs, -1);
  EXPECT_EQ(parse(Endpoint::completions, {{"prompt", "Hi"}, {"logprobs", 0}}).generation.sampling.logprobs, 0);
  EXPECT_EQ(parse(Endpoint::completions, {{"prompt", "Hi"}, {"logprobs", 5}}).generation.sampling.logprobs, 5);
  const json hi = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(parse(Endpoint::chat, {{"messages", hi}, {"logprobs", true}}).generation.sampling.logprobs, 0);
  EXPECT_EQ(parse(Endpoint::chat, {{"messages", hi}, {"logprobs", true}, {"top_logprobs", 4}}).generation.sampling.logprobs,
            4);

  const int32_t hello = tokenizer().encode("Hello").front(), world = tokenizer().encode(" world").front();
  const std::vector<TokenWithLogprobs> tokens = {{hello, {-0.5f, {{hello, -0.5f}, {world, -1.5f}}}},
                                                 {world, {-0.25f, {{world, -0.25f}, {hello, -2.0f}}}}};
  const json c = logprobs_json(Endpoint::completions, tokens, tokenizer(), 3);
  EXPECT_EQ(c["tokens"], json({"Hello", " world"}));
  EXPECT_EQ(c["token_logprobs"], json({-0.5, -0.25}));
  EXPECT_EQ(c["top_logprobs"][0]["Hello"], -0.5);
  EXPECT_EQ(c["top_logprobs"][1]["Hello"], -2.0);
  EXPECT_EQ(c["text_offset"], json({3, 8})) << "from the echo's length, then each token's text";
  const json chat = logprobs_json(Endpoint::chat, tokens, tokenizer(), 0);
  EXPECT_EQ(chat["content"][1]["token"], " world");
  EXPECT_EQ(chat["content"][1]["logprob"], -0.25);
  EXPECT_EQ(chat["content"][1]["bytes"], json({32, 119, 111, 114, 108, 100}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], " world");
}

// Feeds pieces through a splitter and joins what it gives.
ReasoningSplitter::Parts split(bool starts_in_reasoning, const std::vector<std::string>& pieces) {
  ReasoningSplitter splitter(starts_in_reasoning);
  ReasoningSplitter::Parts all;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ReasoningSplitter::Parts p = splitter.push(pieces[i], i + 1 == pieces.size());
    all.reasoning += p.reasoning;
    all.content += p.content;
  }
  return all;
}

TEST(OpenAiProtocol, TheReasoningParserSplitsAtTheEndOfThinking) {
  auto expect = [](const ReasoningSplitter::Parts& p, const std::string& reasoning, const std::string& content,
                   const char* what = "") {
    EXPECT_EQ(p.reasoning, reasoning) << what;
    EXPECT_EQ(p.content, content) << what;
  };
  expect(split(true, {"Let me think.", "</think>\n\nThe answer."}), "Let me think.", "The answer.");
  expect(split(true, {"Hmm", "</th", "ink>", "\n", "\nYes"}), "Hmm", "Yes", "a tag split over pieces");
  expect(split(true, {"a </", "b"}), "a </b", "", "a tag's start that was not one");
  expect(split(true, {"still thinking </thi"}), "still thinking </thi", "", "the end: nothing held back");
  expect(split(false, {"No thinking here", "</think> stays"}), "", "No thinking here</think> stays");
  // Nothing is given early: each piece's reasoning excludes a tail that may open the tag.
  ReasoningSplitter splitter(true);
  EXPECT_EQ(splitter.push("abc</", false).reasoning, "abc");
  const ReasoningSplitter::Parts rest = splitter.push("think>done", false);
  EXPECT_EQ(rest.reasoning, "");
  EXPECT_EQ(rest.content, "done");
}

TEST(OpenAiProtocol, ChatKnowsWhetherItsPromptOpensThinking) {
  const json hi = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_TRUE(parse(Endpoint::chat, {{"messages", hi}}).prompt_opens_thinking);
  EXPECT_FALSE(parse(Endpoint::chat, {{"messages", hi}, {"chat_template_kwargs", {{"enable_thinking", false}}}})
                   .prompt_opens_thinking);
  const json split_answer = completion_response(Endpoint::chat, "c", 1, "tiny", "Yes.", "stop", {}, nullptr,
                                                std::string("Thought."));
  EXPECT_EQ(split_answer["choices"][0]["message"]["reasoning_content"], "Thought.");
  const json delta = stream_chunk(Endpoint::chat, "c", 1, "tiny", "", false, nullptr, std::nullopt, nullptr, "Thought.");
  EXPECT_EQ(delta["choices"][0]["delta"]["reasoning_content"], "Thought.");
  EXPECT_FALSE(delta["choices"][0]["delta"].contains("content"));
}

TEST(OpenAiProtocol, ResponsesAndChunksHaveTheClientsShapes) {
  const Usage usage{5, 3};
  const json c = completion_response(Endpoint::completions, "cmpl-1", 100, "tiny", "abc", "length", usage);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "abc");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 8);
  const json chat = completion_response(Endpoint::chat, "chatcmpl-1", 100, "tiny", "hi", "stop", usage);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hi");
  const json first = stream_chunk(Endpoint::chat, "c", 1, "tiny", "", true, nullptr, std::nullopt);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  const json last = stream_chunk(Endpoint::completions, "c", 1, "tiny", "z", false, "stop", usage);
  EXPECT_EQ(last["choices"][0]["text"], "z");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["usage"]["completion_tokens"], 3);
  const json u = usage_chunk(Endpoint::chat, "c", 1, "tiny", usage);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(std::string(finish_reason_text(FinishReason::cancelled)), "abort");
}

TEST(OpenAiProtocol, TokenizeTakesAPromptOrMessages) {
  EXPECT_EQ(tokenize_body({{"prompt", "Hello"}}, tokenizer()), tokenizer().encode("Hello"));
  EXPECT_FALSE(tokenize_body({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, tokenizer()).empty());
  EXPECT_THROW(tokenize_body({{"prompt", 3}}, tokenizer()), ApiException);
  EXPECT_THROW(tokenize_body(json::array(), tokenizer()), ApiException);
}

}  // namespace
}  // namespace di::server
