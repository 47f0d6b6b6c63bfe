// The two state layouts of include/deltainfer/gdn.h give bit-identical results, and the conversion
// kernels between them (gdn/state_layout.h) are exact:
//   - GdnStateLayout, GdnStateLayoutParams: KV -> VK matches a host transpose and KV -> VK -> KV is the identity, bit for
//     bit, for odd K x V (96 x 80, 1 x 33, ...) over several matrices; same-layout conversion is a
//     copy; the params errors (in place, overlap, bad sizes) and the launcher's refusal.
//   - GdnLayoutEquivalence: every backend of prefill_backends() that serves the case runs a batch
//     (lengths 1, 63, 65, 130, 200; random initial pool; state_indices permuting slots of a larger
//     pool) in [H,K,V], and again in [H,V,K] on the converted initial pool; the final pool converted
//     back and the output must equal the [H,K,V] run's bit for bit. A backend's math may not depend on
//     the layout (only its state loads and stores do), so any difference is a bug in the backend.
// Inputs are fresh random numbers each run; DI_TEST_SEED replays a failure.
#include "gdn/state_layout.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "gdn/dispatch.h"
#include "gpu/gdn_test_support.h"
#include "gpu/gpu_test.h"
#include "support/seed.h"

namespace di::gdn {
namespace {

using di::testing::seed_trace;
using namespace di::gdn::testing;

class GdnStateLayout : public di::testing::SeededGpuTest<std::mt19937> {};

// ---------------------------------------------------------------------------------------------
// Helpers.

// The bits of a float vector, so that NaN payloads and -0 compare exactly.
std::vector<uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<uint32_t> b(x.size());
  std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
  return b;
}

// Empty when a and b are equal bit for bit; otherwise the first differing index (as `where(i)` names
// it), both values' bits, and how many elements differ.
template <typename Bits, typename Where>
std::string bitwise_difference(const std::vector<Bits>& a, const std::vector<Bits>& b, const char* a_name,
                               const char* b_name, Where where) {
  if (a.size() != b.size()) return fmt::format("sizes differ: {} {}, {} {}", a_name, a.size(), b_name, b.size());
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(Bits)) == 0) return {};
  size_t first = 0;
  while (a[first] == b[first]) ++first;
  const size_t count = a.size() - size_t(std::inner_product(a.begin(), a.end(), b.begin(), size_t(0), std::plus<>(),
                                                            [](Bits x, Bits y) { return size_t(x == y); }));
  return fmt::format("first difference at index {} ({}): {} 0x{:0{}x}, {} 0x{:0{}x}; {} of {} elements differ", first,
                     where(first), a_name, uint64_t(a[first]), 2 * sizeof(Bits), b_name, uint64_t(b[first]),
                     2 * sizeof(Bits), count, a.size());
}

// A pool of n row-major [rows, cols] matrices, transposed to [cols, rows] each.
std::vector<float> host_transpose(const std::vector<float>& x, int64_t n, int rows, int cols) {
  std::vector<float> t(x.size());
  for (int64_t m = 0; m < n; ++m)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        t[size_t((m * cols + c) * rows + r)] = x[size_t((m * rows + r) * cols + c)];
  return t;
}

