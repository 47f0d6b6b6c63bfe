// Golden gates of the GPU engine: the bf16 run of transformers against CudaOps, with the same
// suite, tolerances and margin rule as the CPU engine (support/golden_suite.h).
#include "support/golden_suite.h"

namespace di::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, GoldenTest,
                         ::testing::Values(GoldenCase{"bf16", "short", "cuda"}, GoldenCase{"bf16", "long", "cuda"}),
                         case_name);

}  // namespace
}  // namespace di::golden
