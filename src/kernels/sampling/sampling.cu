// Token sampling on the GPU; the contract is in sampling.h.
//
// One block of 1024 threads per row. Each element of a row gets a distinct 64-bit sort key
//     key = (order-preserving bits of the logit) << id_bits | (id_mask - id)
// so that descending key order is the reference's candidate order (higher logit first, lower id
// first on ties). Every truncation keeps a prefix of that order, that is a set {key >= K}:
//     top-k  K_k    = the k-th largest key;
//     min-p  keep key > K_fail, where K_fail is the largest key whose probability is < min_p * p_max
//            (the reference stops at the first such candidate);
//     top-p  K_p    = the smallest prefix of {key >= K_k, key > K_fail} whose mass reaches
//            top_p * (mass of the top-k set).
// K_k and K_p come from a radix select on the key, 8 bits per level and one pass over the row per
// level, with a shared-memory histogram of counts (top-k) or masses (top-p); a level that isolates
// the answer ends the select early.
//
// Masses: p = exp((logit - max) / T) in float32, turned into 64-bit fixed point (p = 1 is 2^s, with
// s chosen so that no row sum can overflow) and summed as integers. Integer sums are exact, so no
// result depends on the order of the additions: the same inputs give the same token on every run.
//
// The draw: u uniform in [0, kept mass) from Philox-4x32-10 (key = seed, counter = step), then the
// token whose interval holds u, walking the kept tokens in a fixed order: by id mod 1024 (the thread
// that reads the token), then by id.
//
// The first pass, for the maximum, is split over a cluster of kRowSplit blocks per row (compute
// capability 9.0 and later; one block per row before), a slice of the row each (a maximum does not
// depend on the order it is taken in); the cluster's rank 0 gathers the
// slices' maxima through distributed shared memory and goes on alone: a greedy row is done there,
// and one block's instructions over a 248K vocabulary took ~40 us where a slice takes a few.
//
// Cost per row: one pass for the maximum (greedy rows stop there), up to ceil(key_bits / 8) passes
// per active select (key_bits = 32 or 16 value bits + 18 id bits for a 248320 vocabulary; fewer when
// the values are distinct), one pass for min-p when top-k is off, one pass for the draw. Every pass
// but the draw's (whose walk fixes which thread reads which token) reads the row in 16-byte vectors.
#include "kernels/sampling/sampling.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace di::sampling {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kRowSplit = 8;  // blocks (a cluster) per row for the maximum: the portable cluster size
constexpr int kLoadsInFlight = 8;  // elements each thread loads before it uses any (latency hiding)
// The same in 16-byte loads, where the order of visits is free: many for the light passes (maxima),
// few where the work per element is heavier (histograms), so that neither spills at 64 registers.
constexpr int kVectorsInFlightLight = 8;
constexpr int kVectorsInFlightHeavy = 2;
// A slice of a 248K row for the maximum (kRowSplit below) is about 3,900 vectors: one round of 4.
constexpr int kVectorsInFlightSlice = 4;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
// Many lanes of a warp fall into the same bin (logits cluster), and same-address shared atomics
// serialise. Each lane therefore adds into copy (lane % copies) of the histogram; the row of a copy
// is padded by one word so that the copies of one bin sit in different banks.
constexpr int kWeightCopies = 16;
constexpr int kCountCopies = 8;
constexpr int kBinStride = kBins + 1;
constexpr unsigned kFullWarp = 0xffffffffu;

using u64 = unsigned long long;  // the type of the 64-bit atomics and shuffles

// ---- the elements of a row ------------------------------------------------------------------

template <typename Logit>
struct LogitFormat;

template <>
struct LogitFormat<float> {
  static constexpr int kValueBits = 32;
  __device__ static float to_float(float x) { return x; }
  __device__ static float element(const uint4& v, int e) { return __uint_as_float((&v.x)[e]); }
};

