#pragma once
// Logging goes to stderr through spdlog so that stdout carries only results (tokens, JSON).
#include <spdlog/spdlog.h>

namespace di {
// Sets up the stderr logger; level is one of trace, debug, info, warn, error.
void init_logging(const std::string& level);
}  // namespace di
