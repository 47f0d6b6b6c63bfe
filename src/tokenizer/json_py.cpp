#include "tokenizer/json_py.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "core/error.h"

namespace di::py {

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, the same digits Python's repr picks (both choose, among the
  // shortest strings that read back as `value`, the one nearest to it).
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  if (ec != std::errc()) fail("float_repr: std::to_chars failed on {}", value);
  const std::string_view sci(buf, size_t(end - buf));  // e.g. "-1.2345e-05", "1e+16", "0e+00"
  const size_t e = sci.find('e');
  std::string_view mantissa = sci.substr(0, e);
  std::string sign;
  if (mantissa.front() == '-') {
    sign = "-";
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  int exponent = 0;
  const std::string_view exp_text = sci.substr(e + 1);
  std::from_chars(exp_text.data() + (exp_text.front() == '+' ? 1 : 0), exp_text.data() + exp_text.size(), exponent);
  const int ndigits = int(digits.size());
  const int decpt = exponent + 1;  // digits d1 d2 ... mean 0.d1d2... * 10^decpt

  // CPython's float_repr_style 'short': exponent notation when decpt <= -4 or decpt > 16.
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (ndigits > 1) out += "." + digits.substr(1);
    return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (decpt <= 0) return sign + "0." + std::string(size_t(-decpt), '0') + digits;
  if (decpt < ndigits) return sign + digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
  return sign + digits + std::string(size_t(decpt - ndigits), '0') + ".0";
}

std::string str(const nlohmann::ordered_json& scalar) {
  using T = nlohmann::ordered_json::value_t;
  switch (scalar.type()) {
    case T::null: return "None";
    case T::boolean: return scalar.get<bool>() ? "True" : "False";
    case T::number_integer: return std::to_string(scalar.get<int64_t>());
    case T::number_unsigned: return std::to_string(scalar.get<uint64_t>());
    case T::number_float: return float_repr(scalar.get<double>());
    case T::string: return scalar.get<std::string>();
    default: fail("py::str: a JSON {} is not a scalar", scalar.type_name());
  }
}

namespace {

void dump_string(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", unsigned(c));
        else
          out += ch;  // ensure_ascii=False: everything else, non-ASCII included, as is
    }
  }
  out += '"';
}

void dump(const nlohmann::ordered_json& v, std::string& out) {
  using T = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case T::null: out += "null"; return;
    case T::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case T::number_integer:
    case T::number_unsigned: out += str(v); return;
    case T::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += float_repr(d);
      return;
    }
    case T::string: dump_string(v.get_ref<const std::string&>(), out); return;
    case T::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        dump(item, out);
      }
      out += ']';
      return;
    }
    case T::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        dump_string(key, out);
        out += ": ";
        dump(item, out);
      }
      out += '}';
      return;
    }
    default: fail("py::json_dumps: cannot write a JSON {} value", v.type_name());
  }
}

// Decodes the UTF-8 sequence at s[i]; nullopt when it is not a valid, shortest-form sequence.
std::optional<char32_t> decode_at(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  char32_t cp;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return std::nullopt;
  }
  if (i + len > s.size()) return std::nullopt;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  return cp;
}

}  // namespace

std::string json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(value, out);
  return out;
}

bool is_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::string_view strip(std::string_view text) {
  // From the front: whole code points while they are whitespace.
  size_t begin = 0;
  while (begin < text.size()) {
    size_t len = 0;
    const auto cp = decode_at(text, begin, len);
    if (!cp || !is_space(*cp)) break;
    begin += len;
  }
  // From the back: find where the last code point starts (at most 3 continuation bytes back).
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    const auto cp = decode_at(text, start, len);
    if (!cp || start + len != end || !is_space(*cp)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::string_view lstrip(std::string_view text, char c) {
  const size_t begin = text.find_first_not_of(c);
  return text.substr(begin == std::string_view::npos ? text.size() : begin);
}

std::string_view rstrip(std::string_view text, char c) {
  const size_t last = text.find_last_not_of(c);
  return text.substr(0, last == std::string_view::npos ? 0 : last + 1);
}

}  // namespace di::py
