#pragma once
// Collectives between the ranks of a tensor-parallel CPU run, one thread per rank in one process:
// what NCCL is to the CUDA ops. Every rank calls each collective in the same order; a call returns
// when all ranks have made it. Sums add the ranks in rank order, so every rank gets the same bits
// whatever the threads' timing.
//
// A rank that fails calls abort(): the others, waiting in a collective, then throw instead of
// waiting for ever, and so does every later call.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace di {

class HostCollectives {
 public:
  explicit HostCollectives(int size);

  int size() const { return size_; }

  // data = sum over ranks of each rank's data (same length on every rank).
  void all_reduce_sum(int rank, std::span<float> data);
  // out = the ranks' `in` end to end in rank order (out has size() * in.size() elements).
  void all_gather(int rank, std::span<const float> in, std::span<float> out);
  void abort();

 private:
  void wait_all();  // a reusable barrier that throws once aborted

  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const float*> posted_;  // each rank's buffer during a collective
};

}  // namespace di
