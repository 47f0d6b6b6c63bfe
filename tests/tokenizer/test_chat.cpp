// The Qwen3.5 chat renderer against transformers' apply_chat_template (the fixture written by
// tools/chat/make_chat_fixtures.py), plus the Python-compatibility helpers it is built on.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "tokenizer/chat.h"
#include "tokenizer/json_py.h"

namespace di {
namespace {

using Json = nlohmann::ordered_json;
using di::testing::throws_error_with;

const Json& fixture() {
  static const Json doc = [] {
    const std::string path = std::string(DI_FIXTURE_DIR) + "/chat/qwen35_chat_cases.json";
    std::ifstream in(path);
    if (!in) return Json();
    return Json::parse(in);
  }();
  return doc;
}

ChatOptions options_of(const Json& o) {
  ChatOptions options;
  options.add_generation_prompt = o.value("add_generation_prompt", true);
  if (o.contains("enable_thinking")) options.enable_thinking = o["enable_thinking"].get<bool>();
  options.add_vision_id = o.value("add_vision_id", false);
  return options;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  if (fixture().is_object())
    for (const Json& c : fixture()["cases"]) names.push_back(c["name"].get<std::string>());
  return names;
}

const Json& find_case(const std::string& name) {
  for (const Json& c : fixture()["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

TEST(ChatFixture, LoadsWithVersionsAndEnoughCases) {
  ASSERT_TRUE(fixture().is_object()) << "missing or unreadable " DI_FIXTURE_DIR "/chat/qwen35_chat_cases.json";
  EXPECT_TRUE(fixture()["versions"]["transformers"].is_string());
  EXPECT_TRUE(fixture()["versions"]["jinja2"].is_string());
  size_t renderings = 0, errors = 0;
  for (const Json& c : fixture()["cases"]) (c.contains("error") ? errors : renderings)++;
  EXPECT_GE(renderings, 24u);
  EXPECT_GE(errors, 8u);
}

class ChatCase : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatCase, MatchesTransformers) {
  const Json& c = find_case(GetParam());
  SCOPED_TRACE("covers: " + c["covers"].get<std::string>());
  const ChatOptions options = options_of(c["options"]);
  if (c.contains("error")) {
    EXPECT_TRUE(throws_error_with([&] { render_qwen35_chat(c["messages"], c["tools"], options); },
                                  {c["error"].get<std::string>()}))
        << "transformers: " << c["python_error"].get<std::string>();
  } else {
    EXPECT_EQ(render_qwen35_chat(c["messages"], c["tools"], options), c["expected"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(ChatQwen35, ChatCase, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ChatCase);

// ---- direct tests

TEST(ChatDirect, OneUserTurn) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(render_qwen35_chat(messages, nullptr, {}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  ChatOptions no_think;
  no_think.enable_thinking = false;
  EXPECT_EQ(render_qwen35_chat(messages, nullptr, no_think),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  ChatOptions think;
  think.enable_thinking = true;
  EXPECT_EQ(render_qwen35_chat(messages, nullptr, think), render_qwen35_chat(messages, nullptr, {}));
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(render_qwen35_chat(messages, nullptr, no_prompt), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatDirect, ToolCallArgumentsKeepTheirOrder) {
  const char* text = R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "content": "",
       "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1.0, "a": [1e-05, null]}}}]}])";
  ChatOptions options;
  options.add_generation_prompt = false;
  EXPECT_EQ(render_qwen35_chat(Json::parse(text), nullptr, options),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=f>\n"
            "<parameter=b>\n1.0\n</parameter>\n<parameter=a>\n[1e-05, null]\n</parameter>\n</function>\n</tool_call>"
            "<|im_end|>\n");
}

TEST(ChatDirect, ToolSchemaOrderAndEscapes) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "Q"}])");
  const Json tools = Json::parse(R"([{"z": "\u00e9\n\u0001", "a": {"y": 2, "x": []}}])");
  const std::string out = render_qwen35_chat(messages, tools, {});
  EXPECT_NE(out.find("<tools>\n{\"z\": \"\u00e9\\n\\u0001\", \"a\": {\"y\": 2, \"x\": []}}\n</tools>"),
            std::string::npos)
      << out;
}

TEST(ChatDirect, ShapeErrorsNameTheIndexAndField) {
  auto render = [](const char* messages, const char* tools = "null") {
    return [=] { render_qwen35_chat(Json::parse(messages), Json::parse(tools), {}); };
  };
  EXPECT_TRUE(throws_error_with(render(R"({"role": "user"})"), {"messages must be a JSON array"}));
  EXPECT_TRUE(throws_error_with(render("null"), {"No messages provided."}));
  EXPECT_TRUE(throws_error_with(render("[]"), {"No messages provided."}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"}, 3])"), {"messages[1]", "JSON object"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"}, {"role": 5}])"),
                                {"messages[1].role must be a string", "Unexpected message role."}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"}, {"role": "bot"}])"),
                                {"messages[1].role is \"bot\"", "Unexpected message role."}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"}])", R"({"name": "f"})"),
                                {"tools must be null or a JSON array"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"}])", "[1]"),
                                {"tools[0] must be a JSON object"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": [{"type": "text", "text": ["a"]}]}])"),
                                {"messages[0].content[0].text must be a string"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": 1.5}])"),
                                {"Unexpected content type.", "messages[0].content"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "tool_calls": "f"}])"), {"messages[1].tool_calls must be a JSON array"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "tool_calls": [[]]}])"), {"messages[1].tool_calls[0] must be a JSON object"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "tool_calls": [{"function": null}]}])"),
                                {"messages[1].tool_calls[0].function must be a JSON object"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "tool_calls": [{"name": 7}]}])"), {"messages[1].tool_calls[0].name must be a string"}));
  EXPECT_TRUE(throws_error_with(render(R"([{"role": "user", "content": "Q"},
      {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}])"),
                                {"messages[1].tool_calls[0].function.arguments must be a JSON object"}));
}

