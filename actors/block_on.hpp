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

/// The turn of the engine's one polling waiter (options::spin_wait): taken,
/// when free, before the call starts; where the scheduler allows, the
/// waiter also helps (begin_helping), so that the job its own call queues is
/// left to it rather than waking a parked worker. Released before the
/// waiter sleeps.
class poll_turn {
public:
  explicit poll_turn(engine_core& core) noexcept : core_(core) {
    if (core.opts.spin_wait.count() <= 0)
      return;
    if (core.spinners.fetch_add(1, std::memory_order_acq_rel) != 0) {
      core.spinners.fetch_sub(1, std::memory_order_acq_rel);
      return;
    }
    polls_ = true;
    helps_ = begin_helping(core);
  }
  poll_turn(const poll_turn&) = delete;
  poll_turn& operator=(const poll_turn&) = delete;
  ~poll_turn() { release(); }

  bool polls() const noexcept { return polls_; }
  bool helps() const noexcept { return helps_; }

  void release() noexcept {
    if (helps_)
      end_helping(core_);
    if (polls_)
      core_.spinners.fetch_sub(1, std::memory_order_acq_rel);
    helps_ = polls_ = false;
  }

private:
  engine_core& core_;
  bool polls_ = false;
  bool helps_ = false;
};

/// Runs `start(callback)` and waits for the callback's result. The first
/// waiter of the engine polls for up to opts.spin_wait (commit_poll while the
/// writer is committing) before it sleeps, running queued actor jobs
/// meanwhile where the scheduler allows (help_until); any other waiter
/// sleeps at once (64 polling threads on 2 cores would starve the actors
/// they wait for). Must not be called on an engine worker thread.
template <class T, class Start>
result<T> block_on(engine_core& core, Start&& start) {
  auto slot = std::make_shared<answer_slot<T>>();
  poll_turn turn(core);
  start([slot](result<T> r) {
    std::lock_guard<std::mutex> g(slot->m);
    slot->value.emplace(std::move(r));
    slot->done.store(true, std::memory_order_release);
    slot->cv.notify_one();
  });
  auto ready = [&slot] { return slot->done.load(std::memory_order_acquire); };
  if (!ready() && turn.polls()) {
    if (turn.helps())
      help_until(core, slot->done, core.opts.spin_wait, commit_poll(core.opts));
    else
      spin_until(
        ready, core.opts.spin_wait,
        [&core] { return core.committing.load(std::memory_order_relaxed); },
        commit_poll(core.opts));
  }
  turn.release();
  std::unique_lock<std::mutex> g(slot->m);
  slot->cv.wait(g, ready);
  return std::move(*slot->value);
}

} // namespace agentstate::detail
