// SPDX-License-Identifier: Apache-2.0
// tools/bench/progress.hpp: progress of one long phase on stderr, and the
// peaks seen while it runs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "agentstate/engine.hpp"
#include "tools/bench/measures.hpp"

namespace agentstate::tools::bench {

/// A thread of its own samples the engine's live sessions and this process's
/// RssAnon every 250 ms, and, when stderr is a terminal, prints
/// "bench <label> n/total (rate/s) rss ... MB, live sessions ..." to stderr
/// every 2 s (a phase shorter than 2 s prints nothing; nothing goes into a
/// file or pipe). add() may be called
/// from any thread; destruction stops and joins the thread. `eng` may be
/// null and must outlive this object.
class progress {
public:
  progress(engine* eng, std::string label, std::uint64_t total);
  ~progress();
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;

  /// Counts `n` more units of the phase done.
  void add(std::uint64_t n = 1) { done_.fetch_add(n, std::memory_order_relaxed); }
  /// The largest sessions_live seen.
  std::uint64_t max_live() const { return max_live_.load(); }
  /// The largest RssAnon seen, MiB.
  double max_anon_mb() const { return max_anon_mb_.load(); }

private:
  void loop();

  engine* eng_;
  std::string label_;
  std::uint64_t total_;
  bool tty_;
  steady::time_point t0_, last_ = steady::now();
  std::atomic<std::uint64_t> done_{0}, max_live_{0};
  std::atomic<double> max_anon_mb_{0};
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread th_;
};

} // namespace agentstate::tools::bench
