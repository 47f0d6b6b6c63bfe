#pragma once
// The few Python behaviours a chat template's output depends on, reproduced exactly: how
// transformers' `tojson` filter (json.dumps) writes a value, how Jinja prints a scalar (Python
// str()), and what str.strip() removes. The Qwen3.5 chat renderer (chat.h) is built on them.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace di::py {

// repr(float): the shortest digits that round-trip, in fixed notation with at least one decimal
// ("1.0", "0.0001", "1234567890123456.0") when the decimal exponent is in [-4, 16), else in exponent
// notation with a signed exponent of at least two digits ("1e-05", "1e+16", "5e-324"). "inf", "-inf"
// and "nan" for the non-finite values.
std::string float_repr(double value);

// str() of a JSON scalar as Python sees it after json.loads: null -> "None", true -> "True",
// false -> "False", integers in decimal, floats as float_repr, strings unchanged. An array or an
// object is a di::Error (Python would print its repr, which the chat template never needs).
std::string str(const nlohmann::ordered_json& scalar);

// json.dumps(value, ensure_ascii=False), what transformers' `tojson` filter calls: ", " and ": "
// separators, keys in the order they are stored, non-ASCII written as is, only '"', '\\' and the
// control characters U+0000..U+001F escaped ("\n", "\r", "\t", "\b", "\f", else "\u00XX" in lower
// case hex), floats as float_repr ("NaN", "Infinity", "-Infinity" for the non-finite values).
std::string json_dumps(const nlohmann::ordered_json& value);

// Whether a code point is whitespace for Python's str.isspace() / str.strip(): U+0009..U+000D,
// U+001C..U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
bool is_space(char32_t cp);

// str.strip() with no argument (Jinja's `trim` filter) on UTF-8 text: removes the whitespace code
// points above from both ends. Bytes that are not valid UTF-8 count as non-whitespace.
std::string_view strip(std::string_view text);

// str.lstrip(chars) / str.rstrip(chars) for one ASCII character, e.g. lstrip('\n').
std::string_view lstrip(std::string_view text, char c);
std::string_view rstrip(std::string_view text, char c);

}  // namespace di::py
