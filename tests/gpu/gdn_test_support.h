#pragma once
// What the GDN kernel tests share: the geometry they run at, and conversions between the two state
// layouts of include/deltainfer/gdn.h and between bf16 bits and floats.
#include <cmath>
#include <vector>

#include <deltainfer/gdn.h>

#include "core/bf16.h"

namespace di::gdn::testing {

constexpr int kDim = 128;  // K == V: what the kernels serve
constexpr di_gdn_geometry kQwenSmall{16, 32, kDim, kDim};
constexpr di_gdn_state_layout kLayouts[] = {DI_GDN_STATE_KV, DI_GDN_STATE_VK};
inline const float kScale = float(1.0 / std::sqrt(double(kDim)));

inline const char* layout_str(di_gdn_state_layout layout) {
  return layout == DI_GDN_STATE_KV ? "[H,K,V]" : "[H,V,K]";
}

// A pool of matrices [n, K, V] (V contiguous) in `layout`, and back.
inline std::vector<float> to_layout(const std::vector<float>& kv, di_gdn_state_layout layout) {
  if (layout == DI_GDN_STATE_KV) return kv;
  std::vector<float> vk(kv.size());
  for (size_t m = 0; m < kv.size() / (kDim * kDim); ++m)
    for (int i = 0; i < kDim; ++i)
      for (int j = 0; j < kDim; ++j) vk[(m * kDim + j) * kDim + i] = kv[(m * kDim + i) * kDim + j];
  return vk;
}
inline std::vector<float> from_layout(const std::vector<float>& x, di_gdn_state_layout layout) {
  if (layout == DI_GDN_STATE_KV) return x;
  std::vector<float> kv(x.size());
  for (size_t m = 0; m < x.size() / (kDim * kDim); ++m)
    for (int i = 0; i < kDim; ++i)
      for (int j = 0; j < kDim; ++j) kv[(m * kDim + i) * kDim + j] = x[(m * kDim + j) * kDim + i];
  return kv;
}

inline std::vector<float> bf16_to_floats(const std::vector<uint16_t>& x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = bf16_to_f32(x[i]);
  return f;
}

}  // namespace di::gdn::testing
