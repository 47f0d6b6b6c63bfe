// GPU full attention over a paged KV cache (kernels/attention/attention.h) against the CPU reference
// ref::causal_attention in float32, on the same bf16 inputs:
//   - KV append writes exactly the expected cache bytes; untouched rows and blocks keep their
//     poison, padding tokens and positions outside the table write nothing;
//   - prefill: single sequences of 1, 2, 63, 64, 65, 127, 128 and 1000 queries from an empty cache;
//     chunked prefill (queries after n_past cached tokens); variable-length batches mixing those
//     (and an empty sequence); GQA 16/4 and 4/2, MHA 8/8; block sizes 16, 32 and 64. The new k/v
//     rows go in through launch_kv_append first, and the cache is checked bit for bit after it;
//   - decode: batches 1, 3 and 64 with kv lengths 1, 2, 500 and 5000, at split counts 1, 2, 3, 8,
//     33 and the planner's, each against the reference (so all agree up to float32 reordering);
//     every heads-per-CTA instance (groups 1, 2, 4, 6, 8, 16);
//   - prefill and decode captured in a CUDA graph give the same bits as direct launches;
//   - host side (runs without a GPU): the planner's tiles cover every query once, in decreasing
//     work; the split count stays in range; the launchers reject unsupported sizes.
// Every physical block comes from a shuffled pool, so a sequence's blocks are not contiguous, and
// block-table entries past a sequence's blocks are -1 (a read through one would fault). Cache rows
// nobody wrote, outputs and the decode workspace are poisoned with NaN before each run. Inputs are
// fresh random numbers each run; the seed is in every failure's trace (DI_TEST_SEED replays it).
//
// Tolerances (tests/support/tolerance.h): prefill rounds the softmax weights to bf16 for the tensor
// cores, kBf16AttentionP (atol scaled by max|v|); decode stays in float32 until the output,
// kBf16AfterF32Reorder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/cuda.h"
#include "core/error.h"
#include "gpu/gpu_test.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/ref.h"
#include "kernels/numerics.h"
#include "support/seed.h"
#include "support/tolerance.h"

namespace di::attention {
namespace {

using cuda::DeviceBuffer;
using di::testing::all_close;
using di::testing::fresh_seed;
using di::testing::kBf16AfterF32Reorder;
using di::testing::kBf16AttentionP;
using di::testing::seed_trace;
using di::testing::Tolerance;

constexpr int kD = kHeadDim;
constexpr uint16_t kPoisonBf16 = 0xFFFF;  // a NaN
const double kScale = 1.0 / std::sqrt(double(kD));

// A tolerance row whose atol is given per unit of some size (see tolerance.h), scaled to that size.
Tolerance scale_atol(Tolerance t, double factor) { return {t.atol * factor, t.rtol, t.name}; }

std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float bound) {
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

std::vector<float> to_floats(const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_f32(bits[i]);
  return f;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  return DeviceBuffer<T>(std::span<const T>(host));
}

// Bitwise equality of two bf16 images, reporting the count and the first differing elements.
::testing::AssertionResult same_bits(const std::vector<uint16_t>& actual, const std::vector<uint16_t>& expected,
                                     const std::string& what) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << what << ": size " << actual.size() << " vs " << expected.size();
  int64_t differ = 0;
  std::string first;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i]) continue;
    if (++differ <= 5)
      first += " [" + std::to_string(i) + "] " + std::to_string(actual[i]) + " vs " + std::to_string(expected[i]) + ";";
  }
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << differ << " of " << actual.size() << " elements differ;"
                                       << first;
}

// Host image of one layer's paged cache. Each sequence takes its blocks from a shuffled pool of
// physical blocks (so they are not contiguous); a few spare blocks belong to nobody.
struct HostCache {
  int block_size = 0, num_kv_heads = 0, max_blocks_per_seq = 0, num_blocks = 0;
  std::vector<uint16_t> k, v;        // bf16 [num_blocks, block_size, num_kv_heads, kD]; poison where unwritten
  std::vector<int32_t> block_table;  // [num_seqs, max_blocks_per_seq]; -1 past each sequence's blocks

