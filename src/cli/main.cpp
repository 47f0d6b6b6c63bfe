// deltainfer: one binary, one subcommand per job.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"deltainfer: inference for Qwen3.5 hybrid (Gated DeltaNet + gated attention) models"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level may come after the subcommand too
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  const std::vector<di::cli::Command> commands = di::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    di::init_logging(log_level);
    for (const auto& command : commands)
      if (command.app->parsed()) command.run();
  } catch (const di::Error& e) {
    std::fprintf(stderr, "deltainfer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltainfer: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
