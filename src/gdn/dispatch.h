#pragma once
// Production dispatch of the GDN chunked prefill (DESIGN.md 2.4): an ordered list of backends, the
// first that supports the case serves it, the choice is logged once per model load, and an operator
// may force a backend by name (the rollback path). A forced backend that cannot serve the case is an
// error naming its reason, never a silent fallback.
#include <string>
#include <vector>

#include <deltainfer/gdn.h>

namespace di::gdn {

// The backends compiled into this binary, in production order (fastest first).
const std::vector<const di_gdn_prefill_backend*>& prefill_backends();

// One backend's verdict on a case: ok, or the reason it refuses.
struct Verdict {
  const di_gdn_prefill_backend* backend = nullptr;
  bool ok = false;
  std::string reason;
};
Verdict ask(const di_gdn_prefill_backend& backend, const di_gdn_geometry& geometry, const di_gdn_device& device,
            di_gdn_state_layout layout);

// Picks the backend for a model's geometry on this device. `forced` empty: the first in
// prefill_backends() that supports it (throws, listing every backend's reason, when none does).
// `forced` a name: that backend, or an error (unknown name; or its refusal reason).
const di_gdn_prefill_backend& choose_prefill_backend(const di_gdn_geometry& geometry, const di_gdn_device& device,
                                                     di_gdn_state_layout layout, const std::string& forced);

const char* layout_name(di_gdn_state_layout layout);

}  // namespace di::gdn
