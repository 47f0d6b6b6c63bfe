// The small-batch linear kernel's parameter checks (host code; the kernel is small_batch_linear.cu).
#include <fmt/format.h>

#include "kernels/gemm/small_batch_linear.h"

namespace di::kernels {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

std::string small_batch_linear_error(const SmallBatchLinearParams& p) {
  if (p.rows < 1 || p.rows > SmallBatchLinearParams::kMaxRows)
    return fmt::format("{} rows (1 to {})", p.rows, SmallBatchLinearParams::kMaxRows);
  if (p.in_features <= 0 || p.in_features % 8 != 0 || p.in_features > (int64_t(1) << 30))
    return fmt::format("{} input features (a positive multiple of 8, at most 2^30)", p.in_features);
  if (!p.x || !aligned16(p.x)) return "the input is null or not 16-byte aligned";
  if (p.num_outputs < 1 || p.num_outputs > SmallBatchLinearParams::kMaxOutputs)
    return fmt::format("{} outputs (1 to {})", p.num_outputs, SmallBatchLinearParams::kMaxOutputs);
  if (p.epilogue == SmallBatchEpilogue::swiglu &&
      (p.num_outputs != 2 || p.outputs[0].features != p.outputs[1].features))
    return "swiglu takes two weights (gate, up) of one output width";
  for (int i = 0; i < p.num_outputs; ++i) {
    const auto& o = p.outputs[i];
    if (o.features <= 0) return fmt::format("output {} has {} features", i, o.features);
    if (!o.weight || !aligned16(o.weight)) return fmt::format("weight {} is null or not 16-byte aligned", i);
    const bool written = p.epilogue != SmallBatchEpilogue::swiglu || i == 0;
    if (written && !o.out) return fmt::format("output {} is null", i);
  }
  using Input = SmallBatchInput;
  if (p.epilogue == SmallBatchEpilogue::swiglu && p.input != Input::plain && p.input != Input::rms_norm)
    return "swiglu takes a plain or RMS-normed input";
  const bool norm = p.input == Input::rms_norm || p.input == Input::gated_rms_norm;
  if (norm && (!p.norm_weight || !aligned16(p.norm_weight))) return "the norm weight is null or not 16-byte aligned";
  if (p.input == Input::rms_norm && (!p.input_sum_sq || p.input_sum_sq_parts <= 0))
    return "an RMS-normed input needs its rows' partial sums of squares";
  const bool gated = p.input == Input::gated_rms_norm || p.input == Input::sigmoid_gate;
  if (gated && (!p.gate || !aligned16(p.gate))) return "the gate is null or not 16-byte aligned";
  if (p.input == Input::gated_rms_norm) {
    if (p.group <= 0 || p.group % 8 != 0 || p.in_features % p.group != 0)
      return fmt::format("a norm group of {} (a multiple of 8 that divides the {} input features)", p.group,
                         p.in_features);
    if (p.rows * (p.in_features / p.group) > SmallBatchLinearParams::kMaxNormScales)
      return fmt::format("{} rows of {} norm groups (at most {} in all)", p.rows, p.in_features / p.group,
                         SmallBatchLinearParams::kMaxNormScales);
  }
  if (p.residual && (p.epilogue != SmallBatchEpilogue::bf16 || p.num_outputs != 1))
    return "a residual is added to one bf16 output only";
  if (p.out_sum_sq && !p.residual) return "sums of squares are written for a residual output only";
  if (p.steps_in_flight != 0 && p.steps_in_flight != 4 && p.steps_in_flight != 8)
    return fmt::format("{} steps in flight (0 for the kernel's choice, 4 or 8)", p.steps_in_flight);
  if (p.steps_in_flight == 8 && (p.rows > 8 ? p.weight_tile_rows != 8 : p.epilogue == SmallBatchEpilogue::swiglu))
    return "8 steps in flight take one weight per tile and up to 8 rows, or 8-row weight tiles";
  if (p.weight_tile_rows != 0 && p.weight_tile_rows != 8 && p.weight_tile_rows != 16)
    return fmt::format("{} weight rows a tile (0 for the kernel's choice, 8 or 16)", p.weight_tile_rows);
  if (p.weight_tile_rows == 8 && (p.epilogue == SmallBatchEpilogue::swiglu || p.out_sum_sq != nullptr))
    return "8-row weight tiles take one weight a tile, without sums of squares";
  if (small_batch_staging_bytes(p) > kMaxSmallBatchStagingBytes)
    return fmt::format("{} rows of {} features to stage for the input op (at most {} bytes)", p.rows, p.in_features,
                       kMaxSmallBatchStagingBytes);
  if (p.max_blocks < 0) return fmt::format("a cap of {} blocks (0 for none)", p.max_blocks);
  return "";
}

}  // namespace di::kernels