  HostCache(std::span<const int32_t> capacity, int block_size_, int num_kv_heads_, std::mt19937& rng)
      : block_size(block_size_), num_kv_heads(num_kv_heads_) {
    constexpr int kSpareBlocks = 3;
    std::vector<int> blocks_of(capacity.size());
    for (size_t s = 0; s < capacity.size(); ++s) blocks_of[s] = (capacity[s] + block_size - 1) / block_size;
    // One column more than the longest sequence needs, so every row ends in -1 entries.
    max_blocks_per_seq = 1 + (blocks_of.empty() ? 0 : *std::max_element(blocks_of.begin(), blocks_of.end()));
    num_blocks = std::accumulate(blocks_of.begin(), blocks_of.end(), 0) + kSpareBlocks;
    std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    block_table.assign(capacity.size() * size_t(max_blocks_per_seq), -1);
    size_t next = 0;
    for (size_t s = 0; s < capacity.size(); ++s)
      for (int b = 0; b < blocks_of[s]; ++b) block_table[s * max_blocks_per_seq + b] = pool[next++];
    k.assign(size_t(num_blocks) * block_size * row_elems(), kPoisonBf16);
    v = k;
  }

  int64_t row_elems() const { return int64_t(num_kv_heads) * kD; }  // one position: [num_kv_heads, kD]
  // Element offset of position pos of sequence seq (kv head 0).
  int64_t row(int seq, int pos) const {
    const int64_t block = block_table[size_t(seq) * max_blocks_per_seq + pos / block_size];
    EXPECT_GE(block, 0) << "position " << pos << " of sequence " << seq << " has no block";
    return (block * block_size + pos % block_size) * row_elems();
  }
  void fill_row(int seq, int pos, std::mt19937& rng) {
    const auto kr = random_bf16(size_t(row_elems()), rng, 1.0f), vr = random_bf16(size_t(row_elems()), rng, 1.0f);
    std::copy(kr.begin(), kr.end(), k.begin() + row(seq, pos));
    std::copy(vr.begin(), vr.end(), v.begin() + row(seq, pos));
  }
  void poison_row(int seq, int pos) {
    std::fill_n(k.begin() + row(seq, pos), row_elems(), kPoisonBf16);
    std::fill_n(v.begin() + row(seq, pos), row_elems(), kPoisonBf16);
  }
};

// The same cache on the device.
struct DeviceCache {
  DeviceBuffer<uint16_t> k, v;
  DeviceBuffer<int32_t> block_table;
  PagedKvCache view;

  explicit DeviceCache(const HostCache& h) : k(upload(h.k)), v(upload(h.v)), block_table(upload(h.block_table)) {
    view.k = k.data(), view.v = v.data(), view.block_table = block_table.data();
    view.block_size = h.block_size, view.max_blocks_per_seq = h.max_blocks_per_seq;
    view.num_kv_heads = h.num_kv_heads, view.head_dim = kD;
  }
};

struct Expected {
  std::vector<float> out;  // f32 [num_tokens, num_q_heads, kD]
  float max_abs_v = 0;     // over every value row the queries see
};

