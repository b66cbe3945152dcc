// SPDX-License-Identifier: Apache-2.0
#include "actors/watch_hub.hpp"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "actors/core.hpp"
#include "store/change_feed.hpp"
#include "store/reads.hpp"

namespace agentstate::detail {

namespace {

// One batch (one callback): at most 256 changes and 4 MiB of their stored
// text, from at most 65,536 rows examined in one read transaction (a narrow
// filter over a long log).
const store::page_bounds page_limits{256, 65536, std::size_t{4} << 20};
// An idle watch checks the log this often, and delivers an empty batch when
// its cursor moved past changes it does not take.
constexpr auto progress_period = std::chrono::seconds(1);

} // namespace

struct watcher {
  engine_core* core = nullptr;
  watch_hub* hub = nullptr;
  watch_request req;
  change_handler on_changes;
  end_handler on_end;

  std::mutex mtx;
  std::condition_variable cv;
  /// Past every change delivered or skipped (under mtx). Only grows: the
  /// watch's thread moves it past each page it read, and the hub past rows it
  /// found hold nothing for this watch (then no thread reads them again).
  std::uint64_t cursor = 0;
  /// Where the watch started (set before its thread runs): progress is
  /// measured from here, not from a cursor the hub may already have moved.
  std::uint64_t start = 0;
  std::uint64_t wake = 0; ///< the hub saw a row for this watch up to here (under mtx)
  bool stop = false; ///< under mtx
  watch_end_reason reason = watch_end_reason::cancelled; ///< under mtx, once stop
  std::thread thread;
  std::mutex join_mtx; ///< one joiner at a time (a handle and close() may race)

  bool on_own_thread() const { return std::this_thread::get_id() == thread.get_id(); }

  // Asks the thread to end with `why` (the first reason given wins).
  void end(watch_end_reason why) {
    std::lock_guard<std::mutex> lk(mtx);
    if (!stop) {
      stop = true;
      reason = why;
    }
    cv.notify_one();
  }

  // Joins the thread; from the thread itself (a callback that cancels its
  // own watch), detaches it: its lambda owns the watcher until it returns.
  void join() {
    std::lock_guard<std::mutex> lk(join_mtx);
    if (!thread.joinable())
      return;
    if (on_own_thread())
      thread.detach();
    else
      thread.join();
  }

