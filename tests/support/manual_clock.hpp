// SPDX-License-Identifier: Apache-2.0
// tests/support/manual_clock.hpp: a wall clock that moves only when the test
// moves it, for options::wall_clock: expiry (T1-T3) and change-log retention
// by age are tested by advancing it, never by waiting on the system clock.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "agentstate/options.hpp"

namespace agentstate::test {

/// Copies share one time. Safe to read and advance from any thread.
class manual_clock {
public:
  /// Starts at `start` epoch seconds (by default a fixed time in 2027,
  /// unrelated to the system clock).
  explicit manual_clock(double start = 1'800'000'000.0)
    : t_(std::make_shared<std::atomic<double>>(start)) {}

  double now() const { return t_->load(); }
  /// Moves the time on by `seconds`; returns the new time.
  double advance(double seconds) const {
    double cur = t_->load();
    while (!t_->compare_exchange_weak(cur, cur + seconds)) {
    }
    return cur + seconds;
  }
  /// Sets the time to `t` epoch seconds.
  void set(double t) const { t_->store(t); }
  /// Gives `o` this clock as its wall clock.
  void install(options& o) const {
    auto t = t_;
    o.wall_clock = [t] { return t->load(); };
  }

private:
  std::shared_ptr<std::atomic<double>> t_;
};

} // namespace agentstate::test
