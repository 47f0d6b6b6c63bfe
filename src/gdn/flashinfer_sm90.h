#pragma once
// "flashinfer-sm90": FlashInfer's SM90 GDN chunked prefill (a CuTe-DSL kernel), compiled ahead of
// time by tools/artifacts/flashinfer_gdn_sm90 into a bundle that this backend loads at run time,
// after checking every file against the SHA-256 pinned in gdn/artifact_bundle.cpp. No Python, no JIT.
// It implements the C ABI of include/deltainfer/gdn.h and serves:
//   k_dim == v_dim == 128, Hv % Hk == 0, both state layouts, compute capability 9.0 exactly,
//   when the bundle named by the environment variable DI_GDN_ARTIFACTS (the bundle's directory) is
//   present, exactly the pinned one, and loads on this machine.
// supports() names the reason otherwise. Scratch (scratch_bytes()): exp(g), the slot lists, one TMA
// descriptor per SM and L2-normalised copies of q and k. Beyond the ABI's rules, run() requires q, k,
// v, out and the state pools 16-byte aligned.
// Plain C++ header (no CUDA syntax).
#include <string>

#include <deltainfer/gdn.h>

namespace di::gdn {

const di_gdn_prefill_backend& gdn_flashinfer_sm90_backend();

// Where the backend looks for its bundle ($DI_GDN_ARTIFACTS; empty when unset).
std::string flashinfer_sm90_bundle_dir();

}  // namespace di::gdn