// Converts a device pool into `dst` (poisoned first, so an element the kernel skips shows up).
void convert(const cuda::DeviceBuffer<float>& src, cuda::DeviceBuffer<float>& dst, int64_t num_matrices, int k_dim,
             int v_dim, di_gdn_state_layout from, di_gdn_state_layout to, cudaStream_t stream) {
  dst.fill_bytes(0xFF);
  const StateLayoutParams p{src.data(), dst.data(), num_matrices, k_dim, v_dim, from, to};
  ASSERT_EQ(state_layout_params_error(p), "");
  ASSERT_EQ(launch_state_layout_convert(p, stream), cudaSuccess);
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ---------------------------------------------------------------------------------------------
// The conversion kernels.

struct Dims {
  int k, v;
  int64_t matrices;
};

TEST_F(GdnStateLayout, ConversionIsAnExactTranspose) {
  SCOPED_TRACE(seed_trace(seed_));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Dims d : {Dims{96, 80, 7}, Dims{128, 128, 5}, Dims{1, 33, 3}, Dims{33, 1, 4}, Dims{200, 37, 2},
                       Dims{31, 65, 9}}) {
    SCOPED_TRACE(fmt::format("K {} x V {}, {} matrices", d.k, d.v, d.matrices));
    std::vector<float> kv(size_t(d.matrices) * d.k * d.v);
    for (float& x : kv) x = normal(rng_);
    // Values that arithmetic would change: a quiet NaN with a payload, -0, a denormal, infinities.
    const float specials[] = {std::bit_cast<float>(0x7fc12345u), -0.0f, std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
    for (size_t i = 0; i < std::size(specials) && i < kv.size(); ++i) kv[(i * 7919) % kv.size()] = specials[i];
    const std::vector<float> want_vk = host_transpose(kv, d.matrices, d.k, d.v);

    cuda::DeviceBuffer<float> kv_dev{std::span<const float>(kv)}, vk_dev(kv.size()), back_dev(kv.size()),
        copy_dev(kv.size());
    auto where = [&](size_t i) {
      return fmt::format("matrix {}, element {}", i / (size_t(d.k) * d.v), i % (size_t(d.k) * d.v));
    };
    convert(kv_dev, vk_dev, d.matrices, d.k, d.v, DI_GDN_STATE_KV, DI_GDN_STATE_VK, stream_);
    const std::string vk_diff =
        bitwise_difference(bits_of(vk_dev.download()), bits_of(want_vk), "kernel", "host transpose", where);
    EXPECT_EQ(vk_diff, "") << "KV -> VK";
    convert(vk_dev, back_dev, d.matrices, d.k, d.v, DI_GDN_STATE_VK, DI_GDN_STATE_KV, stream_);
    EXPECT_EQ(bitwise_difference(bits_of(back_dev.download()), bits_of(kv), "round trip", "original", where), "")
        << "KV -> VK -> KV";
    for (di_gdn_state_layout layout : kLayouts) {
      convert(kv_dev, copy_dev, d.matrices, d.k, d.v, layout, layout, stream_);
      EXPECT_EQ(bitwise_difference(bits_of(copy_dev.download()), bits_of(kv), "copy", "original", where), "")
          << layout_str(layout) << " -> " << layout_str(layout);
    }
  }
}

// More matrices than one grid's z extent (65535): the kernel's stride over matrices.
TEST_F(GdnStateLayout, ConversionCoversMoreMatricesThanTheGrid) {
  SCOPED_TRACE(seed_trace(seed_));
  const int64_t n = 70000;
  const int k = 3, v = 5;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> kv(size_t(n) * k * v);
  for (float& x : kv) x = uniform(rng_);
  cuda::DeviceBuffer<float> kv_dev{std::span<const float>(kv)}, vk_dev(kv.size());
  convert(kv_dev, vk_dev, n, k, v, DI_GDN_STATE_KV, DI_GDN_STATE_VK, stream_);
  EXPECT_EQ(bitwise_difference(bits_of(vk_dev.download()), bits_of(host_transpose(kv, n, k, v)), "kernel",
                               "host transpose", [](size_t i) { return fmt::format("matrix {}", i / 15); }),
            "");
}

// Params checks happen on the host before any CUDA call: no GPU needed.
TEST(GdnStateLayoutParams, ErrorsNameTheProblem) {
  alignas(16) static float pool[2][4 * 6];
  const StateLayoutParams ok{pool[0], pool[1], 1, 4, 6, DI_GDN_STATE_KV, DI_GDN_STATE_VK};
  EXPECT_EQ(state_layout_params_error(ok), "");
  auto error_of = [&](void (*mutate)(StateLayoutParams&)) {
    StateLayoutParams p = ok;
    mutate(p);
    EXPECT_EQ(launch_state_layout_convert(p, nullptr), cudaErrorInvalidValue);
    return state_layout_params_error(p);
  };
  struct Case {
    void (*mutate)(StateLayoutParams&);
    const char* says;
  };
  const Case cases[] = {
      {[](StateLayoutParams& p) { p.dst = const_cast<float*>(p.src); }, "out of place"},
      {[](StateLayoutParams& p) { p.dst = const_cast<float*>(p.src); }, "in-place conversion is not supported"},
      {[](StateLayoutParams& p) { p.dst = const_cast<float*>(p.src) + 5; }, "overlap"},
      {[](StateLayoutParams& p) { p.from = di_gdn_state_layout(3); }, "state layouts from 3"},
      {[](StateLayoutParams& p) { p.to = di_gdn_state_layout(2); }, "to 2"},
      {[](StateLayoutParams& p) { p.k_dim = 0; }, "k_dim 0"},
      {[](StateLayoutParams& p) { p.v_dim = -2; }, "v_dim -2"},
      {[](StateLayoutParams& p) { p.num_matrices = -1; }, "num_matrices -1 is negative"},
      {[](StateLayoutParams& p) { p.src = nullptr; }, "src and dst must be set"},
      {[](StateLayoutParams& p) { p.dst = nullptr; }, "src and dst must be set"},
      {[](StateLayoutParams& p) {
         p.dst = reinterpret_cast<float*>(reinterpret_cast<char*>(p.dst) + 2);
       },
       "4-byte aligned"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.mutate);
    EXPECT_NE(e.find(c.says), std::string::npos) << "expected '" << c.says << "' in: " << e;
  }
  // Adjacent pools do not overlap; an empty pool needs no pointers.
  StateLayoutParams adjacent = ok;
  adjacent.dst = const_cast<float*>(ok.src) + 4 * 6;
  EXPECT_EQ(state_layout_params_error(adjacent), "");
  StateLayoutParams empty{nullptr, nullptr, 0, 128, 128, DI_GDN_STATE_VK, DI_GDN_STATE_KV};
  EXPECT_EQ(state_layout_params_error(empty), "");
}

// ---------------------------------------------------------------------------------------------
// Every backend: [H,K,V] and [H,V,K] runs agree bit for bit.

// A batch as the ABI takes it, drawn fresh: q and k rows N(0, 1) L2-normalised and rounded to bf16
// (with DI_GDN_QK_L2NORM they are scaled by a random magnitude instead), v N(0, 1) in bf16,
// g = log U(0.5, 1) with 3% strong decays (g in [-12, -3]), beta = sigmoid(N(0, 1.5)).
struct Batch {
  di_gdn_geometry geometry{};
  std::vector<int32_t> cu_seqlens;
  std::vector<uint16_t> q, k, v;
  std::vector<float> g, beta;
  int num_seqs() const { return int(cu_seqlens.size()) - 1; }
  int64_t total_tokens() const { return cu_seqlens.back(); }
};

Batch make_batch(const di_gdn_geometry& geometry, const std::vector<int>& lengths, bool raw_qk, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Batch b;
  b.geometry = geometry;
  b.cu_seqlens.assign(1, 0);
  for (int len : lengths) b.cu_seqlens.push_back(b.cu_seqlens.back() + len);
  const int64_t T = b.total_tokens(), Hk = geometry.num_k_heads, Hv = geometry.num_v_heads;
  const int K = geometry.k_dim, V = geometry.v_dim;
  auto rows = [&](std::vector<uint16_t>& x) {
    x.resize(size_t(T * Hk * K));
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < T * Hk; ++r) {
      float sum_sq = 0;
      for (float& e : row) e = normal(rng), sum_sq += e * e;
      const float factor = raw_qk ? 0.05f + 30.0f * uniform(rng) : 1.0f / std::sqrt(sum_sq);
      for (int i = 0; i < K; ++i) x[size_t(r * K + i)] = f32_to_bf16(row[size_t(i)] * factor);
    }
  };
  rows(b.q);
  rows(b.k);
  b.v.resize(size_t(T * Hv * V));
  for (auto& x : b.v) x = f32_to_bf16(normal(rng));
  b.g.resize(size_t(T * Hv));
  b.beta.resize(size_t(T * Hv));
  for (int64_t i = 0; i < T * Hv; ++i) {
    const float u = uniform(rng);
    b.g[size_t(i)] = u < 0.03f ? -3.0f - 9.0f * uniform(rng) : std::log(0.5f + 0.5f * uniform(rng));
    b.beta[size_t(i)] = 1.0f / (1.0f + std::exp(-1.5f * normal(rng)));
  }
  return b;
}

