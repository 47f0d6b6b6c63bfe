#pragma once
#include <CLI/CLI.hpp>

namespace di::cli {
// Adds every subcommand to the app; run_selected runs the one the command line chose.
void register_commands(CLI::App& app);
void run_selected(CLI::App& app);
}  // namespace di::cli
