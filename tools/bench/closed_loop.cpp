// SPDX-License-Identifier: Apache-2.0
// tools/bench/closed_loop.cpp: the callback chains of run_closed_loop.
#include "tools/bench/closed_loop.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>

namespace agentstate::tools::bench {

namespace {

// Shared by the chains; the last chain to end wakes the caller.
struct loop_state {
  std::size_t jobs = 0, steps = 0;
  issue_fn issue;
  progress* prog = nullptr;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mtx;
  std::condition_variable cv;
  std::size_t active = 0;
};

void step(const std::shared_ptr<loop_state>& st, std::size_t j, std::size_t k);

void next_job(const std::shared_ptr<loop_state>& st) {
  auto j = st->next.fetch_add(1);
  if (j >= st->jobs || st->failed.load()) {
    std::lock_guard<std::mutex> guard(st->mtx);
    if (--st->active == 0)
      st->cv.notify_all();
    return;
  }
  step(st, j, 0);
}

void step(const std::shared_ptr<loop_state>& st, std::size_t j, std::size_t k) {
  st->issue(j, k, [st, j, k](bool ok) {
    if (st->prog)
      st->prog->add();
    if (!ok)
      st->failed = true;
    if (ok && k + 1 < st->steps)
      step(st, j, k + 1);
    else
      next_job(st);
  });
}

} // namespace

void run_closed_loop(std::size_t jobs, std::size_t steps, std::size_t width, issue_fn issue,
                     progress* prog) {
  auto st = std::make_shared<loop_state>();
  st->jobs = jobs;
  st->steps = steps;
  st->issue = std::move(issue);
  st->prog = prog;
  width = std::max<std::size_t>(1, std::min(width, jobs));
  st->active = width;
  for (std::size_t w = 0; w < width; ++w)
    next_job(st);
  std::unique_lock<std::mutex> lock(st->mtx);
  st->cv.wait(lock, [&] { return st->active == 0; });
}

} // namespace agentstate::tools::bench