struct Outcome {
  std::vector<uint16_t> out;     // bf16 bits [T, Hv, V]
  std::vector<float> final_kv;   // the final pool in [H,K,V] (converted back from [H,V,K] runs)
};

class GdnLayoutEquivalence : public di::testing::SeededGpuTest<std::mt19937> {
 protected:
  // Runs `backend` on the batch in `layout`. initial_kv is the initial pool in [H,K,V]; for [H,V,K]
  // it is converted on the device first. out and a separate final pool are poisoned (NaN) before the
  // run; with in_place the initial pool is updated instead.
  Outcome run(const di_gdn_prefill_backend& backend, const Batch& b, const std::vector<int32_t>& slots,
              const std::vector<float>& initial_kv, int pool_slots, di_gdn_state_layout layout, uint32_t flags,
              bool in_place) {
    const di_gdn_geometry& geo = b.geometry;
    const int64_t matrices = int64_t(pool_slots) * geo.num_v_heads;
    cuda::DeviceBuffer<int32_t> cu_seqlens{std::span<const int32_t>(b.cu_seqlens)},
        state_indices{std::span<const int32_t>(slots)};
    cuda::DeviceBuffer<uint16_t> q{std::span<const uint16_t>(b.q)}, k{std::span<const uint16_t>(b.k)},
        v{std::span<const uint16_t>(b.v)};
    cuda::DeviceBuffer<float> g{std::span<const float>(b.g)}, beta{std::span<const float>(b.beta)};
    cuda::DeviceBuffer<float> initial_kv_dev{std::span<const float>(initial_kv)}, initial_vk_dev(initial_kv.size());
    if (layout == DI_GDN_STATE_VK)
      convert(initial_kv_dev, initial_vk_dev, matrices, geo.k_dim, geo.v_dim, DI_GDN_STATE_KV, DI_GDN_STATE_VK,
              stream_);
    cuda::DeviceBuffer<float>& initial = layout == DI_GDN_STATE_KV ? initial_kv_dev : initial_vk_dev;
    cuda::DeviceBuffer<float> final_pool(in_place ? 0 : initial_kv.size());
    final_pool.fill_bytes(0xFF);
    cuda::DeviceBuffer<uint16_t> out(size_t(b.total_tokens()) * geo.num_v_heads * geo.v_dim);
    out.fill_bytes(0xFF);
    const di_gdn_prefill_shape shape{geo, b.num_seqs(), b.total_tokens()};
    cuda::DeviceBuffer<uint8_t> scratch(backend.scratch_bytes(&shape));

    di_gdn_prefill_args args{};
    args.abi_version = DI_GDN_ABI_VERSION;
    args.geometry = geo;
    args.state_layout = layout;
    args.num_seqs = b.num_seqs();
    args.total_tokens = b.total_tokens();
    args.scale = float(1.0 / std::sqrt(double(geo.k_dim)));
    args.flags = flags;
    args.cu_seqlens = cu_seqlens.data();
    args.q = q.data(), args.k = k.data(), args.v = v.data();
    args.g = g.data(), args.beta = beta.data();
    args.initial_state = initial.data();
    args.final_state = in_place ? initial.data() : final_pool.data();
    args.state_indices = state_indices.data();
    args.out = out.data();
    const int status = backend.run(&args, scratch.data(), scratch.size(), reinterpret_cast<di_gdn_stream>(stream_));
    EXPECT_EQ(status, DI_GDN_OK) << backend.name << " in " << layout_str(layout);
    sync();

    Outcome o;
    o.out = out.download();
    cuda::DeviceBuffer<float>& final_dev = in_place ? initial : final_pool;
    if (layout == DI_GDN_STATE_KV) {
      o.final_kv = final_dev.download();
    } else {
      cuda::DeviceBuffer<float> back(final_dev.size());
      convert(final_dev, back, matrices, geo.k_dim, geo.v_dim, DI_GDN_STATE_VK, DI_GDN_STATE_KV, stream_);
      o.final_kv = back.download();
    }
    return o;
  }

