#pragma once
// What a binary knows about how it was built (DESIGN.md section 5).
#include <string>

namespace di {

struct BuildInfo {
  const char* commit;       // git HEAD of the source tree at build time, or "unknown"
  bool dirty;               // tracked files differed from HEAD at build time
  bool cuda;                // CUDA parts compiled in
  const char* cuda_archs;   // CMAKE_CUDA_ARCHITECTURES
  const char* nvcc_version;
  const char* cxx_compiler;
};

const BuildInfo& build_info();

// One-line JSON object with the fields above and the version.
std::string build_info_json();

}  // namespace di
