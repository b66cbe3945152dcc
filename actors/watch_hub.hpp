// SPDX-License-Identifier: Apache-2.0
// actors/watch_hub.hpp: the push form of the change feed (engine::watch).
//
// Delivery reads the change log; nothing is copied out of the writer. The
// writer tells the hub the newest committed sequence after each group
// commit, and only while a watch exists (otherwise one atomic load per
// commit). The hub's thread reads the new rows' headers once, wakes the
// watches whose scope names them (session watches found by the row's
// session id, the others tested in turn), and moves the others' cursors
// past the rows (so a narrow watch reads only rows after its own last wake). Each watch has a thread of its own that
// reads the log after its cursor in short read transactions (a page of at
// most 256 changes), calls on_changes, and repeats until it reaches the
// head: a watch that falls behind (a slow callback, a client that does not
// read) only reads older rows later, so nothing is dropped, no queue grows,
// and no long read transaction pins pages. A slow callback delays its own
// watch only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "agentstate/watch.hpp"

namespace agentstate::detail {

struct engine_core;
struct watcher;

class watch_hub {
public:
  explicit watch_hub(engine_core& core);
  /// REQUIRES: close() was called.
  ~watch_hub();
  watch_hub(const watch_hub&) = delete;
  watch_hub& operator=(const watch_hub&) = delete;

  /// Whether any watch exists (one relaxed load: the writer's test).
  bool active() const { return live_.load(std::memory_order_relaxed) > 0; }

  /// The writer committed up to sequence `head`. Never blocks for long.
  void published(std::uint64_t head);

  /// Starts a watch after sequence `after`; `head` is the newest committed
  /// sequence now. Errors: unavailable (closing).
  result<std::unique_ptr<watch_handle>> start(watch_request req, std::uint64_t after,
                                              std::uint64_t head, change_handler on_changes,
                                              end_handler on_end);

  /// Ends every watch (reason closing) and stops the hub's thread; joins
  /// them all. REQUIRES: not called from a watch's callback.
  void close();

  /// A watch's thread is past its last use of the engine: forget it.
  void forget(const watcher* w);

private:
  void run();

  engine_core& core_;
  std::atomic<std::size_t> live_{0};
  std::mutex mtx_;
  std::condition_variable cv_;
  std::uint64_t published_ = 0; ///< newest head the writer told (under mtx_)
  std::uint64_t scanned_ = 0; ///< the hub has woken watches up to here (under mtx_)
  bool stopping_ = false;
  bool closed_ = false;
  std::vector<std::shared_ptr<watcher>> watches_; ///< whose thread runs (under mtx_)
  std::condition_variable gone_; ///< a watch thread ended
  std::thread thread_;
};

} // namespace agentstate::detail
