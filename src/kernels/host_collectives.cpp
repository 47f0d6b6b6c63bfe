#include "kernels/host_collectives.h"

#include <algorithm>

#include "core/error.h"

namespace di {

HostCollectives::HostCollectives(int size) : size_(size), posted_(size_t(std::max(size, 1)), nullptr) {
  DI_CHECK(size >= 1, "HostCollectives: {} ranks", size);
}

void HostCollectives::wait_all() {
  std::unique_lock lock(mutex_);
  if (aborted_) fail("tensor-parallel collective: another rank failed");
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) fail("tensor-parallel collective: another rank failed");
}

void HostCollectives::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

// Three phases: post the buffers; read every rank's (nobody writes); write the result (nobody reads).
void HostCollectives::all_reduce_sum(int rank, std::span<float> data) {
  DI_CHECK(rank >= 0 && rank < size_, "all_reduce_sum: rank {} of {}", rank, size_);
  if (size_ == 1) return;
  posted_[size_t(rank)] = data.data();
  wait_all();
  std::vector<float> sum(data.size(), 0.0f);
  for (int r = 0; r < size_; ++r) {
    const float* src = posted_[size_t(r)];
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += src[i];
  }
  wait_all();
  std::copy(sum.begin(), sum.end(), data.begin());
  wait_all();
}

void HostCollectives::all_gather(int rank, std::span<const float> in, std::span<float> out) {
  DI_CHECK(rank >= 0 && rank < size_, "all_gather: rank {} of {}", rank, size_);
  DI_CHECK(out.size() == in.size() * size_t(size_), "all_gather: {} elements out for {} in from {} ranks", out.size(),
           in.size(), size_);
  posted_[size_t(rank)] = in.data();
  wait_all();
  for (int r = 0; r < size_; ++r) std::copy_n(posted_[size_t(r)], in.size(), out.begin() + ptrdiff_t(r * in.size()));
  wait_all();
}

}  // namespace di