  std::vector<int32_t> permuted_slots(int n, int pool) {
    std::vector<int32_t> all(static_cast<size_t>(pool));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng_);
    return std::vector<int32_t>(all.begin(), all.begin() + n);
  }
};

TEST_F(GdnLayoutEquivalence, EveryBackendIsBitwiseIdenticalInBothLayouts) {
  SCOPED_TRACE(seed_trace(seed_));
  const cuda::DeviceInfo info = cuda::current_device();
  const di_gdn_device device{info.sm_major, info.sm_minor, info.num_sms, info.shared_memory_per_block_optin};
  const std::vector<int> lengths = {1, 63, 65, 130, 200};
  const di_gdn_geometry geometries[] = {kQwenSmall, {2, 6, kDim, kDim}};
  std::normal_distribution<float> normal(0.0f, 0.25f);
  int runs = 0;
  std::string refused;
  for (const di_gdn_prefill_backend* backend : prefill_backends()) {
    for (const di_gdn_geometry& geo : geometries) {
      const std::string the_case = fmt::format("{}, Hk/Hv/K/V {}/{}/{}/{}", backend->name, geo.num_k_heads,
                                               geo.num_v_heads, geo.k_dim, geo.v_dim);
      const Verdict kv = ask(*backend, geo, device, DI_GDN_STATE_KV), vk = ask(*backend, geo, device, DI_GDN_STATE_VK);
      if (!kv.ok || !vk.ok) {
        refused += fmt::format("\n  {}: {}", the_case, !kv.ok ? kv.reason : vk.reason);
        continue;
      }
      for (uint32_t flags : {0u, uint32_t(DI_GDN_QK_L2NORM)}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(fmt::format("{}, flags {}, {}", the_case, flags, in_place ? "in place" : "separate final pool"));
          const Batch b = make_batch(geo, lengths, (flags & DI_GDN_QK_L2NORM) != 0, rng_);
          const int N = b.num_seqs(), pool_slots = N + 3, Hv = geo.num_v_heads;
          const std::vector<int32_t> slots = permuted_slots(N, pool_slots);
          std::vector<float> initial(size_t(pool_slots) * Hv * geo.k_dim * geo.v_dim);
          for (float& x : initial) x = normal(rng_);

          const Outcome a = run(*backend, b, slots, initial, pool_slots, DI_GDN_STATE_KV, flags, in_place);
          const Outcome c = run(*backend, b, slots, initial, pool_slots, DI_GDN_STATE_VK, flags, in_place);
          ++runs;

          // Both runs wrote every output element and the owned slots (the poison is gone); the others
          // are untouched (the initial values in place, still the NaN poison otherwise).
          EXPECT_TRUE(std::none_of(a.out.begin(), a.out.end(), [](uint16_t x) { return std::isnan(bf16_to_f32(x)); }))
              << "the [H,K,V] run left output elements unwritten";
          const size_t per_slot = size_t(Hv) * geo.k_dim * geo.v_dim;
          std::vector<bool> owned(size_t(pool_slots), false);
          for (int32_t s : slots) owned[size_t(s)] = true;
          for (int s = 0; s < pool_slots; ++s) {
            const auto begin = a.final_kv.begin() + ptrdiff_t(s * per_slot), end = begin + ptrdiff_t(per_slot);
            if (owned[size_t(s)])
              EXPECT_TRUE(std::none_of(begin, end, [](float x) { return std::isnan(x); }))
                  << "slot " << s << ": the [H,K,V] run left final state unwritten";
            else if (in_place)
              EXPECT_TRUE(std::equal(begin, end, initial.begin() + ptrdiff_t(s * per_slot)))
                  << "slot " << s << " belongs to no sequence but changed";
            else
              EXPECT_TRUE(std::all_of(begin, end, [](float x) { return std::isnan(x); }))
                  << "slot " << s << " belongs to no sequence but was written";
          }

          const auto out_where = [&](size_t i) {
            const size_t row = size_t(Hv) * geo.v_dim;
            return fmt::format("token {}, head {}, column {}", i / row, (i % row) / size_t(geo.v_dim),
                               i % size_t(geo.v_dim));
          };
          const auto state_where = [&](size_t i) {
            const size_t mat = size_t(geo.k_dim) * geo.v_dim;
            return fmt::format("slot {}, head {}, key row {}, value column {}", i / per_slot, (i % per_slot) / mat,
                               (i % mat) / size_t(geo.v_dim), i % size_t(geo.v_dim));
          };
          EXPECT_EQ(bitwise_difference(a.out, c.out, "[H,K,V]", "[H,V,K]", out_where), "") << "output bf16 bits";
          EXPECT_EQ(bitwise_difference(bits_of(a.final_kv), bits_of(c.final_kv), "[H,K,V]", "[H,V,K]", state_where),
                    "")
              << "final state float bits";
        }
      }
    }
  }
  if (!refused.empty()) std::printf("cases a backend does not serve on this GPU (not compared):%s\n", refused.c_str());
  if (runs == 0) GTEST_SKIP() << "no backend serves these cases on " << cuda::describe(info);
}

}  // namespace
}  // namespace di::gdn
