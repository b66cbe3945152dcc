// SPDX-License-Identifier: Apache-2.0
// actors/polling_sharing.hpp: the scheduler policy behind options::scheduler
// "sharing" when options::spin_wait is above zero. It is CAF's work-sharing
// policy (one central job queue, FIFO) with three changes:
//   * one idle worker at a time polls the queue for up to spin_wait before
//     it parks on the condition variable; the others park at once
//     (actors/spin.hpp says why polling pays on small VMs, and why only one);
//   * enqueue signals the condition variable only when a parked worker is
//     needed: more jobs queued than workers polling;
//   * the queue is a deque, so an enqueue does not allocate (CAF's policy
//     allocates a list node per job);
//   * before each job a worker runs the tasks callbacks deferred to it
//     (actors/worker_idle.hpp) when the queue is empty or a bound is
//     reached, and always before it polls or parks.
// With spin_wait 0 the engine uses CAF's own work_sharing instead.
// Only actors/engine.cpp includes this (it pulls in CAF's scheduler headers).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "actors/spin.hpp"
#include "actors/worker_idle.hpp"

namespace agentstate::detail {

class polling_sharing : public caf::policy::unprofiled {
public:
  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {}

    std::mutex lock;
    std::condition_variable cv;
    std::deque<caf::resumable*> queue; ///< guarded by `lock`
    std::size_t parked = 0; ///< workers waiting on `cv`; guarded by `lock`
    std::atomic<std::size_t> size{0}; ///< queue.size(), for polling without `lock`
    std::atomic<std::size_t> pollers{0}; ///< workers polling: 0 or 1
    /// Set once, before the coordinator starts its workers: the polling
    /// budget, and past it, polling while *committing holds, up to
    /// commit_poll in all (a commit's replies are on their way).
    std::chrono::microseconds spin{0};
    const std::atomic<bool>* committing = nullptr;
    std::chrono::microseconds commit_poll{0};
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {}
  };

  template <class Coordinator>
  void enqueue(Coordinator* self, caf::resumable* job) {
    auto& q = d(self);
    bool wake;
    {
      std::lock_guard<std::mutex> guard(q.lock);
      q.queue.push_back(job);
      q.size.store(q.queue.size(), std::memory_order_release);
      // A parked worker sees `parked` raised under `lock` before it waits,
      // so no wake-up is lost; a poller takes at most one of the jobs.
      wake = q.parked > 0 && q.queue.size() > q.pollers.load(std::memory_order_acquire);
    }
    if (wake)
      q.cv.notify_one();
  }

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    enqueue(self, job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }

  /// The next job, in queue order; blocks until there is one. Polls for up
  /// to `spin` (commit_poll while the writer commits) first when no other
  /// worker is polling.
  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& q = d(self->parent());
    worker_idle_point(q.size.load(std::memory_order_acquire) == 0);
    std::size_t none = 0;
    if (q.size.load(std::memory_order_acquire) == 0
        && q.pollers.compare_exchange_strong(none, 1, std::memory_order_acq_rel)) {
      // The job seen queued above may have gone to another worker: what
      // this one deferred runs before it polls.
      worker_idle_point(true);
      spin_until([&q] { return q.size.load(std::memory_order_acquire) > 0; }, q.spin,
                 [&q] { return q.committing && q.committing->load(std::memory_order_relaxed); },
                 q.commit_poll);
      q.pollers.store(0, std::memory_order_release);
    }
    std::unique_lock<std::mutex> guard(q.lock);
    while (q.queue.empty()) {
      if (has_deferred_tasks()) { // and before it parks
        guard.unlock();
        worker_idle_point(true);
        guard.lock();
        continue;
      }
      ++q.parked;
      q.cv.wait(guard, [&q] { return !q.queue.empty(); });
      --q.parked;
    }
    auto* job = q.queue.front();
    q.queue.pop_front();
    q.size.store(q.queue.size(), std::memory_order_release);
    return job;
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker*, UnaryFunction) {}

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
    auto& q = d(self);
    std::unique_lock<std::mutex> guard(q.lock);
    while (!q.queue.empty()) {
      auto* job = q.queue.front();
      q.queue.pop_front();
      f(job);
    }
    q.size.store(0, std::memory_order_release);
  }
};

} // namespace agentstate::detail
