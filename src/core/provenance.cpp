#include "core/provenance.h"

#include <nlohmann/json.hpp>

namespace di {

std::string build_info_json() {
  const BuildInfo& b = build_info();
  nlohmann::json j = {{"version", DI_VERSION},  {"commit", b.commit},         {"dirty", b.dirty},
                      {"cuda", b.cuda},         {"cuda_archs", b.cuda_archs}, {"nvcc", b.nvcc_version},
                      {"cxx", b.cxx_compiler}};
  return j.dump();
}

}  // namespace di
