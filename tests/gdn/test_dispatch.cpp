// The production dispatch of the GDN chunked prefill, on the host (no GPU needed): the first backend
// that supports a case serves it, a forced backend that cannot is an error naming its reason, an
// unknown name lists the backends, and every refusal says why. (Built with the CUDA parts: the
// backends are CUDA code.)
#if DI_HAVE_CUDA
#include <gtest/gtest.h>

#include "gdn/baseline_prefill.h"
#include "gdn/dispatch.h"
#include "gdn/flashinfer_sm90.h"
#include "gdn/sm90_prefill.h"
#include "support/expect_error.h"

namespace di::gdn {
namespace {

using testing::throws_error_with;

constexpr di_gdn_geometry kQwen4b{16, 32, 128, 128};
constexpr di_gdn_device kH200{9, 0, 132, 232448};
constexpr di_gdn_device kTuring{7, 5, 40, 65536};
constexpr di_gdn_device kA100{8, 0, 108, 166912};
constexpr di_gdn_device kB200{10, 0, 148, 232448};

TEST(GdnDispatch, TheProductionOrderIsFastestFirst) {
  ASSERT_EQ(prefill_backends().size(), 3u);
  EXPECT_EQ(prefill_backends()[0], &gdn_sm90_backend());
  EXPECT_EQ(prefill_backends()[1], &gdn_baseline_backend());
  EXPECT_EQ(prefill_backends()[2], &gdn_flashinfer_sm90_backend());
}

TEST(GdnDispatch, HopperGetsSm90OtherGpusTheBaseline) {
  // A build without sm_90a code (CMAKE_CUDA_ARCHITECTURES lacking 90a) has sm90 refuse, saying so.
  const Verdict sm90 = ask(gdn_sm90_backend(), kQwen4b, kH200, DI_GDN_STATE_KV);
  if (!sm90.ok) {
    EXPECT_NE(sm90.reason.find("no sm_90a code"), std::string::npos) << sm90.reason;
  }
  const char* hopper = sm90.ok ? "sm90" : "baseline";
  for (di_gdn_state_layout layout : {DI_GDN_STATE_KV, DI_GDN_STATE_VK})
    for (di_gdn_geometry g : {kQwen4b, di_gdn_geometry{16, 48, 128, 128}, di_gdn_geometry{16, 64, 128, 128},
                              di_gdn_geometry{4, 16, 128, 128}, di_gdn_geometry{2, 8, 128, 128}}) {
      EXPECT_STREQ(choose_prefill_backend(g, kH200, layout, "").name, hopper);
      EXPECT_STREQ(choose_prefill_backend(g, kA100, layout, "").name, "baseline");
      EXPECT_STREQ(choose_prefill_backend(g, kB200, layout, "").name, "baseline");
    }
  // The rollback path: the baseline forced on Hopper.
  EXPECT_STREQ(choose_prefill_backend(kQwen4b, kH200, DI_GDN_STATE_KV, "baseline").name, "baseline");
}

TEST(GdnDispatch, RefusalsNameTheReason) {
  const Verdict dims = ask(*prefill_backends()[0], {16, 32, 64, 128}, kH200, DI_GDN_STATE_KV);
  EXPECT_FALSE(dims.ok);
  EXPECT_NE(dims.reason.find("k_dim 64"), std::string::npos) << dims.reason;
  const Verdict ratio = ask(*prefill_backends()[0], {16, 40, 128, 128}, kH200, DI_GDN_STATE_KV);
  EXPECT_FALSE(ratio.ok);
  EXPECT_NE(ratio.reason.find("multiple"), std::string::npos) << ratio.reason;
  const Verdict arch = ask(*prefill_backends()[0], kQwen4b, kTuring, DI_GDN_STATE_KV);
  EXPECT_FALSE(arch.ok);
  EXPECT_NE(arch.reason.find("sm_75"), std::string::npos) << arch.reason;
}

TEST(GdnDispatch, NoSilentFallback) {
  // Nothing serves sm_75: the error lists each backend's reason.
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend(kQwen4b, kTuring, DI_GDN_STATE_KV, ""); },
                                {"no GDN prefill backend serves", "sm_75", "sm90 refused", "baseline refused"}));
  // sm90 forced on an A100 names the architecture.
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend(kQwen4b, kA100, DI_GDN_STATE_KV, "sm90"); },
                                {"'sm90' was forced but cannot serve", "sm_80"}));
  // A forced backend that cannot serve the case is an error, never another backend.
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend({16, 32, 64, 64}, kH200, DI_GDN_STATE_KV, "baseline"); },
                                {"'baseline' was forced but cannot serve", "k_dim 64"}));
  // An unknown name lists what this build has.
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend(kQwen4b, kH200, DI_GDN_STATE_KV, "fla"); },
                                {"unknown GDN prefill backend 'fla'", "sm90", "baseline"}));
}

TEST(GdnDispatch, TheExternalBackendServesOnlyWhenForcedAndSaysWhyNot) {
  // Last in the order: deltainfer's own backends serve every case it could.
  for (const di_gdn_device& device : {kH200, kA100})
    EXPECT_STRNE(choose_prefill_backend(kQwen4b, device, DI_GDN_STATE_KV, "").name, "flashinfer-sm90");
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend(kQwen4b, kA100, DI_GDN_STATE_VK, "flashinfer-sm90"); },
                                {"'flashinfer-sm90' was forced but cannot serve", "compute capability 8.0"}));
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend({16, 32, 64, 64}, kH200, DI_GDN_STATE_KV, "flashinfer-sm90"); },
                                {"'flashinfer-sm90' was forced but cannot serve", "k_dim 64"}));
  if (flashinfer_sm90_bundle_dir().empty()) {
    EXPECT_TRUE(throws_error_with([] { choose_prefill_backend(kQwen4b, kH200, DI_GDN_STATE_KV, "flashinfer-sm90"); },
                                  {"'flashinfer-sm90' was forced but cannot serve", "DI_GDN_ARTIFACTS"}));
  }
}

}  // namespace
}  // namespace di::gdn
#endif
