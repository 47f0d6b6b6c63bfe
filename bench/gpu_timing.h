#pragma once
// Timing on the GPU for the benchmarks: CUDA events around each repetition, warm-up first, the
// median of many (GPU.md "Measuring"), and the provenance every report carries.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cuda.h"
#include "core/provenance.h"

namespace di::bench {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
};

// Runs fn(rep) `warmup` times, then `reps` times with events around each; fn enqueues on stream.
inline Timing time_on_stream(cudaStream_t stream, int warmup, int reps, const std::function<void(int)>& fn) {
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t start, stop;
  DI_CUDA_CHECK(cudaEventCreate(&start));
  DI_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    DI_CUDA_CHECK(cudaEventRecord(start, stream));
    fn(warmup + i);
    DI_CUDA_CHECK(cudaEventRecord(stop, stream));
    DI_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back(), reps};
}

// Build and device facts for the report header.
inline nlohmann::json provenance() {
  const cuda::DeviceInfo d = cuda::current_device();
  return {{"build", nlohmann::json::parse(build_info_json())},
          {"device", cuda::describe(d)},
          {"sms", d.num_sms},
          {"driver", cuda::driver_version()}};
}

// The measured ceilings of the project's H200 (shared GPU.md): what "fraction of peak" divides by.
inline constexpr double kBf16TensorTflops = 784.0;
inline constexpr double kCopyTBps = 4.3;

}  // namespace di::bench
