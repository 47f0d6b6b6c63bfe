#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace di::cli {

// A subcommand and what it does once its options are parsed.
struct Command {
  CLI::App* app;
  std::function<void()> run;
};

// Adds every subcommand to the app.
std::vector<Command> register_commands(CLI::App& app);

}  // namespace di::cli
