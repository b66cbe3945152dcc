// SPDX-License-Identifier: Apache-2.0
// actors/watch_hub.hpp: the push form of the change feed (engine::watch).
//
// Delivery reads the change log; nothing is copied out of the writer. The
// writer tells the hub the newest committed sequence after each group
// commit, and only while a watch exists (otherwise one atomic load per
// commit). The hub's thread reads the new rows' headers once and queues the
// watches whose scope names them (session watches found by the row's
// session id, the others tested in turn), noting where their rows begin: a
// watch that had read to the head starts its next pass there, so a narrow
// watch never reads the rows between its wakes.
//
// Delivery threads, shared by all watches, take queued watches one at a
// time. A pass over a watch reads the log after its cursor in short read
// transactions (a page of at most 256 changes), calls on_changes, and
// repeats until it reaches the head: a watch that falls behind (a slow
// callback, a client that does not read) only reads older rows later, so
// nothing is dropped, no queue grows, and no long read transaction pins
// pages. A watch is queued at most once and in at most one pass at a time
// (one batch at a time, in order); a pass delivers at most 4 batches, then
// the watch queues again behind the others. There are as many delivery
// threads as cores (1 to 4) while callbacks are quick; when watches wait,
// every thread is in a pass and no pass has started for 10 ms, the hub
// adds a thread (up to one per watch, and 16 in all), so blocked callbacks
// hold back other watches for about that long while fewer than 16 block;
// beyond that, callbacks that block share the 16 threads, and a client of
// the hub that must not stall others never blocks in a callback (the
// protocol ends a watch it cannot write and starts another later). Threads
// beyond the base count end after 5 idle seconds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agentstate/watch.hpp"

namespace agentstate::detail {

struct engine_core;
struct watcher;

class watch_hub {
public:
  using clock = std::chrono::steady_clock;

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
  /// sequence now. `oldest` (a watch from the start, `after` just before
  /// the oldest change kept): its first read starts at the oldest change the
  /// log keeps then, so rows trimmed since do not end it (cursor_expired).
  /// Errors: unavailable (closing, or no thread can be started).
  result<std::unique_ptr<watch_handle>> start(watch_request req, std::uint64_t after,
                                              std::uint64_t head, bool oldest,
                                              change_handler on_changes, end_handler on_end);

  /// Ends every watch (reason closing), waits until each has called its
  /// on_end, and stops the hub's threads. REQUIRES: not called from a
  /// watch's callback.
  void close();

  /// Queues `w` for a pass (or, while a pass runs, for another after it).
  /// Locks the hub; the caller may hold w's own mutex (never the reverse).
  void wake(const std::shared_ptr<watcher>& w);

private:
  void run();
  void work();
  // Under mtx_.
  // `hit_from`: the hub found rows for `w` after this sequence.
  void enqueue(const std::shared_ptr<watcher>& w,
               std::optional<std::uint64_t> hit_from = std::nullopt);
  // Starts a delivery thread; false when none can be started.
  bool add_worker();

  engine_core& core_;
  std::atomic<std::size_t> live_{0};
  std::mutex mtx_;
  std::condition_variable cv_; ///< the hub's thread: new head, a stall to check, stop
  std::condition_variable work_cv_; ///< delivery threads: a queued watch, stop
  std::condition_variable gone_; ///< a watch ended
  std::uint64_t published_ = 0; ///< newest head the writer told (under mtx_)
  std::uint64_t scanned_ = 0; ///< the hub has queued watches up to here (under mtx_)
  bool stopping_ = false; ///< under mtx_
  bool closed_ = false; ///< under mtx_
  std::vector<std::shared_ptr<watcher>> watches_; ///< not yet ended (under mtx_)
  std::uint64_t generation_ = 0; ///< moves when watches_ changes (under mtx_)
  // The hub thread's index of watches_ as of index_generation_.
  std::uint64_t index_generation_ = ~std::uint64_t{0};
  std::vector<std::shared_ptr<watcher>> listed_;
  std::unordered_multimap<std::string_view, std::size_t> by_id_; ///< views into listed_
  std::vector<std::size_t> wide_;
  std::vector<char> hits_;
  std::deque<std::shared_ptr<watcher>> ready_; ///< watches waiting for a pass (under mtx_)
  const std::size_t base_workers_; ///< delivery threads kept while idle: cores, 1 to 4
  std::size_t workers_ = 0, idle_ = 0; ///< delivery threads, and those waiting (under mtx_)
  std::vector<std::thread> threads_; ///< every delivery thread started (under mtx_)
  std::vector<std::thread::id> exited_; ///< delivery threads that returned (under mtx_)
  std::uint64_t passes_ = 0; ///< passes started (under mtx_)
  std::uint64_t seen_passes_ = 0; ///< passes_ when the hub last saw it move
  clock::time_point seen_at_{}; ///< ... and when
  clock::time_point next_sweep_{}; ///< when idle watches are next queued for progress
  std::thread thread_;
};

} // namespace agentstate::detail