// ref::causal_attention of every sequence in float32, reading k and v from the host cache image.
// q: bf16 [num_tokens, num_q_heads, kD]; sequence s owns tokens cu_seqlens[s] .. cu_seqlens[s+1]-1.
Expected reference(const HostCache& cache, const std::vector<uint16_t>& q, std::span<const int32_t> cu_seqlens,
                   std::span<const int32_t> kv_lens, int num_q_heads) {
  Expected e;
  const int64_t q_row = int64_t(num_q_heads) * kD;
  e.out.assign(size_t(cu_seqlens.back() * q_row), NAN);
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    const int n_q = cu_seqlens[s + 1] - cu_seqlens[s], kv_len = kv_lens[s];
    if (n_q == 0) continue;
    const std::vector<float> qf =
        to_floats(std::vector<uint16_t>(q.begin() + cu_seqlens[s] * q_row, q.begin() + cu_seqlens[s + 1] * q_row));
    std::vector<float> kf(size_t(kv_len * cache.row_elems())), vf(kf.size());
    for (int pos = 0; pos < kv_len; ++pos) {
      const int64_t at = cache.row(int(s), pos);
      for (int64_t i = 0; i < cache.row_elems(); ++i) {
        kf[pos * cache.row_elems() + i] = bf16_to_f32(cache.k[at + i]);
        vf[pos * cache.row_elems() + i] = bf16_to_f32(cache.v[at + i]);
        e.max_abs_v = std::max(e.max_abs_v, std::fabs(vf[pos * cache.row_elems() + i]));
      }
    }
    ref::causal_attention(qf.data(), kf.data(), vf.data(), n_q, kv_len, num_q_heads, cache.num_kv_heads, kD, kScale,
                          e.out.data() + cu_seqlens[s] * q_row, Precision::f32);
  }
  return e;
}

// ---- KV append ------------------------------------------------------------------------------------

class KvAppend : public di::testing::GpuTest {};

TEST_F(KvAppend, WritesExactlyTheNewRows) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<int32_t> capacity = {70, 40, 300};
  HostCache expected(capacity, 16, 4, rng);
  const HostCache initial = expected;  // all poison

  // Sequence 0: positions 0..69 (five blocks); sequence 1: 33..39; sequence 2: 257 and 299; a
  // padding token (sequence -1) and a position past the block-table row, which must write nothing.
  struct Token {
    int32_t seq, pos;
  };
  std::vector<Token> tokens;
  for (int p = 0; p < 70; ++p) tokens.push_back({0, p});
  for (int p = 33; p < 40; ++p) tokens.push_back({1, p});
  tokens.push_back({2, 257});
  tokens.push_back({2, 299});
  tokens.push_back({-1, 5});
  tokens.push_back({1, expected.max_blocks_per_seq * expected.block_size});
  std::shuffle(tokens.begin(), tokens.end(), rng);

  const int n = int(tokens.size());
  const size_t row = size_t(expected.row_elems());
  std::vector<uint16_t> k_new = random_bf16(n * row, rng, 1.0f), v_new = random_bf16(n * row, rng, 1.0f);
  std::vector<int32_t> token_seq(n), token_pos(n);
  for (int t = 0; t < n; ++t) {
    token_seq[t] = tokens[t].seq, token_pos[t] = tokens[t].pos;
    if (tokens[t].seq < 0 || tokens[t].pos >= expected.max_blocks_per_seq * expected.block_size) continue;
    const int64_t at = expected.row(tokens[t].seq, tokens[t].pos);
    std::copy_n(k_new.begin() + t * row, row, expected.k.begin() + at);
    std::copy_n(v_new.begin() + t * row, row, expected.v.begin() + at);
  }

  DeviceCache cache(initial);
  const auto k_dev = upload(k_new), v_dev = upload(v_new);
  const auto seq_dev = upload(token_seq), pos_dev = upload(token_pos);
  KvAppendParams p;
  p.cache = cache.view, p.k = k_dev.data(), p.v = v_dev.data();
  p.token_seq = seq_dev.data(), p.token_pos = pos_dev.data(), p.num_tokens = n;
  ASSERT_EQ(launch_kv_append(p, stream_), cudaSuccess);
  sync();
  EXPECT_TRUE(same_bits(cache.k.download(), expected.k, "k cache"));
  EXPECT_TRUE(same_bits(cache.v.download(), expected.v, "v cache"));
}

// ---- Prefill --------------------------------------------------------------------------------------

struct PrefillCase {
  std::string name;
  int num_q_heads, num_kv_heads, block_size;
  std::vector<SequenceShape> seqs;  // {n_q, n_past}
};

void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.name; }

class PrefillAttention : public di::testing::GpuTest, public ::testing::WithParamInterface<PrefillCase> {};

