// SPDX-License-Identifier: Apache-2.0
// server/job_pool.hpp: a few threads of the network server's own for work
// too long for an I/O thread: the decoding of long request lines
// (connection.hpp). Internal to server/.
//
// Bounded: at most `max_threads` threads, each started when a job finds
// every started one busy; the queue holds at most one job per connection
// (a connection decodes one line at a time). Not the engine's scheduler: a
// decoding holds its thread for as long as the line takes, which an engine
// worker must never do.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace agentstate::server::detail {

class job_pool {
public:
  explicit job_pool(std::size_t max_threads) : max_threads_(max_threads == 0 ? 1 : max_threads) {}

  /// stop().
  ~job_pool() { stop(); }
  job_pool(const job_pool&) = delete;
  job_pool& operator=(const job_pool&) = delete;

  /// Queues `job` to run on one of the pool's threads and takes it; a job
  /// must not throw. Returns false, leaving `job` as it was, when the pool
  /// is stopped or has no thread and cannot start one: the caller does the
  /// work itself. Any thread; never throws.
  bool post(std::function<void()>& job) noexcept {
    std::lock_guard<std::mutex> lk(mtx_);
    if (stopped_)
      return false;
    if (idle_ == 0 && threads_.size() < max_threads_) {
      try {
        threads_.emplace_back([this] { run(); });
        ++idle_; // counted idle until it takes a job
      } catch (const std::exception&) {
        // No thread now (std::system_error, bad_alloc): the started ones
        // take the job, if any.
      }
    }
    if (threads_.empty())
      return false;
    try {
      queue_.push_back(std::move(job));
    } catch (const std::exception&) {
      return false;
    }
    cv_.notify_one();
    return true;
  }

  /// Runs no more jobs: destroys those not started (on the calling
  /// thread), waits for those running, joins the threads. Idempotent. Not
  /// from a job.
  void stop() noexcept {
    std::deque<std::function<void()>> dropped;
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lk(mtx_);
      stopped_ = true;
      dropped.swap(queue_);
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads)
      t.join();
    // `dropped` goes here, outside the lock: a job's captures may own what
    // posts to the pool.
  }

private:
  void run() {
    std::unique_lock<std::mutex> lk(mtx_);
    for (;;) {
      cv_.wait(lk, [this] { return stopped_ || !queue_.empty(); });
      if (stopped_)
        return;
      auto job = std::move(queue_.front());
      queue_.pop_front();
      --idle_;
      lk.unlock();
      try {
        job();
      } catch (...) {
        // A job must not throw; one that does is abandoned, not the thread.
      }
      job = nullptr; // its captures go before the thread waits again
      lk.lock();
      ++idle_;
    }
  }

  const std::size_t max_threads_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  std::size_t idle_ = 0; ///< started threads waiting for a job
  bool stopped_ = false;
};

} // namespace agentstate::server::detail