// bf16 is read as its raw bits: the top half of a float32.
template <>
struct LogitFormat<uint16_t> {
  static constexpr int kValueBits = 16;  // the low 16 bits of the float are always zero
  __device__ static float to_float(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }
  __device__ static float element(const uint4& v, int e) {
    const uint32_t word = (&v.x)[e / 2];
    return __uint_as_float(e % 2 == 0 ? word << 16 : word & 0xffff0000u);
  }
};

// The value the ordering sees: -0 ties with +0 (as the reference's comparisons do); a NaN loses to
// everything, except at id 0, where ref::argmax never replaces it.
__device__ __forceinline__ float canonical_logit(float x, int32_t id) {
  if (x != x) return id == 0 ? INFINITY : -INFINITY;
  return x == 0.0f ? 0.0f : x;
}

// Facts about the row shape, computed once on the host.
struct RowShape {
  int32_t vocab;
  int32_t id_bits;   // bit width of vocab - 1
  uint32_t id_mask;  // 2^id_bits - 1
  float fixed_one;   // fixed-point mass of probability 1
};

template <typename Logit>
struct RowView {
  static constexpr int kValueBits = LogitFormat<Logit>::kValueBits;
  const Logit* logits;
  RowShape shape;

  __device__ int key_bits() const { return kValueBits + shape.id_bits; }  // <= 63

  __device__ uint64_t key(float logit, int32_t id) const {
    const uint32_t bits = __float_as_uint(logit);
    const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // unsigned order = float order
    return (uint64_t(ordered >> (32 - kValueBits)) << shape.id_bits) | (shape.id_mask - uint32_t(id));
  }
  __device__ int32_t id_of(uint64_t key) const { return int32_t(shape.id_mask - uint32_t(key & shape.id_mask)); }

  __device__ float logit(int32_t id) const {
    return canonical_logit(LogitFormat<Logit>::to_float(__ldg(logits + id)), id);
  }

  // Calls fn(id, logit) for every element; the calling thread sees the ids = threadIdx.x mod kThreads.
  template <typename Fn>
  __device__ __forceinline__ void for_each(Fn&& fn) const {
    constexpr int64_t kTile = int64_t(kThreads) * kLoadsInFlight;
    for (int64_t base = 0; base < shape.vocab; base += kTile) {
      Logit raw[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int64_t id = base + u * kThreads + threadIdx.x;
        raw[u] = id < shape.vocab ? __ldg(logits + id) : Logit(0);
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int64_t id = base + u * kThreads + threadIdx.x;
        if (id < shape.vocab) fn(int32_t(id), canonical_logit(LogitFormat<Logit>::to_float(raw[u]), int32_t(id)));
      }
    }
  }

