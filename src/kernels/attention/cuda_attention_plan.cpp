// Host side of the GPU attention (attention.h): the per-step planning (prefill tiles, decode
// splits), the decode workspace size and the parameter checks the launchers in attention.cu run
// before they touch the GPU. Plain C++: nothing here calls the CUDA runtime.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "kernels/attention/attention.h"

namespace di::attention {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Grid dimensions y and z are limited to 65535.
constexpr int kMaxGridYZ = 65535;

std::string cache_error(const PagedKvCache& c, bool attention_head_dim) {
  if (!c.k || !c.v) return "cache.k and cache.v must be set";
  if (!c.block_table) return "cache.block_table must be set";
  if (!aligned16(c.k) || !aligned16(c.v)) return "cache.k and cache.v must be 16-byte aligned";
  if (c.block_size != 16 && c.block_size != 32 && c.block_size != 64)
    return fmt::format("cache.block_size {} is not supported (16, 32 or 64)", c.block_size);
  if (c.max_blocks_per_seq <= 0)
    return fmt::format("cache.max_blocks_per_seq {} must be positive", c.max_blocks_per_seq);
  if (c.num_kv_heads <= 0) return fmt::format("cache.num_kv_heads {} must be positive", c.num_kv_heads);
  if (attention_head_dim && c.head_dim != kHeadDim)
    return fmt::format("cache.head_dim {} is not supported (the kernels are built for {})", c.head_dim, kHeadDim);
  if (!attention_head_dim && (c.head_dim <= 0 || c.head_dim % 8 != 0))
    return fmt::format("cache.head_dim {} must be a positive multiple of 8", c.head_dim);
  return {};
}

std::string scale_error(float scale) {
  if (!(std::isfinite(scale) && scale > 0.0f)) return fmt::format("scale {} must be finite and positive", scale);
  return {};
}

std::string heads_error(int num_q_heads, int num_kv_heads) {
  if (num_q_heads <= 0 || num_q_heads > kMaxGridYZ)
    return fmt::format("num_q_heads {} must be in 1..{}", num_q_heads, kMaxGridYZ);
  if (num_q_heads % num_kv_heads != 0)
    return fmt::format("num_q_heads {} is not a multiple of cache.num_kv_heads {}", num_q_heads, num_kv_heads);
  return {};
}

}  // namespace

size_t decode_workspace_bytes(int num_seqs, int num_q_heads, int head_dim, int max_splits) {
  const size_t partials =
      size_t(std::max(num_seqs, 0)) * size_t(std::max(num_q_heads, 0)) * size_t(std::max(max_splits, 0));
  return partials * (size_t(std::max(head_dim, 0)) + 2) * sizeof(float);
}

int decode_heads_per_cta(int num_q_heads, int num_kv_heads) {
  if (num_q_heads <= 0 || num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0) return 0;
  const int group = num_q_heads / num_kv_heads;
  switch (group) {
    case 1:
    case 2:
    case 4:
    case 6:
    case 8: return group;
    default: break;
  }
  // Larger groups are served by several CTAs per KV head (each loads the K/V rows once more).
  if (group % 8 == 0) return 8;
  if (group % 6 == 0) return 6;
  return 0;
}

std::string kv_append_params_error(const KvAppendParams& p) {
  if (p.num_tokens < 0) return fmt::format("num_tokens {} is negative", p.num_tokens);
  if (p.num_tokens == 0) return {};
  if (auto e = cache_error(p.cache, false); !e.empty()) return e;
  if (!p.k || !p.v || !p.token_seq || !p.token_pos) return "k, v, token_seq and token_pos must be set";
  if (!aligned16(p.k) || !aligned16(p.v)) return "k and v must be 16-byte aligned";
  return {};
}

std::string prefill_params_error(const PrefillParams& p) {
  if (p.num_tiles < 0 || p.num_tiles > kMaxGridYZ)
    return fmt::format("num_tiles {} must be in 0..{}", p.num_tiles, kMaxGridYZ);
  if (p.num_tiles == 0) return {};
  if (auto e = cache_error(p.cache, true); !e.empty()) return e;
  if (auto e = heads_error(p.num_q_heads, p.cache.num_kv_heads); !e.empty()) return e;
  if (!p.q || !p.out) return "q and out must be set";
  if (!aligned16(p.q) || !aligned16(p.out)) return "q and out must be 16-byte aligned";
  if (!p.cu_seqlens_q || !p.kv_lens || !p.tile_seq || !p.tile_q_start)
    return "cu_seqlens_q, kv_lens, tile_seq and tile_q_start must be set";
  return scale_error(p.scale);
}

