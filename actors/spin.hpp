// actors/spin.hpp: bounded polling before a thread parks.
//
// On a small VM a parked thread costs ~35-40 us to wake (the guest idles its
// vCPU; the wake-up is an IPI), several times the work of an append. A
// thread that expects its answer within microseconds polls first. Each poll
// yields the CPU (sched_yield), so on a machine with fewer cores than busy
// threads the poller hands its core to whoever has work instead of holding
// it for a time slice.
#pragma once

#include <algorithm>
#include <chrono>

#include <sched.h>

namespace agentstate::detail {

/// Polls `ready()` until it returns true or `budget` has passed, and past
/// `budget` for as long as `extend()` holds, up to `cap` in all (a cap below
/// `budget` counts as `budget`); yields the CPU between polls. Returns the
/// last value of `ready()`. A zero budget polls once. Costs up to `cap` of
/// CPU; never blocks.
template <class Ready, class Extend>
bool spin_until(Ready&& ready, std::chrono::microseconds budget, Extend&& extend,
                std::chrono::microseconds cap) {
  if (ready())
    return true;
  if (budget.count() <= 0)
    return false;
  const auto start = std::chrono::steady_clock::now();
  const auto soft = start + budget;
  const auto hard = start + std::max(budget, cap);
  for (;;) {
    sched_yield();
    if (ready())
      return true;
    auto now = std::chrono::steady_clock::now();
    if (now >= hard || (now >= soft && !extend()))
      return false;
  }
}

/// As above without an extension: polls for up to `budget`.
template <class Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds budget) {
  return spin_until(ready, budget, [] { return false; }, budget);
}

} // namespace agentstate::detail
