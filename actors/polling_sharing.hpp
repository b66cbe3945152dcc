// SPDX-License-Identifier: Apache-2.0
// actors/polling_sharing.hpp: the scheduler policy behind options::scheduler
// "sharing" when options::spin_wait is above zero. It is CAF's work-sharing
// policy (one central job queue, FIFO) with these changes:
//   * one idle worker at a time polls the queue for up to spin_wait before
//     it parks on the condition variable; the others park at once
//     (actors/spin.hpp says why polling pays on small VMs, and why only one);
//   * enqueue signals the condition variable only when a parked worker is
//     needed: more jobs queued than threads polling (workers and helpers);
//   * the queue is a deque, so an enqueue does not allocate (CAF's policy
//     allocates a list node per job);
//   * the host thread polling in a blocking call takes actor jobs from the
//     queue too (help_until, actors/host_help.cpp), and counts as a poller;
//   * before each job a worker runs the tasks callbacks deferred to it
//     (actors/worker_idle.hpp) when the queue is empty or a bound is
//     reached, and always before it polls or parks.
// With spin_wait 0 the engine uses CAF's own work_sharing instead.
// Included only by .cpp files of actors/ (it pulls in CAF's scheduler headers).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

#include <caf/logger.hpp>
#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scoped_execution_unit.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/worker.hpp>

#include "actors/spin.hpp"
#include "actors/worker_idle.hpp"

namespace agentstate::detail {

/// The central job queue of polling_sharing: filled by enqueues from any
/// thread, drained by the workers and by the host thread that helps while
/// it waits in a blocking call (help_until, actors/core.hpp).
struct job_queue {
  explicit job_queue(caf::scheduler::abstract_coordinator* c)
    : coordinator(c), unit(&c->system()) {}

  std::mutex lock;
  std::condition_variable cv;
  std::deque<caf::resumable*> queue; ///< guarded by `lock`
  std::size_t parked = 0; ///< workers waiting on `cv`; guarded by `lock`
  std::atomic<std::size_t> size{0}; ///< queue.size(), for polling without `lock`
  std::atomic<std::size_t> pollers{0}; ///< workers polling: 0 or 1
  /// Host threads helping (0 or 1): like a polling worker, one takes a job
  /// without being woken, so an enqueue wakes a parked worker only for jobs
  /// beyond what the pollers and helpers take.
  std::atomic<std::size_t> helpers{0};
  /// Set once, before the coordinator starts its workers: the polling
  /// budget, and past it, polling while *committing holds, up to
  /// commit_poll in all (a commit's replies are on their way).
  std::chrono::microseconds spin{0};
  const std::atomic<bool>* committing = nullptr;
  std::chrono::microseconds commit_poll{0};
  /// The owning coordinator (its max_throughput) and the execution unit a
  /// helping thread runs jobs in: what they enqueue goes to this queue.
  caf::scheduler::abstract_coordinator* coordinator;
  caf::scoped_execution_unit unit;

  /// Queues `job`; wakes a parked worker when the job is more than the
  /// polling workers and helpers will take. Never allocates while the
  /// deque has room (a deque grows by blocks).
  void push(caf::resumable* job) {
    bool wake;
    {
      std::lock_guard<std::mutex> guard(lock);
      queue.push_back(job);
      size.store(queue.size(), std::memory_order_release);
      // A parked worker sees `parked` raised under `lock` before it waits,
      // so no wake-up is lost; a poller or helper takes at most one job.
      wake = parked > 0 && queue.size() > takers();
    }
    if (wake)
      cv.notify_one();
  }

  /// Removes and returns the front job when it is an actor's (subtype
  /// scheduled_actor); null when the queue is empty or its front is another
  /// kind of job, such as the coordinator's stop jobs, which are the
  /// workers' own.
  caf::resumable* take_actor_job() {
    if (size.load(std::memory_order_acquire) == 0)
      return nullptr;
    std::lock_guard<std::mutex> guard(lock);
    if (queue.empty() || queue.front()->subtype() != caf::resumable::scheduled_actor)
      return nullptr;
    auto* job = queue.front();
    queue.pop_front();
    size.store(queue.size(), std::memory_order_release);
    return job;
  }

  /// After a helper leaves: wakes a parked worker for the jobs that the
  /// remaining pollers and helpers will not take.
  void wake_for_queued() {
    if (size.load(std::memory_order_acquire) == 0)
      return;
    bool wake;
    {
      std::lock_guard<std::mutex> guard(lock);
      wake = parked > 0 && queue.size() > takers();
    }
    if (wake)
      cv.notify_one();
  }

private:
  std::size_t takers() const {
    return pollers.load(std::memory_order_acquire) + helpers.load(std::memory_order_acquire);
  }
};

class polling_sharing : public caf::policy::unprofiled {
public:
  struct coordinator_data : job_queue {
    explicit coordinator_data(caf::scheduler::abstract_coordinator* c) : job_queue(c) {}
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {}
  };

  template <class Coordinator>
  void enqueue(Coordinator* self, caf::resumable* job) {
    d(self).push(job);
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

namespace caf::scheduler {

/// A worker's loop under polling_sharing: take a job, run it for up to
/// max_throughput messages, then requeue it, drop the worker's reference or
/// stop. It differs from CAF's generic loop in one way: it does not record
/// the job's actor id for the logger before each job, which costs a
/// dynamic_cast from resumable to abstract_actor (about 1,100 instructions
/// per job, a sixtieth of an append in memory) and logs nothing at the
/// CAF_LOG_LEVEL Debian's CAF is built with (quiet). Declared here, before
/// coordinator<polling_sharing> is instantiated (actors/engine_lifecycle.cpp),
/// so that every use sees this specialization.
template <>
inline void worker<agentstate::detail::polling_sharing>::run() {
  CAF_SET_LOGGER_SYS(&system());
  for (;;) {
    resumable* job = policy_.dequeue(this);
    policy_.before_resume(this, job);
    const auto outcome = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    if (outcome == resumable::resume_later) {
      policy_.resume_job_later(this, job); // the queue keeps our reference
    } else if (outcome == resumable::awaiting_message) {
      intrusive_ptr_release(job); // re-enqueued with a new reference on its next message
    } else if (outcome == resumable::done) {
      policy_.after_completion(this, job);
      intrusive_ptr_release(job);
    } else { // shutdown_execution_unit: the coordinator's stop job, not counted
      policy_.after_completion(this, job);
      policy_.before_shutdown(this);
      return;
    }
  }
}

} // namespace caf::scheduler
