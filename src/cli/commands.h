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

// One per subcommand (generate.cpp, score.cpp, tokenize.cpp, model_tools.cpp, bench_offline.cpp,
// serve.cpp, model_tools.cpp).
Command add_generate(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_score(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_detokenize(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_make_tiny_model(CLI::App& app);
Command add_version(CLI::App& app);
Command add_bench_offline(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_artifacts_verify(CLI::App& app);
Command add_bench_ab(CLI::App& app);

}  // namespace di::cli