TEST_P(PrefillAttention, MatchesReference) {
  const PrefillCase& c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);

  const PrefillPlan plan = plan_prefill(c.seqs);
  const int num_tokens = plan.cu_seqlens_q.back();
  // `full` holds every sequence's keys; the device starts from `initial`, where the new tokens'
  // rows are still poison, and launch_kv_append must turn it into `full`.
  HostCache full(plan.kv_lens, c.block_size, c.num_kv_heads, rng);
  for (size_t s = 0; s < c.seqs.size(); ++s)
    for (int pos = 0; pos < plan.kv_lens[s]; ++pos) full.fill_row(int(s), pos, rng);
  HostCache initial = full;
  const size_t row = size_t(full.row_elems());
  std::vector<uint16_t> k_new(num_tokens * row), v_new(num_tokens * row);  // bf16 [num_tokens, Hkv, kD]
  std::vector<int32_t> token_seq(num_tokens), token_pos(num_tokens);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int i = 0; i < c.seqs[s].n_q; ++i) {
      const int t = plan.cu_seqlens_q[s] + i, pos = c.seqs[s].n_past + i;
      std::copy_n(full.k.begin() + full.row(int(s), pos), row, k_new.begin() + t * row);
      std::copy_n(full.v.begin() + full.row(int(s), pos), row, v_new.begin() + t * row);
      token_seq[t] = int32_t(s), token_pos[t] = pos;
      initial.poison_row(int(s), pos);
    }
  }
  const std::vector<uint16_t> q = random_bf16(size_t(num_tokens) * c.num_q_heads * kD, rng, 4.0f);

  DeviceCache cache(initial);
  const auto k_dev = upload(k_new), v_dev = upload(v_new), q_dev = upload(q);
  const auto seq_dev = upload(token_seq), pos_dev = upload(token_pos);
  const auto cu_dev = upload(plan.cu_seqlens_q), kv_dev = upload(plan.kv_lens);
  const auto tile_seq_dev = upload(plan.tile_seq), tile_start_dev = upload(plan.tile_q_start);
  DeviceBuffer<uint16_t> out(q.size());
  out.fill_bytes(0xFF);

  KvAppendParams ap;
  ap.cache = cache.view, ap.k = k_dev.data(), ap.v = v_dev.data();
  ap.token_seq = seq_dev.data(), ap.token_pos = pos_dev.data(), ap.num_tokens = num_tokens;
  ASSERT_EQ(launch_kv_append(ap, stream_), cudaSuccess);

  PrefillParams pp;
  pp.cache = cache.view, pp.q = q_dev.data(), pp.out = out.data();
  pp.cu_seqlens_q = cu_dev.data(), pp.kv_lens = kv_dev.data();
  pp.tile_seq = tile_seq_dev.data(), pp.tile_q_start = tile_start_dev.data(), pp.num_tiles = plan.num_tiles();
  pp.num_q_heads = c.num_q_heads, pp.scale = float(kScale);
  ASSERT_EQ(launch_prefill_attention(pp, stream_), cudaSuccess);
  sync();

  EXPECT_TRUE(same_bits(cache.k.download(), full.k, "k cache after append"));
  EXPECT_TRUE(same_bits(cache.v.download(), full.v, "v cache after append"));
  const Expected e = reference(full, q, plan.cu_seqlens_q, plan.kv_lens, c.num_q_heads);
  EXPECT_TRUE(all_close(to_floats(out.download()), e.out, scale_atol(kBf16AttentionP, e.max_abs_v), "prefill out"));
}