  // The same visits in 16-byte loads, for passes whose result does not depend on which thread sees
  // which element (maxima, integer sums, histograms): a thread takes whole vectors, so a pass costs
  // a few round trips to memory where for_each's 2-byte loads cost ~30 for a 248K vocabulary. The
  // elements before the row's first 16-byte boundary and after its last whole vector go one by one.
  template <int kVectorsInFlight, typename Fn>
  __device__ __forceinline__ void for_each_unordered(Fn&& fn) const {
    for_each_unordered_in<kVectorsInFlight>(0, shape.vocab, fn);
  }
  // The same over the ids [begin, end) only.
  template <int kVectorsInFlight, typename Fn>
  __device__ __forceinline__ void for_each_unordered_in(int64_t begin, int64_t end, Fn&& fn) const {
    constexpr int kPerVector = 16 / int(sizeof(Logit));
    const int64_t misaligned = int64_t(reinterpret_cast<uintptr_t>(logits + begin) % 16) / int64_t(sizeof(Logit));
    const int64_t head = begin + (misaligned == 0 ? 0 : min(int64_t(kPerVector) - misaligned, end - begin));
    const int64_t vectors = (end - head) / kPerVector, tail = head + vectors * kPerVector;
    const uint4* const vec = reinterpret_cast<const uint4*>(logits + head);
    constexpr int64_t kTile = int64_t(kThreads) * kVectorsInFlight;
    for (int64_t base = 0; base < vectors; base += kTile) {
      uint4 raw[kVectorsInFlight];
#pragma unroll
      for (int u = 0; u < kVectorsInFlight; ++u) {
        const int64_t v = base + u * kThreads + threadIdx.x;
        raw[u] = v < vectors ? __ldg(vec + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kVectorsInFlight; ++u) {
        const int64_t v = base + u * kThreads + threadIdx.x;
        if (v >= vectors) continue;
#pragma unroll
        for (int e = 0; e < kPerVector; ++e) {
          const int32_t id = int32_t(head + v * kPerVector + e);
          fn(id, canonical_logit(LogitFormat<Logit>::element(raw[u], e), id));
        }
      }
    }
    for (int64_t j = threadIdx.x; j < (head - begin) + (end - tail); j += kThreads) {
      const int64_t id = j < head - begin ? begin + j : tail + (j - (head - begin));
      fn(int32_t(id), canonical_logit(LogitFormat<Logit>::to_float(__ldg(logits + id)), int32_t(id)));
    }
  }
};

// Unnormalised probabilities relative to the maximum, p = exp((logit - max) / T) <= 1.
struct MassModel {
  float max_logit;
  float temperature;
  float fixed_one;

  __device__ float relative_prob(float logit) const {
    if (logit == max_logit) return 1.0f;  // also makes infinite maxima share the mass evenly
    const float p = expf((logit - max_logit) / temperature);
    return p >= 0.0f ? p : 0.0f;  // NaN (from infinities) counts as no mass
  }
  __device__ uint64_t fixed(float p) const { return __float2ull_rn(p * fixed_one); }
  __device__ uint64_t mass(float logit) const { return fixed(relative_prob(logit)); }
};

// ---- the random draw ------------------------------------------------------------------------

__host__ __device__ inline uint32_t mul_hi32(uint32_t a, uint32_t b) { return uint32_t((uint64_t(a) * b) >> 32); }

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), keyed by
// the seed, counter (step, 0); returns the first 64 of its 128 output bits.
__host__ __device__ inline uint64_t philox_bits(uint64_t seed, uint64_t step) {
  uint32_t c0 = uint32_t(step), c1 = uint32_t(step >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint32_t lo0 = 0xD2511F53u * c0, hi0 = mul_hi32(0xD2511F53u, c0);
    const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = mul_hi32(0xCD9E8D57u, c2);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;  // the key schedule (Weyl sequence of the golden ratio and sqrt(3) - 1)
    k1 += 0xBB67AE85u;
  }
  return (uint64_t(c0) << 32) | c1;
}

// ---- block-wide reductions ------------------------------------------------------------------
// Each is called by all threads of the block; each ends with a barrier, so the scratch can be
// reused at once.

struct BlockScratch {
  u64 warp_values[kWarps];
  u64 result;
};

__device__ __forceinline__ u64 warp_inclusive_sum(u64 x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const u64 y = __shfl_up_sync(kFullWarp, x, d);
    if (lane >= d) x += y;
  }
  return x;
}

// Returns the sum of x over the threads before this one; `total` gets the sum over all threads.
__device__ u64 block_exclusive_sum(u64 x, u64& total, BlockScratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u64 inclusive = warp_inclusive_sum(x);
  if (lane == 31) s.warp_values[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const u64 w = s.warp_values[lane];
    const u64 w_inclusive = warp_inclusive_sum(w);
    s.warp_values[lane] = w_inclusive - w;
    if (lane == 31) s.result = w_inclusive;
  }
  __syncthreads();
  const u64 exclusive = s.warp_values[warp] + inclusive - x;
  total = s.result;
  __syncthreads();
  return exclusive;
}

