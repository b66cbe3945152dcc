// SPDX-License-Identifier: Apache-2.0
// tests/support/counter.hpp: a count of completions (callbacks run on other
// threads) that a test waits for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace agentstate::test {

/// Counts completions; wait() blocks until a number is reached.
struct counter {
  std::mutex mtx;
  std::condition_variable cv;
  std::size_t n = 0;

  void add() {
    std::lock_guard<std::mutex> g(mtx);
    ++n;
    cv.notify_all();
  }
  /// True once `want` completions came, false after `t`.
  bool wait(std::size_t want, std::chrono::milliseconds t = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> lock(mtx);
    return cv.wait_for(lock, t, [&] { return n >= want; });
  }
  std::size_t value() {
    std::lock_guard<std::mutex> g(mtx);
    return n;
  }
};

} // namespace agentstate::test
