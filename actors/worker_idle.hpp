// SPDX-License-Identifier: Apache-2.0
// actors/worker_idle.hpp: work that a callback running on an engine worker
// thread leaves to that thread for when it runs out of jobs. Output that
// several jobs in a row produce (one stream's responses) then leaves in one
// write instead of one write, and one wake-up of the reader, per job.
// defer_until_idle is the protocol's writers' idle hook (protocol/idle_hook.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace agentstate::detail {

/// How long deferred tasks may wait on a worker that keeps finding jobs:
/// they run before its next job once this many jobs have started, or this
/// much time has passed, since the first of them was deferred.
inline constexpr std::size_t idle_task_max_jobs = 32;
inline constexpr std::chrono::microseconds idle_task_max_delay{1000};

/// On a worker thread of an engine's polling scheduler (options::scheduler
/// sharing with spin_wait above zero; see actors/polling_sharing.hpp):
/// queues `task` to run on this thread after the job (an actor's run
/// through its mailbox) that called this has ended, when the thread finds
/// no job queued, or before its next job once a bound above is reached;
/// returns true.
/// Tasks run in the order they were deferred, once each. On any other thread
/// (the host's, the writer's, a worker of another scheduler) returns false
/// and drops `task`: the caller does the work itself.
/// A task runs with no engine lock held and must not block; an exception it
/// throws is dropped. Tasks still queued when the worker thread ends (the
/// engine closing) are dropped without running, so a task may only hasten
/// what its owner also does without it (both users write their output when
/// they close).
/// Cost: one std::function per call (its heap block when the capture is
/// larger than two pointers).
bool defer_until_idle(std::function<void()> task);

/// The worker's side, called by polling_sharing::dequeue before it takes a
/// job: marks the calling thread as a worker, then runs the deferred tasks
/// when `queue_empty` (the worker would wait) or a bound above is reached.
/// dequeue calls it with `queue_empty` true again before it polls or parks,
/// so no task waits through a wait for the next job.
void worker_idle_point(bool queue_empty);

/// worker_idle_point with the time bound measured at `now` instead of the
/// steady clock's present (the tasks' stamp is still the steady clock's time
/// of the first defer_until_idle), so that a test crosses, or stays within,
/// idle_task_max_delay without waiting for it to pass.
void worker_idle_point(bool queue_empty, std::chrono::steady_clock::time_point now);

/// True when the calling thread has deferred tasks waiting.
bool has_deferred_tasks();

} // namespace agentstate::detail