__device__ u64 block_sum(u64 x, BlockScratch& s) {
  u64 total;
  block_exclusive_sum(x, total, s);
  return total;
}

__device__ u64 block_max(u64 x, BlockScratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const u64 y = __shfl_xor_sync(kFullWarp, x, d);
    x = y > x ? y : x;
  }
  if (lane == 0) s.warp_values[warp] = x;
  __syncthreads();
  if (warp == 0) {
    u64 w = s.warp_values[lane];
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
      const u64 y = __shfl_xor_sync(kFullWarp, w, d);
      w = y > w ? y : w;
    }
    if (lane == 0) s.result = w;
  }
  __syncthreads();
  const u64 result = s.result;
  __syncthreads();
  return result;
}

// ---- radix select ---------------------------------------------------------------------------

enum class Weight { kCount, kMass };

struct BinChoice {
  uint32_t digit;
  uint32_t bin_count;  // elements in the bin
  u64 weight_above;    // weight of the higher bins of this level
  u64 bin_weight;
  bool found;
};

struct SharedState {
  u64 weight[kWeightCopies][kBinStride];     // per bin: elements (kCount) or mass (kMass)
  uint32_t count[kCountCopies][kBinStride];  // per bin: elements (kMass only)
  BlockScratch scratch;
  BinChoice choice;
  int32_t pick_thread;
  u64 pick_offset;
  int32_t picked_id;
};

// Histogram of the next digit, bits [lo, hi) of the key, over the elements of the set whose keys
// start with `prefix` (the bits above hi). On the first pass, on_element(id, logit, key) also runs
// on every element, so that other per-row sums can share the pass.
template <Weight kWeight, typename Logit, typename InSet, typename OnElement>
__device__ void build_histogram(const RowView<Logit>& row, const MassModel& model, uint64_t prefix, int hi, int lo,
                                const InSet& in_set, bool first, OnElement& on_element, SharedState& sh) {
  for (int i = threadIdx.x; i < kWeightCopies * kBinStride; i += kThreads) (&sh.weight[0][0])[i] = 0;
  if constexpr (kWeight == Weight::kMass)
    for (int i = threadIdx.x; i < kCountCopies * kBinStride; i += kThreads) (&sh.count[0][0])[i] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  u64* my_weight = sh.weight[lane % kWeightCopies];
  uint32_t* my_count = sh.count[lane % kCountCopies];
  const uint32_t digit_mask = (1u << (hi - lo)) - 1u;
  row.template for_each_unordered<kVectorsInFlightHeavy>([&](int32_t id, float logit) {
    const uint64_t key = row.key(logit, id);
    if (first) on_element(id, logit, key);
    if ((key >> hi) != prefix || !in_set(key)) return;
    const uint32_t digit = uint32_t(key >> lo) & digit_mask;
    if constexpr (kWeight == Weight::kMass) {
      atomicAdd(&my_weight[digit], u64(model.mass(logit)));
      atomicAdd(&my_count[digit], 1u);
    } else {
      atomicAdd(&my_weight[digit], u64(1));
    }
  });
  __syncthreads();
}

// The bin where the weight, accumulated from the highest bin down, first reaches `need`
// (found = false when the whole level weighs less than that).
template <Weight kWeight>
__device__ BinChoice choose_bin(SharedState& sh, u64 need) {
  const int t = threadIdx.x;
  u64 weight = 0;
  uint32_t count = 0, digit = 0;
  if (t < kBins) {
    digit = uint32_t(kBins - 1 - t);  // thread order = descending digits = descending keys
    for (int c = 0; c < kWeightCopies; ++c) weight += sh.weight[c][digit];
    if constexpr (kWeight == Weight::kMass) {
      for (int c = 0; c < kCountCopies; ++c) count += sh.count[c][digit];
    } else {
      count = uint32_t(weight);
    }
  }
  if (t == 0) sh.choice.found = false;
  u64 total;
  const u64 above = block_exclusive_sum(weight, total, sh.scratch);
  if (weight > 0 && above < need && need <= above + weight) sh.choice = BinChoice{digit, count, above, weight, true};
  __syncthreads();
  return sh.choice;
}

