#pragma once
// Checks for the errors deltainfer promises: a di::Error whose message names what was wrong.
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "core/error.h"

namespace di::testing {

// Runs fn and checks that it throws di::Error whose message holds every one of `words`.
template <typename Fn>
::testing::AssertionResult throws_error_with(Fn&& fn, const std::vector<std::string>& words) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& w : words)
      if (msg.find(w) == std::string::npos)
        return ::testing::AssertionFailure() << "error message lacks \"" << w << "\": " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-di::Error exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception was thrown";
}

}  // namespace di::testing