std::vector<PrefillCase> prefill_cases() {
  std::vector<PrefillCase> cases;
  for (int n : {1, 2, 63, 64, 65, 127, 128, 1000})
    cases.push_back({"single_" + std::to_string(n) + "_gqa16x4_bs64", 16, 4, 64, {{n, 0}}});
  cases.push_back({"chunk_65_after_100_gqa16x4_bs16", 16, 4, 16, {{65, 100}}});
  cases.push_back({"chunk_1_after_1000_gqa16x4_bs64", 16, 4, 64, {{1, 1000}}});
  cases.push_back({"chunk_64_after_64_gqa4x2_bs32", 4, 2, 32, {{64, 64}}});
  cases.push_back({"chunk_127_after_1_mha8x8_bs16", 8, 8, 16, {{127, 1}}});
  const std::vector<SequenceShape> mixed = {{1, 0},   {2, 5},   {63, 0}, {64, 17},  {65, 100},
                                            {127, 0}, {128, 3}, {0, 9},  {1000, 24}};
  cases.push_back({"varlen_gqa16x4_bs16", 16, 4, 16, mixed});
  cases.push_back({"varlen_gqa4x2_bs64", 4, 2, 64, mixed});
  cases.push_back({"varlen_mha8x8_bs16", 8, 8, 16, mixed});
  cases.push_back({"varlen_gqa16x4_bs32", 16, 4, 32, {{65, 100}, {2, 0}, {128, 128}, {1, 300}}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, PrefillAttention, ::testing::ValuesIn(prefill_cases()),
                         [](const ::testing::TestParamInfo<PrefillCase>& info) { return info.param.name; });

// ---- Decode ---------------------------------------------------------------------------------------

struct DecodeCase {
  std::string name;
  int num_q_heads, num_kv_heads, block_size;
  std::vector<int32_t> kv_lens;
};

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name; }

class DecodeAttention : public di::testing::GpuTest, public ::testing::WithParamInterface<DecodeCase> {};

TEST_P(DecodeAttention, MatchesReferenceAtEverySplitCount) {
  const DecodeCase& c = GetParam();
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);

  const int num_seqs = int(c.kv_lens.size());
  HostCache cache_image(c.kv_lens, c.block_size, c.num_kv_heads, rng);
  for (int s = 0; s < num_seqs; ++s)
    for (int pos = 0; pos < c.kv_lens[s]; ++pos) cache_image.fill_row(s, pos, rng);
  const std::vector<uint16_t> q = random_bf16(size_t(num_seqs) * c.num_q_heads * kD, rng, 4.0f);
  std::vector<int32_t> one_query_each(num_seqs + 1);
  std::iota(one_query_each.begin(), one_query_each.end(), 0);
  const Expected e = reference(cache_image, q, one_query_each, c.kv_lens, c.num_q_heads);

  const int max_kv = *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
  const int planned =
      plan_decode_splits(num_seqs, c.num_q_heads, c.num_kv_heads, max_kv, cuda::current_device().num_sms, 64);
  std::set<int> split_counts = {1, 2, 3, 8, 33, planned};
  const int max_splits = *split_counts.rbegin();

  DeviceCache cache(cache_image);
  const auto q_dev = upload(q);
  const auto kv_dev = upload(c.kv_lens);
  DeviceBuffer<uint16_t> out(q.size());
  const size_t ws_bytes = decode_workspace_bytes(num_seqs, c.num_q_heads, kD, max_splits);
  DeviceBuffer<float> workspace(ws_bytes / sizeof(float));
  for (int splits : split_counts) {
    SCOPED_TRACE("num_splits " + std::to_string(splits) + (splits == planned ? " (planned)" : ""));
    out.fill_bytes(0xFF);
    workspace.fill_bytes(0xFF);
    DecodeParams p;
    p.cache = cache.view, p.q = q_dev.data(), p.out = out.data(), p.kv_lens = kv_dev.data();
    p.num_seqs = num_seqs, p.num_q_heads = c.num_q_heads, p.num_splits = splits, p.scale = float(kScale);
    p.workspace = workspace.data(), p.workspace_bytes = workspace.bytes();
    ASSERT_EQ(launch_decode_attention(p, stream_), cudaSuccess);
    sync();
    EXPECT_TRUE(all_close(to_floats(out.download()), e.out, kBf16AfterF32Reorder, "decode out"));
  }
}

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> cases;
  for (int kv : {1, 2, 500, 5000})
    cases.push_back({"batch1_kv" + std::to_string(kv) + "_gqa16x4_bs64", 16, 4, 64, {kv}});
  cases.push_back({"batch3_gqa16x4_bs16", 16, 4, 16, {5000, 1, 500}});
  cases.push_back({"batch3_gqa4x2_bs32", 4, 2, 32, {2, 500, 5000}});
  cases.push_back({"batch3_mha8x8_bs64", 8, 8, 64, {500, 5000, 2}});
  cases.push_back({"batch3_gqa24x4_bs16", 24, 4, 16, {1, 777, 5000}});  // group 6
  cases.push_back({"batch3_gqa16x2_bs64", 16, 2, 64, {5000, 2, 500}});  // group 8
  cases.push_back({"batch3_gqa32x2_bs32", 32, 2, 32, {500, 1, 5000}});  // group 16: two CTAs per KV head
  std::vector<int32_t> mixed(64);
  for (size_t i = 0; i < mixed.size(); ++i) mixed[i] = std::vector<int32_t>{1, 2, 500, 5000}[i % 4];
  cases.push_back({"batch64_gqa16x4_bs16", 16, 4, 16, mixed});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeAttention, ::testing::ValuesIn(decode_cases()),
                         [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });

