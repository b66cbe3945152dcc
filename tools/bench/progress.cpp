// SPDX-License-Identifier: Apache-2.0
// tools/bench/progress.cpp: the sampling thread of progress.hpp.
#include "tools/bench/progress.hpp"

#include <cstdio>

#include "tools/cli.hpp"
#include <utility>

namespace agentstate::tools::bench {

progress::progress(engine* eng, std::string label, std::uint64_t total)
  : eng_(eng), label_(std::move(label)), total_(total), tty_(progress_wanted()), t0_(steady::now()),
    th_([this] { loop(); }) {}

progress::~progress() {
  {
    std::lock_guard<std::mutex> guard(mtx_);
    stop_ = true;
  }
  cv_.notify_all();
  th_.join();
}

void progress::loop() {
  std::unique_lock<std::mutex> lock(mtx_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_)
      break;
    std::uint64_t live = eng_ ? eng_->stats().sessions_live : 0;
    if (live > max_live_)
      max_live_ = live;
    auto m = read_mem();
    if (m.anon_mb > max_anon_mb_)
      max_anon_mb_ = m.anon_mb;
    if (!tty_ || since(last_) < 2.0 || since(t0_) < 2.0)
      continue;
    last_ = steady::now();
    auto n = done_.load();
    std::fprintf(stderr, "bench %s %llu/%llu (%.0f/s) rss %.0f MB, live sessions %llu\n",
                 label_.c_str(), static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(total_), n / since(t0_), m.rss_mb,
                 static_cast<unsigned long long>(live));
  }
}

} // namespace agentstate::tools::bench