std::string decode_params_error(const DecodeParams& p) {
  if (p.num_seqs < 0 || p.num_seqs > kMaxGridYZ)
    return fmt::format("num_seqs {} must be in 0..{}", p.num_seqs, kMaxGridYZ);
  if (p.num_seqs == 0) return {};
  if (auto e = cache_error(p.cache, true); !e.empty()) return e;
  if (auto e = heads_error(p.num_q_heads, p.cache.num_kv_heads); !e.empty()) return e;
  if (decode_heads_per_cta(p.num_q_heads, p.cache.num_kv_heads) == 0)
    return fmt::format("GQA group {} (num_q_heads {} / num_kv_heads {}) is not supported by decode",
                       p.num_q_heads / p.cache.num_kv_heads, p.num_q_heads, p.cache.num_kv_heads);
  if (!p.q || !p.out || !p.kv_lens) return "q, out and kv_lens must be set";
  if (!aligned16(p.q) || !aligned16(p.out)) return "q and out must be 16-byte aligned";
  if (p.num_splits < 1) return fmt::format("num_splits {} must be at least 1", p.num_splits);
  if (p.num_splits > 1) {
    const size_t need = decode_workspace_bytes(p.num_seqs, p.num_q_heads, p.cache.head_dim, p.num_splits);
    if (!p.workspace || !aligned16(p.workspace)) return "workspace must be set and 16-byte aligned when num_splits > 1";
    if (p.workspace_bytes < need)
      return fmt::format("workspace_bytes {} is less than the {} that {} splits need", p.workspace_bytes, need,
                         p.num_splits);
  }
  return scale_error(p.scale);
}

PrefillPlan plan_prefill(std::span<const SequenceShape> seqs) {
  struct Tile {
    int32_t seq, q_start;
    int64_t keys;  // keys the tile's last query sees: the work of its CTA
  };
  PrefillPlan plan;
  plan.cu_seqlens_q.reserve(seqs.size() + 1);
  plan.kv_lens.reserve(seqs.size());
  plan.cu_seqlens_q.push_back(0);
  std::vector<Tile> tiles;
  int64_t total_q = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [n_q, n_past] = seqs[s];
    DI_CHECK(n_q >= 0 && n_past >= 0, "plan_prefill: sequence {} has n_q {} and n_past {}; neither may be negative", s,
             n_q, n_past);
    const int64_t kv_len = int64_t(n_q) + n_past;
    total_q += n_q;
    DI_CHECK(kv_len <= std::numeric_limits<int32_t>::max() && total_q <= std::numeric_limits<int32_t>::max(),
             "plan_prefill: sequence {} (n_q {}, n_past {}) overflows int32 token counts", s, n_q, n_past);
    plan.cu_seqlens_q.push_back(int32_t(total_q));
    plan.kv_lens.push_back(int32_t(kv_len));
    for (int32_t q0 = 0; q0 < n_q; q0 += kPrefillTileQueries)
      tiles.push_back({int32_t(s), q0, n_past + std::min<int64_t>(int64_t(q0) + kPrefillTileQueries, n_q)});
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.keys > b.keys; });
  plan.tile_seq.reserve(tiles.size());
  plan.tile_q_start.reserve(tiles.size());
  for (const Tile& t : tiles) {
    plan.tile_seq.push_back(t.seq);
    plan.tile_q_start.push_back(t.q_start);
  }
  return plan;
}

int plan_decode_splits(int num_seqs, int num_q_heads, int num_kv_heads, int max_kv_len, int num_sms, int max_splits) {
  const int heads_per_cta = decode_heads_per_cta(num_q_heads, num_kv_heads);
  if (num_seqs <= 0 || heads_per_cta == 0 || max_splits <= 1 || max_kv_len <= 0) return 1;
  const int64_t ctas_per_split = int64_t(num_seqs) * (num_q_heads / heads_per_cta);
  const int64_t wanted = (2 * int64_t(std::max(num_sms, 1)) + ctas_per_split - 1) / ctas_per_split;
  const int64_t longest = (int64_t(max_kv_len) + kMinDecodeKeysPerSplit - 1) / kMinDecodeKeysPerSplit;
  return int(std::clamp<int64_t>(std::min(wanted, longest), 1, max_splits));
}

}  // namespace di::attention