// ---- CUDA graph capture ---------------------------------------------------------------------------

class AttentionGraph : public di::testing::GpuTest {};

// The launchers read only device memory and never synchronise: captured once and replayed, they
// give the bits of direct launches.
TEST_F(AttentionGraph, CapturedLaunchesMatchDirectOnes) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<SequenceShape> seqs = {{65, 100}, {3, 0}};
  const PrefillPlan plan = plan_prefill(seqs);
  HostCache image(plan.kv_lens, 64, 4, rng);
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int pos = 0; pos < plan.kv_lens[s]; ++pos) image.fill_row(int(s), pos, rng);
  const int num_q_heads = 16, num_tokens = plan.cu_seqlens_q.back(), num_seqs = int(seqs.size()), splits = 4;
  const std::vector<uint16_t> q = random_bf16(size_t(num_tokens) * num_q_heads * kD, rng, 4.0f);

  DeviceCache cache(image);
  const auto q_dev = upload(q);
  const auto cu_dev = upload(plan.cu_seqlens_q), kv_dev = upload(plan.kv_lens);
  const auto tile_seq_dev = upload(plan.tile_seq), tile_start_dev = upload(plan.tile_q_start);
  DeviceBuffer<uint16_t> prefill_out(q.size()), decode_out(size_t(num_seqs) * num_q_heads * kD);
  DeviceBuffer<float> workspace(decode_workspace_bytes(num_seqs, num_q_heads, kD, splits) / sizeof(float));

  PrefillParams pp;
  pp.cache = cache.view, pp.q = q_dev.data(), pp.out = prefill_out.data();
  pp.cu_seqlens_q = cu_dev.data(), pp.kv_lens = kv_dev.data();
  pp.tile_seq = tile_seq_dev.data(), pp.tile_q_start = tile_start_dev.data(), pp.num_tiles = plan.num_tiles();
  pp.num_q_heads = num_q_heads, pp.scale = float(kScale);
  DecodeParams dp;  // the first query row of each sequence stands in for a decode query
  dp.cache = cache.view, dp.q = q_dev.data(), dp.out = decode_out.data(), dp.kv_lens = kv_dev.data();
  dp.num_seqs = num_seqs, dp.num_q_heads = num_q_heads, dp.num_splits = splits, dp.scale = float(kScale);
  dp.workspace = workspace.data(), dp.workspace_bytes = workspace.bytes();

  const auto run_both = [&] {
    ASSERT_EQ(launch_prefill_attention(pp, stream_), cudaSuccess);
    ASSERT_EQ(launch_decode_attention(dp, stream_), cudaSuccess);
  };
  prefill_out.fill_bytes(0xFF), decode_out.fill_bytes(0xFF);
  run_both();
  sync();
  const auto prefill_direct = prefill_out.download(), decode_direct = decode_out.download();

  prefill_out.fill_bytes(0xFF), decode_out.fill_bytes(0xFF), workspace.fill_bytes(0xFF);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
  run_both();
  DI_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  DI_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  sync();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_TRUE(same_bits(prefill_out.download(), prefill_direct, "prefill out, graph vs direct"));
  EXPECT_TRUE(same_bits(decode_out.download(), decode_direct, "decode out, graph vs direct"));
}

