// The production dispatch of the GDN chunked prefill, on the host (no GPU needed): the first backend
// that supports a case serves it, a forced backend that cannot is an error naming its reason, an
// unknown name lists the backends, and every refusal says why. (Built with the CUDA parts: the
// backends are CUDA code.)
#if DI_HAVE_CUDA
#include <gtest/gtest.h>

#include "gdn/dispatch.h"
#include "support/expect_error.h"

namespace di::gdn {
namespace {

using testing::throws_error_with;

constexpr di_gdn_geometry kQwen4b{16, 32, 128, 128};
constexpr di_gdn_device kH200{9, 0, 132, 232448};
constexpr di_gdn_device kTuring{7, 5, 40, 65536};

TEST(GdnDispatch, TheProductionOrderServesQwenOnHopper) {
  ASSERT_FALSE(prefill_backends().empty());
  EXPECT_STREQ(choose_prefill_backend(kQwen4b, kH200, DI_GDN_STATE_KV, "").name, "baseline");
  EXPECT_STREQ(choose_prefill_backend(kQwen4b, kH200, DI_GDN_STATE_VK, "").name, "baseline");
  EXPECT_STREQ(choose_prefill_backend({16, 48, 128, 128}, kH200, DI_GDN_STATE_KV, "baseline").name, "baseline");
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
                                {"no GDN prefill backend serves", "sm_75", "baseline refused"}));
  // A forced backend that cannot serve the case is an error, never another backend.
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend({16, 32, 64, 64}, kH200, DI_GDN_STATE_KV, "baseline"); },
                                {"'baseline' was forced but cannot serve", "k_dim 64"}));
  // An unknown name lists what this build has.
  EXPECT_TRUE(throws_error_with([] { choose_prefill_backend(kQwen4b, kH200, DI_GDN_STATE_KV, "fla"); },
                                {"unknown GDN prefill backend 'fla'", "baseline"}));
}

}  // namespace
}  // namespace di::gdn
#endif