// ---- the Python-compatibility helpers

TEST(ChatPython, FloatReprMatchesPython) {
  ASSERT_TRUE(fixture().is_object());
  const Json& reprs = fixture()["float_reprs"];
  ASSERT_GE(reprs.size(), 1000u);
  for (const Json& r : reprs) {
    const std::string text = r.get<std::string>();
    const Json value = Json::parse(text);  // strtod: the double Python's repr names
    ASSERT_TRUE(value.is_number_float()) << text;
    EXPECT_EQ(py::float_repr(value.get<double>()), text);
  }
  EXPECT_EQ(py::float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(py::json_dumps(Json(-std::numeric_limits<double>::infinity())), "-Infinity");
}

TEST(ChatPython, StripMatchesStrStrip) {
  ASSERT_TRUE(fixture().is_object());
  std::vector<bool> space(0x110000, false);
  for (const Json& cp : fixture()["python_whitespace"]) space[cp.get<uint32_t>()] = true;
  auto utf8 = [](char32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else if (cp < 0x800) {
      s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    } else {
      s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F)), s += char(0x80 | ((cp >> 6) & 0x3F)),
          s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    ASSERT_EQ(py::is_space(cp), bool(space[cp])) << "U+" << std::hex << uint32_t(cp);
    const std::string s = utf8(cp);
    ASSERT_EQ(py::strip("x" + s + s + "y" + s + s), space[cp] ? "x" + s + s + "y" : "x" + s + s + "y" + s + s)
        << "U+" << std::hex << uint32_t(cp);
    ASSERT_EQ(py::strip(s + "x" + s), space[cp] ? "x" : s + "x" + s) << "U+" << std::hex << uint32_t(cp);
  }
  EXPECT_EQ(py::strip(" \xff "), "\xff");  // invalid UTF-8 is not whitespace
  EXPECT_EQ(py::strip(""), "");
  EXPECT_EQ(py::lstrip("\n\nab\n", '\n'), "ab\n");
  EXPECT_EQ(py::rstrip("\nab\n\n", '\n'), "\nab");
  EXPECT_EQ(py::rstrip("\n\n", '\n'), "");
}

TEST(ChatPython, StrAndJsonDumps) {
  EXPECT_EQ(py::str(Json(nullptr)), "None");
  EXPECT_EQ(py::str(Json(true)), "True");
  EXPECT_EQ(py::str(Json(false)), "False");
  EXPECT_EQ(py::str(Json(-3)), "-3");
  EXPECT_EQ(py::str(Json(18446744073709551615ull)), "18446744073709551615");
  EXPECT_EQ(py::str(Json(1.0)), "1.0");
  EXPECT_EQ(py::str(Json("as is\n")), "as is\n");
  EXPECT_TRUE(throws_error_with([] { py::str(Json::array()); }, {"not a scalar"}));
  EXPECT_EQ(py::json_dumps(Json::parse(R"({"b": [1, 2.0, "\"\\\/\b\f\n\r\t\u001f\u007f", true, null], "a": {}})")),
            "{\"b\": [1, 2.0, \"\\\"\\\\/\\b\\f\\n\\r\\t\\u001f\x7f\", true, null], \"a\": {}}");
  EXPECT_EQ(py::json_dumps(Json("漢字 🦙 \u2028")), "\"漢字 🦙 \u2028\"");
  EXPECT_EQ(py::json_dumps(Json::array()), "[]");
}

}  // namespace
}  // namespace di