struct Selection {
  bool found;
  uint64_t threshold;
};

// The largest threshold K such that the elements of the set with key >= K weigh at least `need`
// (1 per element for kCount, the element's mass for kMass), i.e. the key of the element at which the
// weight summed in descending key order first reaches `need`. `need_after_first_pass()` (called by
// every thread, after the first pass) supplies `need`. When the top element (`top_key`, weighing
// `top_weight`) already reaches it, no further pass runs.
template <Weight kWeight, typename Logit, typename InSet, typename OnElement, typename NeedFn>
__device__ Selection radix_select(const RowView<Logit>& row, const MassModel& model, const InSet& in_set,
                                  OnElement on_first_pass, NeedFn need_after_first_pass, uint64_t top_key,
                                  u64 top_weight, SharedState& sh) {
  uint64_t prefix = 0;
  int hi = row.key_bits();
  u64 need = 0;
  for (bool first = true;; first = false) {
    const int lo = hi > kDigitBits ? hi - kDigitBits : 0;
    build_histogram<kWeight>(row, model, prefix, hi, lo, in_set, first, on_first_pass, sh);
    if (first) {
      need = need_after_first_pass();
      if (in_set(top_key) && need <= top_weight) return {true, top_key};
    }
    const BinChoice choice = choose_bin<kWeight>(sh, need);
    if (!choice.found) return {false, 0};
    need -= choice.weight_above;
    prefix = (prefix << (hi - lo)) | choice.digit;
    // A bin of counts that is needed whole ends the select; a bin of masses only when it holds one
    // element (needing it whole does not make its zero-mass tail part of the minimal prefix).
    const bool bin_decides = kWeight == Weight::kCount ? choice.bin_weight == need : choice.bin_count == 1;
    if (lo == 0 || bin_decides) return {true, prefix << lo};
    hi = lo;
  }
}

// ---- the kernel -----------------------------------------------------------------------------

