#pragma once
// A tiny model written once per test binary into a temporary directory, shared by the suites that
// run the engine on it.
#include <filesystem>
#include <memory>

#include "engine/qwen35_model.h"
#include "kernels/cpu_ops.h"
#include "model/tiny_model.h"
#include "model/weights.h"

namespace di::testing {

// The directory of the default tiny model (preset "tiny", seed 0), written on first use.
const std::filesystem::path& tiny_model_dir();

// The tiny model loaded once per test binary.
const LoadedModel& tiny_model();

// The "tiny-wide" preset (eight attention and GDN value heads: every tensor-parallel size up to 8
// splits it), written and loaded once.
const std::filesystem::path& tiny_wide_model_dir();
const LoadedModel& tiny_wide_model();

std::filesystem::path fresh_temp_dir(const std::string& name);

}  // namespace di::testing
