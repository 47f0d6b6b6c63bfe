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
  explicit TinyModelDir(const std::string& preset) : dir(fresh_temp_dir(preset)) {
    write_tiny_model(dir, TinyModelOptions{.preset = preset});
  }
  ~TinyModelDir() { std::filesystem::remove_all(dir); }
};
}  // namespace

const std::filesystem::path& tiny_model_dir() {
  static TinyModelDir model("tiny");
  return model.dir;
}

const std::filesystem::path& tiny_wide_model_dir() {
  static TinyModelDir model("tiny-wide");
  return model.dir;
}

const LoadedModel& tiny_wide_model() {
  static LoadedModel model = load_model(tiny_wide_model_dir());
  return model;
}

const LoadedModel& tiny_model() {
  static LoadedModel model = load_model(tiny_model_dir());
  return model;
}

}  // namespace di::testing
