// The "flashinfer-sm90" backend: deltainfer's prefill ABI in front of FlashInfer's SM90 kernel as
// exported by CuTe DSL. The bundle holds, per state layout, a shared object with the kernel's cubin
// and CuTe's generated host launcher (it encodes the kernel's TMA descriptors), behind three stable
// symbols of tools/artifacts/flashinfer_gdn_sm90/bridge.c. This file is the only one that knows them
// and their argument layout.
#include "gdn/flashinfer_sm90.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "core/log.h"
#include "gdn/artifact_bundle.h"
#include "gdn/backend_common.cuh"
#include "gdn/external_inputs.h"
#include "gdn/flashinfer_launch.h"

namespace di::gdn {
namespace {

constexpr int kHeadDim = 128;
// The kernel keeps one TMA descriptor (128 bytes) per SM id for the output tail of each sequence;
// %smid stays below 1024 on every Hopper part.
constexpr size_t kTensormapBytes = 128 * 1024;
// The kernel indexes the pools through the slot lists only; their extent is not read.
constexpr int32_t kPoolExtent = 1 << 20;


struct Variant {
  void* handle = nullptr;
  int (*launch)(const di_flashinfer_gdn_launch_args*, cudaStream_t) = nullptr;
};

// The bundle, loaded once per process: both layouts, or the reason it cannot be used.
struct Bundle {
  Variant vk, kv;
  std::string problem;  // empty when usable
};

std::string open_variant(const std::filesystem::path& dir, const char* file, Variant& v) {
  const std::filesystem::path path = dir / file;
  v.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (v.handle == nullptr) return fmt::format("cannot load {}: {}", path.string(), dlerror());
  auto abi = reinterpret_cast<int (*)()>(dlsym(v.handle, "di_flashinfer_gdn_abi"));
  auto load = reinterpret_cast<int (*)()>(dlsym(v.handle, "di_flashinfer_gdn_load"));
  v.launch = reinterpret_cast<decltype(v.launch)>(dlsym(v.handle, "di_flashinfer_gdn_launch"));
  if (abi == nullptr || load == nullptr || v.launch == nullptr)
    return fmt::format("{} lacks the bundle's entry points (di_flashinfer_gdn_abi/load/launch)", file);
  if (abi() != DI_FLASHINFER_GDN_LAUNCH_ABI)
    return fmt::format("{} has launch ABI {}, this build speaks {}", file, abi(), DI_FLASHINFER_GDN_LAUNCH_ABI);
  if (const int err = load(); err != 0)
    return fmt::format("{} could not load its kernel on the GPUs: CUDA error {} ({})", file, err,
                       cudaGetErrorString(cudaError_t(err)));
  return "";
}

const Bundle& bundle() {
  static Bundle b;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string dir = flashinfer_sm90_bundle_dir();
    if (dir.empty()) {
      b.problem = fmt::format("no bundle: set DI_GDN_ARTIFACTS (or --gdn-artifacts) to the directory that {} writes",
                              flashinfer_gdn_sm90_pin().generator);
      return;
    }
    const std::vector<std::string> problems = bundle_problems(dir, flashinfer_gdn_sm90_pin());
    if (!problems.empty()) {
      b.problem = describe_problems(dir, flashinfer_gdn_sm90_pin(), problems);
      return;
    }
    b.problem = open_variant(dir, "fi_gdn_sm90_vk.so", b.vk);
    if (b.problem.empty()) b.problem = open_variant(dir, "fi_gdn_sm90_kv.so", b.kv);
    if (b.problem.empty()) spdlog::info("GDN prefill: loaded the pinned flashinfer-gdn-sm90 bundle from {}", dir);
  });
  return b;
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

// Scratch sections, each 256-byte aligned: tensormaps | alpha | read, write and pass-through slot
// lists | q | k.
struct ScratchLayout {
  size_t tensormaps = 0, alpha = 0, read_slot = 0, write_slot = 0, pass_slot = 0, q = 0, k = 0, total = 0;
};
ScratchLayout scratch_layout(const di_gdn_geometry& g, int32_t num_seqs, int64_t tokens) {
  ScratchLayout s;
  size_t at = align_up(kTensormapBytes);
  s.alpha = at, at += align_up(size_t(tokens) * size_t(g.num_v_heads) * sizeof(float));
  s.read_slot = at, at += align_up(size_t(num_seqs) * sizeof(int32_t));
  s.write_slot = at, at += align_up(size_t(num_seqs) * sizeof(int32_t));
  s.pass_slot = at, at += align_up(size_t(num_seqs) * sizeof(int32_t));
  const size_t qk_bytes = align_up(size_t(tokens) * size_t(g.num_k_heads) * kHeadDim * 2);
  s.q = at, at += qk_bytes;
  s.k = at, at += qk_bytes;
  s.total = at;
  return s;
}

int flashinfer_supports(const di_gdn_geometry* geometry, const di_gdn_device* device, di_gdn_state_layout layout,
                        char* reason, size_t capacity) {
  if (geometry == nullptr || device == nullptr) return refuse(reason, capacity, "null geometry or device");
  if (const int status = check_geometry("flashinfer-sm90", *geometry, layout, reason, capacity); status != DI_GDN_OK)
    return status;
  if (device->sm_major != 9 || device->sm_minor != 0)
    return refuse(reason, capacity,
                  "compute capability %d.%d: the bundle holds sm_90a code, which runs on compute capability 9.0 only",
                  device->sm_major, device->sm_minor);
  const Bundle& b = bundle();
  if (!b.problem.empty()) return refuse(reason, capacity, "%s", b.problem.c_str());
  return accept(reason, capacity);
}

size_t flashinfer_scratch_bytes(const di_gdn_prefill_shape* shape) {
  if (shape == nullptr || shape->num_seqs < 0 || shape->total_tokens < 0) return 0;
  return scratch_layout(shape->geometry, shape->num_seqs, shape->total_tokens).total;
}

int flashinfer_run(const di_gdn_prefill_args* args, void* scratch, size_t scratch_size, di_gdn_stream stream) {
  if (const int status = check_run_args(args); status != DI_GDN_OK) return status;
  const di_gdn_prefill_args& a = *args;
  const di_gdn_geometry& g = a.geometry;
  // The kernel moves q, k, v and out by TMA and the states by 16-byte vectors.
  for (const void* p : {a.q, a.k, a.v, static_cast<const void*>(a.out), static_cast<const void*>(a.initial_state),
                        static_cast<const void*>(a.final_state)})
    if (!aligned(p, 16)) return DI_GDN_INVALID_ARGUMENT;
  if (check_geometry("flashinfer-sm90", g, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  if (a.num_seqs == 0) return DI_GDN_OK;
  di_gdn_device info{};
  if (!current_device(info)) return DI_GDN_LAUNCH_FAILED;
  if (flashinfer_supports(&g, &info, a.state_layout, nullptr, 0) != DI_GDN_OK) return DI_GDN_UNSUPPORTED;
  const ScratchLayout layout = scratch_layout(g, a.num_seqs, a.total_tokens);
  if (scratch == nullptr || scratch_size < layout.total || !aligned(scratch, 256)) return DI_GDN_INVALID_ARGUMENT;
  auto at = [&](size_t offset) { return static_cast<uint8_t*>(scratch) + offset; };
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const bool normalize = (a.flags & DI_GDN_QK_L2NORM) != 0;

  ExternalGdnInputs in;
  in.g = a.g, in.alpha = reinterpret_cast<float*>(at(layout.alpha)), in.gates = a.total_tokens * g.num_v_heads;
  in.state_indices = a.state_indices, in.cu_seqlens = a.cu_seqlens, in.num_seqs = a.num_seqs;
  in.read_initial = a.initial_state != nullptr, in.write_final = a.final_state != nullptr;
  in.read_slot = reinterpret_cast<int32_t*>(at(layout.read_slot));
  in.write_slot = reinterpret_cast<int32_t*>(at(layout.write_slot));
  in.pass_slot = reinterpret_cast<int32_t*>(at(layout.pass_slot));
  if (normalize) {
    in.q = a.q, in.k = a.k, in.q_out = at(layout.q), in.k_out = at(layout.k);
    in.qk_rows = a.total_tokens * g.num_k_heads, in.head_dim = kHeadDim;
  }
  if (launch_external_gdn_inputs(in, s) != cudaSuccess) return DI_GDN_LAUNCH_FAILED;

  // Without a pool the kernel still takes a valid address; the slot lists keep it from being used.
  float* final_pool = a.final_state != nullptr ? a.final_state : reinterpret_cast<float*>(at(layout.alpha));
  const float* initial_pool = a.initial_state != nullptr ? a.initial_state : final_pool;
  // Zero-length sequences keep their state: written here, never by the kernel (it writes NaN for
  // them). Launched before the kernel: they own no slot the kernel writes.
  if (a.final_state != nullptr) {
    const StateCopyThrough copy{initial_pool, a.final_state, in.read_slot, in.pass_slot, a.num_seqs,
                                int64_t(g.num_v_heads) * kHeadDim * kHeadDim};
    if (launch_state_copy_through(copy, s) != cudaSuccess) return DI_GDN_LAUNCH_FAILED;
  }
  if (a.total_tokens == 0) return DI_GDN_OK;
  const di_flashinfer_gdn_launch_args launch{normalize ? at(layout.q) : a.q,
                                   normalize ? at(layout.k) : a.k,
                                   a.v,
                                   a.out,
                                   in.alpha,
                                   a.beta,
                                   final_pool,
                                   initial_pool,
                                   in.read_slot,
                                   in.write_slot,
                                   at(layout.tensormaps),
                                   a.cu_seqlens,
                                   a.total_tokens,
                                   int64_t(kTensormapBytes),
                                   a.num_seqs,
                                   g.num_k_heads,
                                   g.num_v_heads,
                                   kPoolExtent,
                                   a.scale};
  const Variant& v = a.state_layout == DI_GDN_STATE_VK ? bundle().vk : bundle().kv;
  return v.launch(&launch, s) == 0 ? DI_GDN_OK : DI_GDN_LAUNCH_FAILED;
}

}  // namespace

std::string flashinfer_sm90_bundle_dir() {
  const char* dir = std::getenv("DI_GDN_ARTIFACTS");
  return dir != nullptr ? std::string(dir) : std::string();
}

const di_gdn_prefill_backend& gdn_flashinfer_sm90_backend() {
  static const di_gdn_prefill_backend backend{"flashinfer-sm90", &flashinfer_supports, &flashinfer_scratch_bytes,
                                              &flashinfer_run};
  return backend;
}

}  // namespace di::gdn