// kSplit 1: a block per row. kSplit = kRowSplit: a cluster of kRowSplit blocks per row (grid.x =
// rows * kRowSplit; compute capability 9.0 and later); block rank r of a cluster takes the r-th
// slice of the row for the maximum, and rank 0 the rest.
template <typename Logit, int kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(const Logit* __restrict__ logits, RowShape shape, const SamplingRow* __restrict__ row_params,
                       int32_t* __restrict__ out_tokens) {
  __shared__ SharedState sh;
  __shared__ u64 slice_max[kSplit];  // rank 0's: the maximum key of every slice
  // The row, read from blockIdx where used: a register held through the selects would spill.
  const auto row_index = [] { return int32_t(blockIdx.x / kSplit); };
  const int32_t rank = int32_t(blockIdx.x % kSplit);
  const RowView<Logit> row{logits + size_t(row_index()) * size_t(shape.vocab), shape};
  // Rank 0's shared memory takes the others' stores only once every block of the cluster runs.
  if constexpr (kSplit > 1) kernels::cluster_arrive_relaxed();

  // The first candidate: the highest logit, the lowest id among equals. Greedy rows stop here.
  u64 local_max = 0;  // every key is > 0
  const auto take_max = [&](int32_t id, float logit) {
    const u64 key = row.key(logit, id);
    local_max = key > local_max ? key : local_max;
  };
  if constexpr (kSplit > 1) {
    // Slices of whole 16-byte vectors (from the row's start), the last one shorter.
    constexpr int64_t kAlign = 16 / int64_t(sizeof(Logit));
    const int64_t slice = (int64_t(shape.vocab) + kSplit * kAlign - 1) / (kSplit * kAlign) * kAlign;
    const int64_t begin = min(int64_t(shape.vocab), rank * slice), end = min(int64_t(shape.vocab), begin + slice);
    row.template for_each_unordered_in<kVectorsInFlightSlice>(begin, end, take_max);
  } else {
    row.template for_each_unordered<kVectorsInFlightLight>(take_max);
  }
  uint64_t max_key = block_max(local_max, sh.scratch);
  if constexpr (kSplit > 1) {
    kernels::cluster_wait();
    if (threadIdx.x == 0) *kernels::in_cluster_block(&slice_max[rank], 0) = max_key;
    kernels::cluster_arrive_release();
    kernels::cluster_wait();
    if (rank != 0) return;
#pragma unroll
    for (int r = 0; r < kSplit; ++r) max_key = slice_max[r] > max_key ? slice_max[r] : max_key;
  }
  const SamplingRow params = row_params[row_index()];
  const int32_t top_id = row.id_of(max_key);
  if (!(params.temperature > 0.0f)) {
    if (threadIdx.x == 0) out_tokens[row_index()] = top_id;
    return;
  }
  const MassModel model{row.logit(top_id), params.temperature, shape.fixed_one};
  const u64 top_mass = model.fixed(1.0f);

  // Top-k keeps key >= top_k_key; min-p keeps key > min_p_fail_key (0 when nothing fails).
  const bool use_top_k = params.top_k > 0 && params.top_k < shape.vocab;
  const bool use_min_p = params.min_p > 0.0f;
  uint64_t top_k_key = 0, min_p_fail_key = 0;
  u64 local_fail = 0;
  auto note_min_p_failure = [&](int32_t, float logit, uint64_t key) {
    if (use_min_p && key > local_fail && model.relative_prob(logit) < params.min_p) local_fail = key;
  };
  if (use_top_k && params.top_k > 1) {
    const auto everything = [](uint64_t) { return true; };
    const auto k = [&] { return u64(params.top_k); };
    top_k_key = radix_select<Weight::kCount>(row, model, everything, note_min_p_failure, k, max_key, 1, sh).threshold;
  } else {
    if (use_top_k) top_k_key = max_key;  // top_k == 1
    if (use_min_p)
      row.template for_each_unordered<kVectorsInFlightHeavy>(
          [&](int32_t id, float logit) { note_min_p_failure(id, logit, row.key(logit, id)); });
  }
  if (use_min_p) min_p_fail_key = block_max(local_fail, sh.scratch);

  // Top-p over the candidates that survive top-k and min-p, against top_p * (mass of the top-k set).
  const auto candidate = [&](uint64_t key) { return key >= top_k_key && key > min_p_fail_key; };
  uint64_t top_p_key = 0;
  if (params.top_p < 1.0f) {
    u64 local_top_k_mass = 0;
    auto add_top_k_mass = [&](int32_t, float logit, uint64_t key) {
      if (key >= top_k_key) local_top_k_mass += model.mass(logit);
    };
    const auto target = [&] {
      const double mass = double(block_sum(local_top_k_mass, sh.scratch));
      const double t = ceil(double(params.top_p) * mass);  // integer masses reach top_p * Z iff they reach its ceiling
      return t < 1.0 ? u64(1) : u64(t);
    };
    const Selection s =
        radix_select<Weight::kMass>(row, model, candidate, add_top_k_mass, target, max_key, top_mass, sh);
    if (s.found) top_p_key = s.threshold;
  }

  // The draw over the kept set.
  const uint64_t keep_from = top_k_key > top_p_key ? top_k_key : top_p_key;
  if (keep_from >= max_key) {  // only the first candidate is kept
    if (threadIdx.x == 0) out_tokens[row_index()] = top_id;
    return;
  }
  const auto kept = [&](uint64_t key) { return key >= keep_from && key > min_p_fail_key; };
  u64 own_mass = 0;
  row.for_each([&](int32_t id, float logit) {
    if (kept(row.key(logit, id))) own_mass += model.mass(logit);
  });
  u64 kept_mass;
  const u64 mass_before = block_exclusive_sum(own_mass, kept_mass, sh.scratch);
  if (kept_mass == 0) {  // only with invalid parameters or infinite logits
    if (threadIdx.x == 0) out_tokens[row_index()] = top_id;
    return;
  }
  const u64 u = __umul64hi(philox_bits(params.seed, params.step), kept_mass);  // uniform in [0, kept_mass)
  if (threadIdx.x == 0) sh.picked_id = top_id;
  if (own_mass > 0 && mass_before <= u && u - mass_before < own_mass) {  // exactly one thread
    sh.pick_thread = int32_t(threadIdx.x);
    sh.pick_offset = mass_before;
  }
  __syncthreads();
  // The picking thread's tokens (ids owner, owner + kThreads, ...) in id order, spread over the block.
  const int32_t owner = sh.pick_thread;
  u64 running = sh.pick_offset;
  const int32_t owned = int32_t((int64_t(shape.vocab) - owner + kThreads - 1) / kThreads);
  for (int32_t first = 0; first < owned; first += kThreads) {
    const int32_t j = first + int32_t(threadIdx.x);
    int32_t id = 0;
    u64 mass = 0;
    if (j < owned) {
      id = int32_t(owner + int64_t(j) * kThreads);
      const float logit = row.logit(id);
      if (kept(row.key(logit, id))) mass = model.mass(logit);
    }
    u64 chunk_mass;
    const u64 before = running + block_exclusive_sum(mass, chunk_mass, sh.scratch);
    if (mass > 0 && before <= u && u - before < mass) sh.picked_id = id;
    running += chunk_mass;
  }
  __syncthreads();
  if (threadIdx.x == 0) out_tokens[row_index()] = sh.picked_id;
}

