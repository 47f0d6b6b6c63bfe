// libdeltainfer_gdn.so, loaded as an outside program would load it (dlopen, dlsym), on the host (no
// GPU needed): it lists the same backends as this build's dispatch, in the same order, each with its
// four entry points; its verdicts match the in-process backends'; its build info is JSON with a
// commit; run() refuses a wrong ABI version before touching CUDA; and it exports no C++ symbol.
// (Built with the CUDA parts: the library exists only there; CMake passes its path as DI_GDN_LIBRARY.)
#if DI_HAVE_CUDA
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <deltainfer/gdn.h>

#include "gdn/dispatch.h"

namespace di::gdn {
namespace {

using BackendsFn = const di_gdn_prefill_backend* const* (*)(int32_t*);
using BuildInfoFn = const char* (*)();

class GdnCApi : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(DI_GDN_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << "dlopen(" << DI_GDN_LIBRARY << "): " << dlerror();
    backends_fn_ = reinterpret_cast<BackendsFn>(dlsym(handle_, "di_gdn_prefill_backends"));
    build_info_fn_ = reinterpret_cast<BuildInfoFn>(dlsym(handle_, "di_gdn_build_info"));
    ASSERT_NE(backends_fn_, nullptr) << "di_gdn_prefill_backends is not exported";
    ASSERT_NE(build_info_fn_, nullptr) << "di_gdn_build_info is not exported";
  }
  void TearDown() override {
    if (handle_) dlclose(handle_);
  }

  // The library's backends (the count checked against the returned array).
  std::vector<const di_gdn_prefill_backend*> library_backends() {
    int32_t count = -1;
    const di_gdn_prefill_backend* const* list = backends_fn_(&count);
    EXPECT_GE(count, 0);
    if (count > 0) {
      EXPECT_NE(list, nullptr);
    }
    return list ? std::vector<const di_gdn_prefill_backend*>(list, list + count)
                : std::vector<const di_gdn_prefill_backend*>{};
  }

  void* handle_ = nullptr;
  BackendsFn backends_fn_ = nullptr;
  BuildInfoFn build_info_fn_ = nullptr;
};

TEST_F(GdnCApi, ListsThisBuildsBackendsInProductionOrder) {
  const std::vector<const di_gdn_prefill_backend*> got = library_backends();
  const std::vector<const di_gdn_prefill_backend*>& want = prefill_backends();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("backend " + std::to_string(i) + " (" + want[i]->name + ")");
    ASSERT_NE(got[i], nullptr);
    ASSERT_NE(got[i]->name, nullptr);
    EXPECT_STREQ(got[i]->name, want[i]->name);
    EXPECT_NE(got[i]->supports, nullptr);
    EXPECT_NE(got[i]->scratch_bytes, nullptr);
    EXPECT_NE(got[i]->run, nullptr);
  }
  // The array stays put: a second call returns the same one.
  int32_t count = 0;
  EXPECT_EQ(backends_fn_(&count), backends_fn_(nullptr));
}

// The library's copy of each backend answers supports() and scratch_bytes() as this binary's does
// (host-only entry points: no GPU needed).
TEST_F(GdnCApi, VerdictsMatchTheInProcessBackends) {
  const std::vector<const di_gdn_prefill_backend*> got = library_backends();
  const std::vector<const di_gdn_prefill_backend*>& want = prefill_backends();
  ASSERT_EQ(got.size(), want.size());
  const di_gdn_device devices[] = {{9, 0, 132, 232448}, {8, 0, 108, 166912}, {7, 5, 40, 65536}};
  const di_gdn_geometry geometries[] = {{16, 32, 128, 128}, {16, 48, 128, 128}, {16, 32, 64, 64}, {16, 40, 128, 128}};
  for (size_t i = 0; i < want.size(); ++i)
    for (const di_gdn_device& device : devices)
      for (const di_gdn_geometry& geometry : geometries)
        for (di_gdn_state_layout layout : {DI_GDN_STATE_KV, DI_GDN_STATE_VK}) {
          std::array<char, 512> reason{};
          const int status = got[i]->supports(&geometry, &device, layout, reason.data(), reason.size());
          const Verdict v = ask(*want[i], geometry, device, layout);
          SCOPED_TRACE(std::string(want[i]->name) + ", sm_" + std::to_string(device.sm_major) +
                       std::to_string(device.sm_minor) + ", K " + std::to_string(geometry.k_dim) + ", Hv " +
                       std::to_string(geometry.num_v_heads) + ", " + layout_name(layout));
          EXPECT_EQ(status == DI_GDN_OK, v.ok);
          if (!v.ok) {
            EXPECT_EQ(std::string(reason.data()), v.reason);
          }
          const di_gdn_prefill_shape shape{geometry, 3, 1000};
          EXPECT_EQ(got[i]->scratch_bytes(&shape), want[i]->scratch_bytes(&shape));
        }
}

TEST_F(GdnCApi, BuildInfoIsJsonWithACommit) {
  const char* info = build_info_fn_();
  ASSERT_NE(info, nullptr);
  const nlohmann::json j = nlohmann::json::parse(info, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << info;
  ASSERT_TRUE(j.contains("commit")) << info;
  EXPECT_TRUE(j["commit"].is_string()) << info;
  EXPECT_FALSE(j["commit"].get<std::string>().empty()) << info;
  EXPECT_TRUE(j.contains("dirty")) << info;
  EXPECT_EQ(j.value("cuda", false), true) << info;
  EXPECT_EQ(j.value("abi_version", -1), DI_GDN_ABI_VERSION) << info;
}

// Every backend checks its arguments before any CUDA call (the baseline: run() returns on a wrong
// abi_version first thing), so this needs no GPU.
TEST_F(GdnCApi, RunRefusesAWrongAbiVersion) {
  for (const di_gdn_prefill_backend* b : library_backends()) {
    SCOPED_TRACE(b->name);
    di_gdn_prefill_args args{};
    args.abi_version = DI_GDN_ABI_VERSION + 1;
    args.geometry = {16, 32, 128, 128};
    EXPECT_EQ(b->run(&args, nullptr, 0, nullptr), DI_GDN_INVALID_ARGUMENT);
    args.abi_version = 0;
    EXPECT_EQ(b->run(&args, nullptr, 0, nullptr), DI_GDN_INVALID_ARGUMENT);
    EXPECT_EQ(b->run(nullptr, nullptr, 0, nullptr), DI_GDN_INVALID_ARGUMENT);
  }
}

// The export policy (src/gdn/exports.map): C++ and CUDA runtime symbols stay inside the library.
TEST_F(GdnCApi, ExportsNoCxxOrCudaRuntimeSymbols) {
  for (const char* hidden : {"_ZN2di3gdn16prefill_backendsEv",  // di::gdn::prefill_backends()
                             "_ZN2di10build_infoEv",              // di::build_info()
                             "cudaLaunchKernel", "cudaMemcpyAsync"})
    EXPECT_EQ(dlsym(handle_, hidden), nullptr) << hidden << " is exported";
}

}  // namespace
}  // namespace di::gdn
#endif
