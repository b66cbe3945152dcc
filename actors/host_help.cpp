// SPDX-License-Identifier: Apache-2.0
// actors/host_help.cpp: the polling waiter of a blocking call runs queued
// actor jobs while it waits (actors/core.hpp, help_until).
#include <algorithm>
#include <cstddef>

#include "actors/core.hpp"
#include "actors/polling_sharing.hpp"
#include "actors/spin.hpp"

namespace agentstate::detail {

bool begin_helping(engine_core& core) noexcept {
  // Paired with close(): it sets `closed`, then waits for `helping` to
  // fall to zero before the queue goes with the actor system. Either this
  // sees `closed`, or close() sees this thread counted.
  core.helping.fetch_add(1, std::memory_order_seq_cst);
  // `closed` first: past it, close() may be resetting `jobs`.
  if (core.closed.load(std::memory_order_seq_cst) || core.jobs == nullptr) {
    core.helping.fetch_sub(1, std::memory_order_seq_cst);
    return false;
  }
  core.jobs->helpers.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

void end_helping(engine_core& core) noexcept {
  core.jobs->helpers.fetch_sub(1, std::memory_order_acq_rel);
  core.jobs->wake_for_queued();
  core.helping.fetch_sub(1, std::memory_order_seq_cst);
}

namespace {

// Messages a helper lets an actor handle per job: a worker's bound is
// CAF's default, none, so without one a thread whose answer is in could
// stay inside an actor that other threads keep busy.
constexpr std::size_t helper_throughput = 16;

// Runs `job` as a worker's loop would, then settles the reference the queue
// held: requeued when it has more messages than one run takes, dropped
// otherwise (an actor queues itself again on its next message).
void run_job(job_queue& q, caf::resumable* job) {
  auto budget = std::min(q.coordinator->max_throughput(), helper_throughput);
  switch (job->resume(&q.unit, budget)) {
    case caf::resumable::resume_later: q.push(job); break;
    case caf::resumable::awaiting_message:
    case caf::resumable::done:
    case caf::resumable::shutdown_execution_unit: // not an actor's outcome
      intrusive_ptr_release(job);
      break;
  }
}

} // namespace

bool help_until(engine_core& core, const std::atomic<bool>& done, std::chrono::microseconds budget,
                std::chrono::microseconds cap) {
  auto& q = *core.jobs;
  // spin_until's poll, with the queued jobs run first: the clock only runs
  // down while there is nothing to run.
  auto run_queued_then_check = [&q, &done] {
    while (!done.load(std::memory_order_acquire))
      if (auto* job = q.take_actor_job())
        run_job(q, job);
      else
        return false;
    return true;
  };
  return spin_until(
    run_queued_then_check, budget,
    [&core] { return core.committing.load(std::memory_order_relaxed); }, cap);
}

} // namespace agentstate::detail