  void run();
};

void watcher::run() {
  std::optional<error> failure;
  auto last_delivery = std::chrono::steady_clock::now();
  std::uint64_t delivered = start; // the cursor of the last batch delivered
  bool first = true;
  for (;;) {
    std::uint64_t at;
    {
      std::unique_lock<std::mutex> lk(mtx);
      if (!first) // woken by the hub, or a period passed (progress)
        cv.wait_for(lk, progress_period, [&] { return stop || wake > cursor; });
      first = false;
      if (stop)
        break;
      at = cursor;
    }
    // Read pages until the head (or a stop).
    for (;;) {
      std::uint64_t end_seq = at;
      auto page = store::read_change_page(*core->kv, req, at, page_limits, core->epoch, &end_seq);
      if (!page) {
        failure = std::move(page).err();
        end(failure->code == errc::cursor_expired ? watch_end_reason::cursor_expired
                                                  : watch_end_reason::failed);
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      const bool progress =
        page->changes.empty() && end_seq > delivered && now - last_delivery >= progress_period;
      if (!page->changes.empty() || progress) {
        {
          std::lock_guard<std::mutex> lk(mtx);
          if (stop)
            break;
        }
        on_changes(std::move(*page));
        delivered = end_seq;
        last_delivery = now;
      }
      {
        std::lock_guard<std::mutex> lk(mtx);
        cursor = std::max(cursor, end_seq);
        at = cursor; // the hub may have moved it past rows it found empty
        if (stop || page->at_head)
          break;
      }
    }
  }
  watch_end info;
  {
    std::lock_guard<std::mutex> lk(mtx);
    info.reason = reason;
    info.resume_from = store::format_cursor(core->epoch, cursor);
  }
  if (failure)
    info.err = std::move(*failure);
  if (on_end)
    on_end(info);
  hub->forget(this);
}

namespace {

class handle final : public watch_handle {
public:
  explicit handle(std::shared_ptr<watcher> w) : w_(std::move(w)) {}
  ~handle() override { cancel(); }
  void cancel() override {
    w_->end(watch_end_reason::cancelled);
    w_->join();
  }
  std::string cursor() const override {
    std::lock_guard<std::mutex> lk(w_->mtx);
    return store::format_cursor(w_->core->epoch, w_->cursor);
  }

private:
  std::shared_ptr<watcher> w_;
};

} // namespace

watch_hub::watch_hub(engine_core& core) : core_(core) {}

watch_hub::~watch_hub() {
  close();
}

void watch_hub::published(std::uint64_t head) {
  {
    std::lock_guard<std::mutex> lk(mtx_);
    if (head <= published_)
      return;
    published_ = head;
  }
  cv_.notify_one();
}

result<std::unique_ptr<watch_handle>> watch_hub::start(watch_request req, std::uint64_t after,
                                                       std::uint64_t head,
                                                       change_handler on_changes,
                                                       end_handler on_end) {
  auto w = std::make_shared<watcher>();
  w->core = &core_;
  w->hub = this;
  w->req = std::move(req);
  w->on_changes = std::move(on_changes);
  w->on_end = std::move(on_end);
  w->cursor = after;
  w->start = after;
  {
    std::lock_guard<std::mutex> lk(mtx_);
    if (closed_)
      return error{errc::unavailable, "the engine is closing"};
    if (watches_.empty()) {
      // The writer told nothing while no watch existed: the hub starts at
      // the head (this watch reads what came before it itself).
      published_ = std::max(published_, head);
      scanned_ = std::max(scanned_, head);
    }
    if (!thread_.joinable())
      thread_ = std::thread([this] { run(); });
    watches_.push_back(w);
    live_.fetch_add(1, std::memory_order_relaxed);
    // The thread's first pass reads the log after `after` unasked: a row
    // the hub scanned before this watch was listed is not missed.
    w->thread = std::thread([w] { w->run(); });
  }
  return std::unique_ptr<watch_handle>(std::make_unique<handle>(w));
}

void watch_hub::forget(const watcher* w) {
  // Notified under the lock: close() may return (and the hub be destroyed)
  // as soon as the lock is free, and a detached watch thread must not touch
  // the condition variable after that.
  std::lock_guard<std::mutex> lk(mtx_);
  for (auto it = watches_.begin(); it != watches_.end(); ++it)
    if (it->get() == w) {
      watches_.erase(it);
      live_.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  gone_.notify_all();
}

void watch_hub::close() {
  std::vector<std::shared_ptr<watcher>> all;
  {
    std::lock_guard<std::mutex> lk(mtx_);
    if (closed_)
      return;
    closed_ = true;
    stopping_ = true;
    all = watches_;
  }
  cv_.notify_one();
  for (auto& w : all)
    w->end(watch_end_reason::closing);
  for (auto& w : all)
    w->join();
  // A watch whose own callback dropped its handle runs detached: wait until
  // every watch thread is past its last use of the store.
  {
    std::unique_lock<std::mutex> lk(mtx_);
    gone_.wait(lk, [&] { return watches_.empty(); });
  }
  if (thread_.joinable())
    thread_.join();
}

void watch_hub::run() {
  for (;;) {
    std::uint64_t head, from;
    std::vector<std::shared_ptr<watcher>> ws;
    {
      std::unique_lock<std::mutex> lk(mtx_);
      cv_.wait(lk, [&] { return stopping_ || published_ > scanned_; });
      if (stopping_)
        return;
      head = published_;
      from = scanned_;
      ws = watches_;
    }
    std::vector<char> hit(ws.size(), 0);
    // Session watches by session id (a row names one session: one lookup
    // instead of a comparison per watch); the others are tried in turn.
    std::unordered_multimap<std::string_view, std::size_t> by_id;
    std::vector<std::size_t> wide;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (ws[i]->req.scope == watch_scope::session)
        by_id.emplace(ws[i]->req.session_id, i);
      else
        wide.push_back(i);
    }
    auto try_watch = [&](std::size_t i, const store::change_row& row) {
      if (!hit[i] && store::names_row(ws[i]->req, row))
        hit[i] = 1;
    };
    bool all = false;
    if (auto txn = store::begin_read(*core_.kv)) {
      auto r = store::scan_changes(**txn, from, [&](const store::change_row& row) {
        if (row.kind == change_kind::remove_user || row.kind == change_kind::remove_app) {
          for (std::size_t i = 0; i < ws.size(); ++i) // names no one session
            try_watch(i, row);
        } else {
          auto [b, e] = by_id.equal_range(row.id);
          for (auto it = b; it != e; ++it)
            try_watch(it->second, row);
          for (auto i : wide)
            try_watch(i, row);
        }
        return row.seq < head;
      });
      all = !r; // a gap or damage: let every watch read and find out
    } else {
      all = true;
    }
    {
      std::lock_guard<std::mutex> lk(mtx_);
      scanned_ = std::max(scanned_, head);
    }
    for (std::size_t i = 0; i < ws.size(); ++i) {
      auto& w = *ws[i];
      std::lock_guard<std::mutex> lk(w.mtx);
      if (!all && !hit[i]) {
        // Rows from+1..head hold nothing for this watch: one that has read
        // up to `from` skips them instead of reading them again when it is
        // next woken (else each wake of a narrow watch re-reads the log's
        // every row since its last match).
        if (w.cursor >= from && w.cursor < head)
          w.cursor = head;
        continue;
      }
      if (head > w.wake)
        w.wake = head;
      w.cv.notify_one();
    }
  }
}

} // namespace agentstate::detail
