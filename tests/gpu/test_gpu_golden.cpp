// Golden gates of the GPU engine: the bf16 run of transformers against CudaOps, with the same
// suite, tolerances and margin rule as the CPU engine (support/golden_suite.h), for the production
// GDN prefill dispatch and for every GDN prefill backend forced.
#include "support/golden_suite.h"

namespace di::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, GoldenTest,
                         ::testing::Values(GoldenCase{"bf16", "short", "cuda"}, GoldenCase{"bf16", "long", "cuda"},
                                           GoldenCase{"bf16", "short", "cuda", "baseline"},
                                           GoldenCase{"bf16", "long", "cuda", "baseline"},
                                           GoldenCase{"bf16", "short", "cuda", "sm90"},
                                           GoldenCase{"bf16", "long", "cuda", "sm90"},
                                           GoldenCase{"bf16", "short", "cuda", "flashinfer-sm90"},
                                           GoldenCase{"bf16", "long", "cuda", "flashinfer-sm90"}),
                         case_name);

}  // namespace
}  // namespace di::golden
