// The Qwen3.5 chat template (chat_template.jinja) rendered in C++. The renderer follows the
// template section by section, in the template's order (so that errors come in the same order
// too); each function quotes the template line it mirrors. On top of the template it mirrors what
// transformers' apply_chat_template does to its input first: message keys whose value is null are
// treated as absent, `reasoning_content` is filled from `thinking` or `reasoning` when it is absent,
// and messages and tools must be objects.
#include "tokenizer/chat.h"

#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/json_py.h"

namespace di {
namespace {

using Json = nlohmann::ordered_json;

// The template's raise_exception messages, verbatim.
constexpr std::string_view kNoMessages = "No messages provided.";
constexpr std::string_view kSystemImages = "System message cannot contain images.";
constexpr std::string_view kSystemVideos = "System message cannot contain videos.";
constexpr std::string_view kUnexpectedItem = "Unexpected item type in content.";
constexpr std::string_view kUnexpectedContent = "Unexpected content type.";
constexpr std::string_view kNoUserQuery = "No user query found in messages.";
constexpr std::string_view kSystemNotFirst = "System message must be at the beginning.";
constexpr std::string_view kUnexpectedRole = "Unexpected message role.";

// The fixed text of the tools section.
constexpr std::string_view kToolsHead = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kToolsTail =
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but "
    "NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do "
    "not tell the user about function calls\n"
    "</IMPORTANT>";

constexpr std::string_view kVisionImage = "<|vision_start|><|image_pad|><|vision_end|>";
constexpr std::string_view kVisionVideo = "<|vision_start|><|video_pad|><|vision_end|>";

// A JSON value in an error message: its type and (shortened) text.
std::string describe(const Json& v) {
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return fmt::format("{} {}", v.type_name(), text);
}

// An error the template raises itself: its message, then where and why.
[[noreturn]] void template_error(std::string_view message, const std::string& detail) {
  fail("chat template: {} ({})", message, detail);
}

// A key of a message as Jinja sees it after transformers dropped the null-valued keys: nullptr when
// absent or null.
const Json* field(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

class Renderer {
 public:
  Renderer(const Json& messages, const Json& tools, const ChatOptions& options)
      : messages_(messages), tools_(tools), options_(options) {}

  std::string render() {
    check_inputs();
    alias_reasoning();
    render_system_and_tools();
    find_last_query();
    for (size_t i = 0; i < messages_.size(); ++i) render_message(i);
    render_generation_prompt();
    return std::move(out_);
  }

 private:
  const Json& messages_;
  const Json& tools_;
  const ChatOptions& options_;
  std::vector<const Json*> reasoning_;  // per message: reasoning_content after transformers' aliasing
  size_t last_query_index_ = 0;
  int image_count_ = 0;  // {%- set image_count = namespace(value=0) %}
  int video_count_ = 0;  // {%- set video_count = namespace(value=0) %}
  std::string out_;

  const Json& message(size_t i) const { return messages_[i]; }

  // message.role when it is a string; "" otherwise (no role compares equal then).
  std::string_view role(size_t i) const {
    const Json* r = field(message(i), "role");
    return r && r->is_string() ? std::string_view(r->get_ref<const std::string&>()) : std::string_view();
  }

  // What apply_chat_template checks before the template runs, plus the template's
  // {%- if not messages %}{{- raise_exception('No messages provided.') }}
  void check_inputs() {
    if (messages_.is_null() || (messages_.is_array() && messages_.empty()))
      template_error(kNoMessages, "messages is empty or null");
    if (!messages_.is_array())
      fail("chat: messages must be a JSON array of message objects, got {}", describe(messages_));
    for (size_t i = 0; i < messages_.size(); ++i)
      if (!message(i).is_object()) fail("chat: messages[{}] must be a JSON object, got {}", i, describe(message(i)));
    if (tools_.is_null()) return;
    if (!tools_.is_array()) fail("chat: tools must be null or a JSON array of tool objects, got {}", describe(tools_));
    for (size_t i = 0; i < tools_.size(); ++i)
      if (!tools_[i].is_object()) fail("chat: tools[{}] must be a JSON object, got {}", i, describe(tools_[i]));
  }

  // transformers' _alias_reasoning_fields: reasoning_content is the first non-null of
  // reasoning_content, thinking and reasoning.
  void alias_reasoning() {
    reasoning_.resize(messages_.size(), nullptr);
    for (size_t i = 0; i < messages_.size(); ++i)
      for (const char* key : {"reasoning_content", "thinking", "reasoning"})
        if (const Json* r = field(message(i), key)) {
          reasoning_[i] = r;
          break;
        }
  }

  // {%- macro render_content(content, do_vision_count, is_system_content=false) %}
  std::string render_content(size_t i, bool do_vision_count, bool is_system_content = false) {
    const Json* content = field(message(i), "content");
    // {%- elif content is none or content is undefined %}{{- '' }}
    if (!content) return "";
    // {%- if content is string %}{{- content }}
    if (content->is_string()) return content->get<std::string>();
    // {%- elif content is iterable and content is not mapping %}
    if (!content->is_array())
      template_error(kUnexpectedContent, fmt::format("messages[{}].content is a JSON {}; expected a string, an array "
                                                     "of parts or null", i, content->type_name()));
    std::string text;
    for (size_t j = 0; j < content->size(); ++j)
      text += render_item(i, j, (*content)[j], do_vision_count, is_system_content);
    return text;
  }

  // {%- for item in content %} ... {%- endfor %}
  std::string render_item(size_t i, size_t j, const Json& item, bool do_vision_count, bool is_system_content) {
    if (!item.is_object())
      template_error(kUnexpectedItem, fmt::format("messages[{}].content[{}] must be a JSON object, got {}", i, j,
                                                  describe(item)));
    const auto type = item.find("type");
    auto type_equals = [&](std::string_view t) { return type != item.end() && type->is_string() && *type == t; };
    // {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
    if (item.contains("image") || item.contains("image_url") || type_equals("image")) {
      if (is_system_content) template_error(kSystemImages, fmt::format("messages[{}].content[{}]", i, j));
      if (do_vision_count) ++image_count_;
      // {{- 'Picture ' ~ image_count.value ~ ': ' }}
      return (options_.add_vision_id ? fmt::format("Picture {}: ", image_count_) : "") + std::string(kVisionImage);
    }
    // {%- elif 'video' in item or item.type == 'video' %}
    if (item.contains("video") || type_equals("video")) {
      if (is_system_content) template_error(kSystemVideos, fmt::format("messages[{}].content[{}]", i, j));
      if (do_vision_count) ++video_count_;
      return (options_.add_vision_id ? fmt::format("Video {}: ", video_count_) : "") + std::string(kVisionVideo);
    }
    // {%- elif 'text' in item %}{{- item.text }}
    if (item.contains("text")) {
      const Json& text = item["text"];
      // Jinja prints a scalar as Python's str() does ("None", "True", "2.5"); a container would be
      // printed as a Python repr, which no chat client sends.
      if (text.is_array() || text.is_object())
        fail("chat: messages[{}].content[{}].text must be a string, got {}", i, j, describe(text));
      return py::str(text);
    }
    template_error(kUnexpectedItem, fmt::format("messages[{}].content[{}] has no image, image_url, video or text "
                                                "key and type {}", i, j,
                                                type == item.end() ? "absent" : describe(*type)));
  }

  // {%- if tools and tools is iterable and tools is not mapping %} ... {%- else %} ... {%- endif %}
  void render_system_and_tools() {
    const bool system_first = role(0) == "system";
    if (tools_.is_array() && !tools_.empty()) {
      out_ += "<|im_start|>system\n";
      out_ += kToolsHead;
      for (const Json& tool : tools_) {
        out_ += "\n";                  // {{- "\n" }}
        out_ += py::json_dumps(tool);  // {{- tool | tojson }}
      }
      out_ += kToolsTail;
      if (system_first) {
        // {%- set content = render_content(messages[0].content, false, true)|trim %}
        const std::string content(py::strip(render_content(0, false, true)));
        if (!content.empty()) out_ += "\n\n" + content;  // {{- '\n\n' + content }}
      }
      out_ += "<|im_end|>\n";
    } else if (system_first) {
      const std::string content(py::strip(render_content(0, false, true)));
      out_ += "<|im_start|>system\n" + content + "<|im_end|>\n";
    }
  }

  // {%- for message in messages[::-1] %} ... ns.last_query_index: the last user message that is not
  // a wrapped tool response ('<tool_response>...</tool_response>' after trimming).
  void find_last_query() {
    for (size_t k = messages_.size(); k-- > 0;) {
      if (role(k) != "user") continue;
      const std::string rendered = render_content(k, false);
      const std::string_view content = py::strip(rendered);
      // {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
      if (!(starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>"))) {
        last_query_index_ = k;
        return;
      }
    }
    template_error(kNoUserQuery, "every user message is a <tool_response> or there is none");
  }

  // {%- for message in messages %}
  void render_message(size_t i) {
    // {%- set content = render_content(message.content, true)|trim %}
    const std::string content(py::strip(render_content(i, true)));
    const std::string_view r = role(i);
    if (r == "system") {
      // {%- if not loop.first %}{{- raise_exception('System message must be at the beginning.') }}
      if (i != 0) template_error(kSystemNotFirst, fmt::format("messages[{}] is a system message", i));
    } else if (r == "user") {
      out_ += "<|im_start|>user\n" + content + "<|im_end|>\n";
    } else if (r == "assistant") {
      render_assistant(i, content);
    } else if (r == "tool") {
      render_tool_response(i, content);
    } else {
      const Json* value = field(message(i), "role");
      template_error(kUnexpectedRole,
                     !value ? fmt::format("messages[{}].role is missing", i)
                     : !value->is_string()
                         ? fmt::format("messages[{}].role must be a string, got {}", i, describe(*value))
                         : fmt::format("messages[{}].role is \"{}\"; expected system, user, assistant or tool", i, r));
    }
  }

  // {%- elif message.role == "assistant" %}
  void render_assistant(size_t i, std::string content) {
    std::string reasoning;
    if (reasoning_[i] && reasoning_[i]->is_string()) {
      // {%- if message.reasoning_content is string %}
      reasoning = reasoning_[i]->get<std::string>();
    } else if (content.find("</think>") != std::string::npos) {
      // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
      std::string_view before = py::rstrip(std::string_view(content).substr(0, content.find("</think>")), '\n');
      if (const size_t open = before.rfind("<think>"); open != std::string_view::npos)
        before.remove_prefix(open + std::string_view("<think>").size());
      reasoning = py::lstrip(before, '\n');
      // {%- set content = content.split('</think>')[-1].lstrip('\n') %}
      const size_t close = content.rfind("</think>") + std::string_view("</think>").size();
      content = std::string(py::lstrip(std::string_view(content).substr(close), '\n'));
    }
    // {%- set reasoning_content = reasoning_content|trim %}
    reasoning = std::string(py::strip(reasoning));
    // {%- if loop.index0 > ns.last_query_index %}: only turns after the last query keep their reasoning
    if (i > last_query_index_)
      out_ += "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content;
    else
      out_ += "<|im_start|>assistant\n" + content;
    render_tool_calls(i, content);
    out_ += "<|im_end|>\n";
  }

  // {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
  void render_tool_calls(size_t i, const std::string& content) {
    const Json* calls = field(message(i), "tool_calls");
    if (!calls || calls->is_object()) return;  // absent, null or a mapping: the template skips them
    if (!calls->is_array())
      fail("chat: messages[{}].tool_calls must be a JSON array, got {}", i, describe(*calls));
    for (size_t j = 0; j < calls->size(); ++j) {
      const Json& call = (*calls)[j];
      std::string path = fmt::format("messages[{}].tool_calls[{}]", i, j);
      if (!call.is_object()) fail("chat: {} must be a JSON object, got {}", path, describe(call));
      // {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}
      const Json* fn = &call;
      if (call.contains("function")) {
        fn = &call["function"];
        path += ".function";
        if (!fn->is_object()) fail("chat: {} must be a JSON object, got {}", path, describe(*fn));
      }
      const auto name = fn->find("name");
      if (name == fn->end() || !name->is_string())
        fail("chat: {}.name must be a string, got {}", path, name == fn->end() ? "none" : describe(*name));
      // {%- if loop.first %}{%- if content|trim %}'\n\n<tool_call>...' {%- else %}'<tool_call>...'
      // {%- else %}'\n<tool_call>...'
      if (j == 0)
        out_ += py::strip(content).empty() ? "<tool_call>\n<function=" : "\n\n<tool_call>\n<function=";
      else
        out_ += "\n<tool_call>\n<function=";
      out_ += name->get<std::string>() + ">\n";
      // {%- if tool_call.arguments is defined %}{%- for args_name, args_value in tool_call.arguments|items %}
      if (const auto args = fn->find("arguments"); args != fn->end()) {
        if (!args->is_object())
          fail("chat: {}.arguments must be a JSON object, got {} (the template cannot list the parameters of "
               "anything else; parse arguments given as a JSON string first)", path, describe(*args));
        for (const auto& [arg_name, arg_value] : args->items())
          out_ += "<parameter=" + arg_name + ">\n" + render_argument(arg_value) + "\n</parameter>\n";
      }
      out_ += "</function>\n</tool_call>";
    }
  }

  // {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence
  //     and args_value is not string) else args_value | string %}
  static std::string render_argument(const Json& value) {
    return value.is_object() || value.is_array() ? py::json_dumps(value) : py::str(value);
  }

  // {%- elif message.role == "tool" %}: consecutive tool messages share one user turn.
  void render_tool_response(size_t i, const std::string& content) {
    // {%- if loop.previtem and loop.previtem.role != "tool" %}{{- '<|im_start|>user' }}
    if (i > 0 && role(i - 1) != "tool") out_ += "<|im_start|>user";
    out_ += "\n<tool_response>\n" + content + "\n</tool_response>";
    // {%- if not loop.last and loop.nextitem.role != "tool" %} / {%- elif loop.last %}: '<|im_end|>\n'
    if (i + 1 == messages_.size() || role(i + 1) != "tool") out_ += "<|im_end|>\n";
  }

  // {%- if add_generation_prompt %}
  void render_generation_prompt() {
    if (!options_.add_generation_prompt) return;
    out_ += "<|im_start|>assistant\n";
    // {%- if enable_thinking is defined and enable_thinking is false %}
    out_ += options_.enable_thinking == false ? "<think>\n\n</think>\n\n" : "<think>\n";
  }
};

}  // namespace

std::string render_qwen35_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               const ChatOptions& options) {
  return Renderer(messages, tools, options).render();
}

}  // namespace di
