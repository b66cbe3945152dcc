// SPDX-License-Identifier: Apache-2.0
// actors/spin.hpp: bounded polling before a thread parks, for threads that
// expect an answer within microseconds (waking a parked thread costs more;
// docs/performance.md, "Polling"). Each poll yields the CPU.
#pragma once

#include <algorithm>
#include <chrono>

#include <sched.h>

namespace agentstate::detail {

/// Polls `ready()` until it returns true or `budget` has passed, and past
/// `budget` for as long as `extend()` holds, up to `cap` in all (a cap below
/// `budget` counts as `budget`); yields the CPU between polls. Returns the
/// last value of `ready()`. A zero budget polls once. Costs up to `cap` of
/// CPU; never blocks. Time is `Clock`'s (a test's own clock shows the
/// budgets without measuring time).
template <class Clock = std::chrono::steady_clock, class Ready, class Extend>
bool spin_until(Ready&& ready, std::chrono::microseconds budget, Extend&& extend,
                std::chrono::microseconds cap) {
  if (ready())
    return true;
  if (budget.count() <= 0)
    return false;
  const auto start = Clock::now();
  const auto soft = start + budget;
  const auto hard = start + std::max(budget, cap);
  for (;;) {
    sched_yield();
    if (ready())
      return true;
    auto now = Clock::now();
    if (now >= hard || (now >= soft && !extend()))
      return false;
  }
}

/// As above without an extension: polls for up to `budget`.
template <class Clock = std::chrono::steady_clock, class Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds budget) {
  return spin_until<Clock>(
    ready, budget, [] { return false; }, budget);
}

} // namespace agentstate::detail
