#include "cli/commands.h"

namespace di::cli {

std::vector<Command> register_commands(CLI::App& app) {
  return {add_generate(app), add_chat(app),         add_score(app),          add_tokenize(app),
          add_detokenize(app), add_inspect(app), add_make_tiny_model(app), add_version(app),
          add_bench_offline(app), add_serve(app),   add_artifacts_verify(app), add_bench_ab(app)};
}

}  // namespace di::cli
