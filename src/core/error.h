#pragma once
// One exception type for every failure in deltainfer. Its message names the thing that failed
// (file, tensor, field, value) and what was expected versus found.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace di {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws di::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Checks an invariant the caller is responsible for; the message says what was expected.
#define DI_CHECK(cond, ...)              \
  do {                                   \
    if (!(cond)) ::di::fail(__VA_ARGS__); \
  } while (0)

}  // namespace di