// ---- Host side: planning and validation (no GPU needed) ------------------------------------------

TEST(AttentionPlan, PrefillTilesCoverEveryQueryOnceInDecreasingWork) {
  const std::vector<SequenceShape> seqs = {{1, 0}, {65, 100}, {128, 0}, {0, 7}, {1000, 24}, {64, 1}};
  const PrefillPlan plan = plan_prefill(seqs);
  EXPECT_EQ(plan.cu_seqlens_q, (std::vector<int32_t>{0, 1, 66, 194, 194, 1194, 1258}));
  EXPECT_EQ(plan.kv_lens, (std::vector<int32_t>{1, 165, 128, 7, 1024, 65}));
  ASSERT_EQ(plan.tile_seq.size(), plan.tile_q_start.size());
  std::vector<std::vector<int>> covered(seqs.size());
  int64_t previous_work = INT64_MAX;
  for (int i = 0; i < plan.num_tiles(); ++i) {
    const int s = plan.tile_seq[i], q0 = plan.tile_q_start[i];
    ASSERT_GE(s, 0);
    ASSERT_LT(s, int(seqs.size()));
    ASSERT_TRUE(q0 >= 0 && q0 < seqs[s].n_q && q0 % kPrefillTileQueries == 0) << "tile " << i << " starts at " << q0;
    const int last = std::min(q0 + kPrefillTileQueries, seqs[s].n_q);
    for (int qi = q0; qi < last; ++qi) covered[s].push_back(qi);
    const int64_t work = seqs[s].n_past + last;
    EXPECT_LE(work, previous_work) << "tile " << i << " is not in decreasing order of work";
    previous_work = work;
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::sort(covered[s].begin(), covered[s].end());
    std::vector<int> all(size_t(seqs[s].n_q));
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(covered[s], all) << "sequence " << s;
  }
  EXPECT_THROW(plan_prefill(std::vector<SequenceShape>{{-1, 0}}), di::Error);
}

TEST(AttentionPlan, DecodeSplitsStayInRange) {
  // Batch 1, long context: many splits (capped by max_splits), each at least kMinDecodeKeysPerSplit.
  const int long_context = plan_decode_splits(1, 16, 4, 5000, 132, 64);
  EXPECT_GT(long_context, 1);
  EXPECT_LE(long_context, 64);
  EXPECT_LE(long_context, (5000 + kMinDecodeKeysPerSplit - 1) / kMinDecodeKeysPerSplit);
  EXPECT_EQ(plan_decode_splits(1, 16, 4, 5000, 132, 8), 8);
  EXPECT_EQ(plan_decode_splits(1, 16, 4, 5000, 132, 1), 1);
  EXPECT_EQ(plan_decode_splits(1, 16, 4, kMinDecodeKeysPerSplit, 132, 64), 1);  // too short to split
  EXPECT_EQ(plan_decode_splits(256, 16, 4, 5000, 132, 64), 1);                  // the batch fills the GPU
  EXPECT_EQ(plan_decode_splits(0, 16, 4, 5000, 132, 64), 1);
}