RowShape row_shape(int32_t vocab) {
  RowShape shape{};
  shape.vocab = vocab;
  shape.id_bits = int32_t(std::bit_width(uint32_t(vocab - 1)));
  shape.id_mask = uint32_t((uint64_t(1) << shape.id_bits) - 1);
  // vocab * 2^fixed_shift < 2^62: no sum of masses can overflow 64 bits.
  const int fixed_shift = 62 - int(std::bit_width(uint32_t(vocab)));
  shape.fixed_one = std::ldexp(1.0f, fixed_shift);
  return shape;
}

}  // namespace

size_t sample_workspace_bytes(int32_t rows, int32_t vocab) {
  (void)rows;
  (void)vocab;
  return 0;
}

cudaError_t launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.rows > INT32_MAX / kRowSplit || p.vocab <= 0 || p.logits == nullptr ||
      p.row_params == nullptr || p.out_tokens == nullptr)
    return cudaErrorInvalidValue;
  const size_t workspace = sample_workspace_bytes(p.rows, p.vocab);
  if (p.workspace_bytes < workspace || (workspace > 0 && p.workspace == nullptr)) return cudaErrorInvalidValue;
  const RowShape shape = row_shape(p.vocab);
  // A cluster per row where the device has clusters, else a block per row.
  const bool split = kernels::clusters_supported();
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {unsigned(kRowSplit), 1, 1};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(p.rows) * (split ? kRowSplit : 1));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = split ? 1 : 0;
  const auto launch = [&](auto kernel, auto logits) {
    return cudaLaunchKernelEx(&config, kernel, logits, shape, p.row_params, p.out_tokens);
  };
  if (p.logits_bf16) {
    const auto* logits = static_cast<const uint16_t*>(p.logits);
    return split ? launch(sample_rows_kernel<uint16_t, kRowSplit>, logits) : launch(sample_rows_kernel<uint16_t, 1>, logits);
  }
  const auto* logits = static_cast<const float*>(p.logits);
  return split ? launch(sample_rows_kernel<float, kRowSplit>, logits) : launch(sample_rows_kernel<float, 1>, logits);
}

}  // namespace di::sampling
