// SPDX-License-Identifier: Apache-2.0
// actors/block_on.hpp: the blocking form of an async engine call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "actors/core.hpp"
#include "actors/spin.hpp"

namespace agentstate::detail {

// One blocking call's answer slot. Shared with the callback, which may be
// destroyed on an actor's thread after the caller has returned.
template <class T>
struct answer_slot {
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::optional<result<T>> value;
};

/// Runs `start(callback)` and waits for the callback's result. The first
/// waiter of the engine polls for up to opts.spin_wait (commit_poll while the
/// writer is committing) before it sleeps; any other waiter sleeps at once
/// (64 polling threads on 2 cores would starve the actors they wait for).
template <class T, class Start>
result<T> block_on(engine_core& core, Start&& start) {
  auto slot = std::make_shared<answer_slot<T>>();
  start([slot](result<T> r) {
    std::lock_guard<std::mutex> g(slot->m);
    slot->value.emplace(std::move(r));
    slot->done.store(true, std::memory_order_release);
    slot->cv.notify_one();
  });
  auto ready = [&slot] { return slot->done.load(std::memory_order_acquire); };
  if (!ready() && core.opts.spin_wait.count() > 0) {
    if (core.spinners.fetch_add(1, std::memory_order_acq_rel) == 0)
      spin_until(
        ready, core.opts.spin_wait,
        [&core] { return core.committing.load(std::memory_order_relaxed); },
        commit_poll(core.opts));
    core.spinners.fetch_sub(1, std::memory_order_acq_rel);
  }
  std::unique_lock<std::mutex> g(slot->m);
  slot->cv.wait(g, ready);
  return std::move(*slot->value);
}

} // namespace agentstate::detail
