// SPDX-License-Identifier: Apache-2.0
// tests/support/sampler.hpp: a measurement's sampler. It calls a function
// on a thread of its own, once per period, until it is stopped, and counts
// its samples so that a test can wait for a number of them. The period is a
// measurement's resolution: no check rests on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace agentstate::test {

class sampler {
public:
  /// Starts sampling at once: `sample` runs first now, then once per
  /// `period` (plus its own run time). `sample` must not throw.
  sampler(std::function<void()> sample, std::chrono::microseconds period)
    : sample_(std::move(sample)), period_(period), thread_([this] { run(); }) {}
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;
  ~sampler() { stop(); }

  /// Ends the sampling; returns once no sample runs. Idempotent.
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mtx_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

  /// Samples taken so far.
  int count() {
    std::lock_guard<std::mutex> lk(mtx_);
    return count_;
  }

  /// Blocks until `n` more samples than now have been taken; false if that
  /// has not happened within `limit` or the sampler stopped first.
  bool wait_more(int n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lk(mtx_);
    const int want = count_ + n;
    return cv_.wait_for(lk, limit, [&] { return count_ >= want || stopping_; }) && count_ >= want;
  }

private:
  void run() {
    std::unique_lock<std::mutex> lk(mtx_);
    while (!stopping_) {
      lk.unlock();
      sample_();
      lk.lock();
      ++count_;
      cv_.notify_all();
      cv_.wait_for(lk, period_, [this] { return stopping_; });
    }
  }

  std::function<void()> sample_;
  std::chrono::microseconds period_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int count_ = 0;
  std::thread thread_; // last: starts once the members above exist
};

} // namespace agentstate::test
