// The two exported entry points of libdeltainfer_gdn.so (include/deltainfer/gdn.h). This file is the
// shared library's own source, not part of the static di_gdn layer (src/CMakeLists.txt): the library
// links di_gdn for the backends and exports only the di_gdn_* C symbols.
#include <deltainfer/gdn.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/provenance.h"
#include "gdn/dispatch.h"

// Nothing may throw across the C boundary: a failure gives an empty list or "{}".
extern "C" const di_gdn_prefill_backend* const* di_gdn_prefill_backends(int32_t* count) {
  try {
    const std::vector<const di_gdn_prefill_backend*>& backends = di::gdn::prefill_backends();
    if (count != nullptr) *count = int32_t(backends.size());
    return backends.data();
  } catch (...) {
    if (count != nullptr) *count = 0;
    return nullptr;
  }
}

extern "C" const char* di_gdn_build_info(void) {
  static const std::string info = [] {
    try {
      nlohmann::json j = nlohmann::json::parse(di::build_info_json());
      j["abi_version"] = DI_GDN_ABI_VERSION;
      return j.dump();
    } catch (...) {
      return std::string("{}");
    }
  }();
  return info.c_str();
}
