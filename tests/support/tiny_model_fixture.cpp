#include "support/tiny_model_fixture.h"

#include <unistd.h>

#include <atomic>

namespace di::testing {

std::filesystem::path fresh_temp_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("deltainfer-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

namespace {
struct TinyModelDir {
  std::filesystem::path dir;
  TinyModelDir() : dir(fresh_temp_dir("tiny")) { write_tiny_model(dir, TinyModelOptions{}); }
  ~TinyModelDir() { std::filesystem::remove_all(dir); }
};
}  // namespace

const std::filesystem::path& tiny_model_dir() {
  static TinyModelDir model;
  return model.dir;
}

const LoadedModel& tiny_model() {
  static LoadedModel model = load_model(tiny_model_dir());
  return model;
}

}  // namespace di::testing
