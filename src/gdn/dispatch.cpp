#include "gdn/dispatch.h"

#include <array>

#include "core/error.h"
#include "core/log.h"
#include "gdn/baseline_prefill.h"
#include "gdn/flashinfer_sm90.h"
#include "gdn/sm90_prefill.h"

namespace di::gdn {

const std::vector<const di_gdn_prefill_backend*>& prefill_backends() {
  // flashinfer-sm90 (an external kernel from a pinned bundle) comes last: it serves only when forced
  // or when both of deltainfer's own refuse (docs/models/qwen35/external-gdn-backend.md).
  static const std::vector<const di_gdn_prefill_backend*> backends = {&gdn_sm90_backend(), &gdn_baseline_backend(),
                                                                      &gdn_flashinfer_sm90_backend()};
  return backends;
}

const char* layout_name(di_gdn_state_layout layout) {
  switch (layout) {
    case DI_GDN_STATE_KV: return "[H,K,V]";
    case DI_GDN_STATE_VK: return "[H,V,K]";
  }
  return "unknown";
}

Verdict ask(const di_gdn_prefill_backend& backend, const di_gdn_geometry& geometry, const di_gdn_device& device,
            di_gdn_state_layout layout) {
  std::array<char, 512> reason{};
  const int status = backend.supports(&geometry, &device, layout, reason.data(), reason.size());
  reason.back() = '\0';
  Verdict v{&backend, status == DI_GDN_OK, status == DI_GDN_OK ? "" : std::string(reason.data())};
  if (!v.ok && v.reason.empty()) v.reason = "refused without a reason (status " + std::to_string(status) + ")";
  return v;
}

const di_gdn_prefill_backend& choose_prefill_backend(const di_gdn_geometry& geometry, const di_gdn_device& device,
                                                     di_gdn_state_layout layout, const std::string& forced) {
  const std::string the_case =
      fmt::format("Hk/Hv/K/V {}/{}/{}/{}, state {}, sm_{}{}", geometry.num_k_heads, geometry.num_v_heads,
                  geometry.k_dim, geometry.v_dim, layout_name(layout), device.sm_major, device.sm_minor);
  if (!forced.empty()) {
    for (const di_gdn_prefill_backend* b : prefill_backends()) {
      if (forced != b->name) continue;
      const Verdict v = ask(*b, geometry, device, layout);
      if (!v.ok) fail("GDN prefill backend '{}' was forced but cannot serve {}: {}", forced, the_case, v.reason);
      spdlog::info("GDN prefill backend: {} (forced) for {}", b->name, the_case);
      return *b;
    }
    std::string names;
    for (const di_gdn_prefill_backend* b : prefill_backends()) names += std::string(names.empty() ? "" : ", ") + b->name;
    fail("unknown GDN prefill backend '{}': this build has {}", forced, names);
  }
  std::string refusals;
  for (const di_gdn_prefill_backend* b : prefill_backends()) {
    const Verdict v = ask(*b, geometry, device, layout);
    if (v.ok) {
      spdlog::info("GDN prefill backend: {} for {}{}", b->name, the_case, refusals.empty() ? "" : " (" + refusals + ")");
      return *b;
    }
    refusals += fmt::format("{}{} refused: {}", refusals.empty() ? "" : "; ", b->name, v.reason);
  }
  fail("no GDN prefill backend serves {}: {}", the_case, refusals);
}

}  // namespace di::gdn