// Launchers refuse unsupported sizes before touching the GPU, and the reason names the field.
TEST(AttentionParams, LaunchersRejectUnsupportedSizes) {
  // Never dereferenced: every case below fails validation (a well-formed one is only validated).
  uint16_t* const fake_bf16 = reinterpret_cast<uint16_t*>(uintptr_t{1} << 20);
  int32_t* const fake_i32 = reinterpret_cast<int32_t*>(uintptr_t{1} << 20);
  PagedKvCache cache;
  cache.k = cache.v = fake_bf16, cache.block_table = fake_i32;
  cache.block_size = 64, cache.max_blocks_per_seq = 8, cache.num_kv_heads = 4, cache.head_dim = kD;

  PrefillParams pp;
  pp.cache = cache, pp.q = fake_bf16, pp.out = fake_bf16, pp.cu_seqlens_q = fake_i32, pp.kv_lens = fake_i32;
  pp.tile_seq = fake_i32, pp.tile_q_start = fake_i32, pp.num_tiles = 3, pp.num_q_heads = 16, pp.scale = 0.0625f;
  EXPECT_EQ(prefill_params_error(pp), "");
  const auto expect_prefill_rejected = [](PrefillParams p, const std::string& field) {
    EXPECT_NE(prefill_params_error(p).find(field), std::string::npos) << prefill_params_error(p);
    EXPECT_EQ(launch_prefill_attention(p, nullptr), cudaErrorInvalidValue) << field;
  };
  PrefillParams bad = pp;
  bad.cache.head_dim = 128;
  expect_prefill_rejected(bad, "head_dim");
  bad = pp, bad.cache.block_size = 8;
  expect_prefill_rejected(bad, "block_size");
  bad = pp, bad.cache.block_size = 128;
  expect_prefill_rejected(bad, "block_size");
  bad = pp, bad.num_q_heads = 6;
  expect_prefill_rejected(bad, "num_q_heads");
  bad = pp, bad.q = fake_bf16 + 1;
  expect_prefill_rejected(bad, "aligned");
  bad = pp, bad.scale = 0.0f;
  expect_prefill_rejected(bad, "scale");

  DecodeParams dp;
  dp.cache = cache, dp.q = fake_bf16, dp.out = fake_bf16, dp.kv_lens = fake_i32, dp.num_seqs = 2;
  dp.num_q_heads = 16, dp.num_splits = 4, dp.scale = 0.0625f;
  dp.workspace = fake_bf16, dp.workspace_bytes = decode_workspace_bytes(2, 16, kD, 4);
  EXPECT_EQ(decode_params_error(dp), "");
  const auto expect_decode_rejected = [](DecodeParams p, const std::string& field) {
    EXPECT_NE(decode_params_error(p).find(field), std::string::npos) << decode_params_error(p);
    EXPECT_EQ(launch_decode_attention(p, nullptr), cudaErrorInvalidValue) << field;
  };
  DecodeParams bad_decode = dp;
  bad_decode.workspace_bytes -= 4;
  expect_decode_rejected(bad_decode, "workspace_bytes");
  bad_decode = dp, bad_decode.workspace = nullptr;
  expect_decode_rejected(bad_decode, "workspace");
  bad_decode = dp, bad_decode.num_q_heads = 12;  // group 3
  expect_decode_rejected(bad_decode, "group 3");
  bad_decode = dp, bad_decode.cache.head_dim = 512;
  expect_decode_rejected(bad_decode, "head_dim");
  bad_decode = dp, bad_decode.num_splits = 0;
  expect_decode_rejected(bad_decode, "num_splits");
  bad_decode = dp, bad_decode.num_q_heads = 64;  // group 16: two CTAs of 8 heads per KV head
  EXPECT_EQ(decode_heads_per_cta(64, 4), 8);
  bad_decode.workspace_bytes = decode_workspace_bytes(2, 64, kD, 4);
  EXPECT_EQ(decode_params_error(bad_decode), "");

  KvAppendParams ap;
  ap.cache = cache, ap.k = ap.v = fake_bf16, ap.token_seq = ap.token_pos = fake_i32, ap.num_tokens = 5;
  EXPECT_EQ(kv_append_params_error(ap), "");
  KvAppendParams bad_append = ap;
  bad_append.cache.block_size = 48;
  EXPECT_NE(kv_append_params_error(bad_append).find("block_size"), std::string::npos);
  EXPECT_EQ(launch_kv_append(bad_append, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace di::attention
