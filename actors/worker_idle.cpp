// SPDX-License-Identifier: Apache-2.0
#include "actors/worker_idle.hpp"

#include <utility>
#include <vector>

namespace agentstate::detail {

namespace {

using clock = std::chrono::steady_clock;

// One per thread; what is still queued when the thread ends is dropped.
struct idle_tasks {
  bool worker = false;
  std::size_t jobs = 0; ///< jobs started since the first queued task
  clock::time_point first;
  std::vector<std::function<void()>> queued;
  std::vector<std::function<void()>> running; ///< reused between runs

  void run() {
    // A task that defers again lands in `queued` for the next run.
    running.swap(queued);
    jobs = 0;
    for (auto& t : running) {
      try {
        t();
      } catch (...) {
      }
    }
    running.clear();
  }
};

idle_tasks& tasks() {
  thread_local idle_tasks t;
  return t;
}

// The worker's idle point; `now` (read only when the time bound decides)
// gives the time the bound is measured at.
template <class Now>
void idle_point(bool queue_empty, Now now) {
  auto& t = tasks();
  t.worker = true;
  if (t.queued.empty())
    return;
  if (queue_empty || ++t.jobs >= idle_task_max_jobs || now() - t.first >= idle_task_max_delay)
    t.run();
}

} // namespace

bool defer_until_idle(std::function<void()> task) {
  auto& t = tasks();
  if (!t.worker)
    return false;
  if (t.queued.empty())
    t.first = clock::now();
  t.queued.push_back(std::move(task));
  return true;
}

bool has_deferred_tasks() {
  return !tasks().queued.empty();
}

void worker_idle_point(bool queue_empty) {
  idle_point(queue_empty, [] { return clock::now(); });
}

void worker_idle_point(bool queue_empty, clock::time_point now) {
  idle_point(queue_empty, [now] { return now; });
}

} // namespace agentstate::detail
