#include "engine/tensor_parallel_runner.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <thread>

#include "core/error.h"

namespace di {

// One rank's thread: runs the jobs it is given in order; its Rank is made and destroyed on it.
struct TensorParallelRunner::Worker {
  std::thread thread;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> jobs;
  bool stop = false;
  Rank parts;

  void loop() {
    for (;;) {
      std::packaged_task<void()> job;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || !jobs.empty(); });
        if (jobs.empty()) break;  // stop, nothing left
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
    // Destroyed on this thread (its device is current here), users before what they use.
    parts.runner.reset();
    parts.model.reset();
    parts.ops.reset();
    parts.weights.reset();
  }

  std::future<void> post(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::future<void> done = task.get_future();
    {
      std::lock_guard lock(mutex);
      jobs.push_back(std::move(task));
    }
    cv.notify_one();
    return done;
  }
};

TensorParallelRunner::TensorParallelRunner(int size, const MakeRank& make, std::function<void()> abort)
    : abort_(std::move(abort)) {
  DI_CHECK(size >= 1, "TensorParallelRunner: {} ranks", size);
  for (int r = 0; r < size; ++r) {
    workers_.push_back(std::make_unique<Worker>());
    Worker* w = workers_.back().get();
    w->thread = std::thread([w] { w->loop(); });
  }
  try {
    on_every_rank([&](int rank, Rank& parts) {
      parts = make(rank);
      DI_CHECK(parts.ops && parts.model && parts.runner, "TensorParallelRunner: rank {} was made incomplete", rank);
    });
  } catch (...) {
    for (auto& w : workers_) {
      {
        std::lock_guard lock(w->mutex);
        w->stop = true;
      }
      w->cv.notify_one();
      w->thread.join();
    }
    throw;
  }
}

TensorParallelRunner::~TensorParallelRunner() {
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mutex);
      w->stop = true;
    }
    w->cv.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

void TensorParallelRunner::fail_rank(std::exception_ptr error) {
  {
    std::lock_guard lock(error_mutex_);
    if (!first_error_) first_error_ = error;
  }
  if (abort_) abort_();
}

void TensorParallelRunner::on_every_rank(const std::function<void(int rank, Rank& parts)>& fn) {
  {
    std::lock_guard lock(error_mutex_);
    if (first_error_) std::rethrow_exception(first_error_);
  }
  std::vector<std::future<void>> done;
  for (int r = 0; r < size(); ++r) {
    Worker* w = workers_[size_t(r)].get();
    done.push_back(w->post([this, &fn, r, w] {
      try {
        fn(r, w->parts);
      } catch (...) {
        fail_rank(std::current_exception());
      }
    }));
  }
  for (auto& d : done) d.get();
  std::lock_guard lock(error_mutex_);
  if (first_error_) std::rethrow_exception(first_error_);
}

void TensorParallelRunner::add(int64_t id, const SamplingParams& sampling) {
  on_every_rank([&](int, Rank& parts) { parts.runner->add(id, sampling); });
}

void TensorParallelRunner::drop_state(int64_t id) {
  on_every_rank([&](int, Rank& parts) { parts.runner->drop_state(id); });
  live_slots_ = workers_[0]->parts.runner->live_slots();
}

void TensorParallelRunner::remove(int64_t id) {
  on_every_rank([&](int, Rank& parts) { parts.runner->remove(id); });
  live_slots_ = workers_[0]->parts.runner->live_slots();
}

std::vector<int32_t> TensorParallelRunner::run(const StepPlan& plan) {
  std::vector<std::vector<int32_t>> tokens(workers_.size());
  on_every_rank([&](int rank, Rank& parts) { tokens[size_t(rank)] = parts.runner->run(plan); });
  for (int r = 1; r < size(); ++r)
    if (tokens[size_t(r)] != tokens[0])
      fail("tensor parallelism: rank {} sampled other tokens than rank 0 (the ranks' logits differ)", r);
  live_slots_ = workers_[0]->parts.runner->live_slots();
  logprobs_ = workers_[0]->parts.runner->last_logprobs();
  return tokens[0];
}

}  // namespace di
