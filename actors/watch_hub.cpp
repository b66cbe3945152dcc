// SPDX-License-Identifier: Apache-2.0
#include "actors/watch_hub.hpp"

#include <algorithm>
#include <string_view>
#include <system_error>
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
// An idle watch is given a pass this often, and delivers an empty batch
// when its cursor moved past changes it does not take.
constexpr auto progress_period = std::chrono::seconds(1);
// The hub looks for watches due a progress pass this often.
constexpr auto sweep_period = std::chrono::milliseconds(250);
// When no pass has started for this long while watches wait and every
// delivery thread is in a pass, the hub adds a thread.
constexpr auto stall_after = std::chrono::milliseconds(10);
// A pass delivers at most this many batches, then queues its watch again
// behind the others (a long catch-up does not hold them back).
constexpr int batches_per_pass = 4;
// A delivery thread beyond the base count ends after this long without work.
constexpr auto linger = std::chrono::seconds(5);
// The most delivery threads the hub runs, however many callbacks block.
constexpr std::size_t max_workers = 16;

} // namespace

struct watcher : std::enable_shared_from_this<watcher> {
  engine_core* core = nullptr;
  watch_hub* hub = nullptr;
  watch_request req;
  change_handler on_changes;
  end_handler on_end;

  // Scheduling, under the hub's mutex.
  enum class state { idle, queued, running, done } st = state::idle;
  bool again = false; ///< woken during its pass: queue it again after
  watch_hub::clock::time_point last_pass{};
  /// No pass yet, or the last one stopped before the head: the next reads
  /// from the cursor. Otherwise the last pass read past every row the hub
  /// had scanned when it began, and the hub finds every later row for this
  /// watch: the next pass starts at `hit_from`, or at the hub's scanned
  /// sequence when it found none (the rows between hold nothing for it).
  bool behind = true;
  bool hit = false; ///< the hub found rows for it since its last pass began
  std::uint64_t hit_from = 0; ///< the first such range starts after this

  // Delivery state, touched only by the pass that runs (one at a time; the
  // hub's mutex orders consecutive passes).
  std::uint64_t delivered = 0; ///< the cursor of the last batch delivered
  watch_hub::clock::time_point last_delivery{};
  /// A watch from the start before its first page: that read starts at the
  /// oldest change the log keeps then (at or after `cursor`).
  bool oldest = false;

  std::mutex mtx;
  std::condition_variable cv; ///< `finished`
  /// Past every change delivered or skipped (under mtx). Only grows: a pass
  /// first moves it past the rows the hub found hold nothing for this watch
  /// (its skip), then past each page it reads.
  std::uint64_t cursor = 0;
  bool stop = false; ///< under mtx
  bool finished = false; ///< on_end has returned (under mtx)
  watch_end_reason reason = watch_end_reason::cancelled; ///< under mtx, once stop
  std::thread::id runner; ///< the thread in this watch's pass (under mtx)

  // Asks the watch to end with `why` (the first reason given wins) and
  // queues it so that a delivery thread calls on_end.
  void end(watch_end_reason why) {
    std::lock_guard<std::mutex> lk(mtx);
    if (finished)
      return; // the hub may be gone
    if (!stop) {
      stop = true;
      reason = why;
    }
    hub->wake(shared_from_this());
  }

  // Waits until on_end has returned; from inside this watch's own pass (a
  // callback that cancels its own watch), returns at once: the pass ends
  // it when the callback returns.
  void join() {
    std::unique_lock<std::mutex> lk(mtx);
    if (runner == std::this_thread::get_id())
      return;
    cv.wait(lk, [&] { return finished; });
  }

  enum class outcome { at_head, more, ended };
  // Reads and delivers pages after max(cursor, skip) up to the head or
  // `batches_per_pass` batches; `ended` once on_end was called.
  outcome pass(std::uint64_t skip);
};

watcher::outcome watcher::pass(std::uint64_t skip) {
  std::optional<error> failure;
  std::uint64_t at;
  bool ended;
  int batches = 0;
  {
    std::lock_guard<std::mutex> lk(mtx);
    runner = std::this_thread::get_id();
    cursor = std::max(cursor, skip);
    at = cursor;
    ended = stop;
  }
  while (!ended) {
    std::uint64_t end_seq = at;
    auto page = store::read_change_page(*core->kv, req,
                                        oldest ? std::nullopt : std::optional<std::uint64_t>(at),
                                        page_limits, core->epoch, &end_seq);
    if (!page) {
      failure = std::move(page).err();
      std::lock_guard<std::mutex> lk(mtx);
      if (!stop) {
        stop = true;
        reason = failure->code == errc::cursor_expired ? watch_end_reason::cursor_expired
                                                       : watch_end_reason::failed;
      }
      ended = true;
      break;
    }
    oldest = false;
    const auto now = watch_hub::clock::now();
    const bool progress =
      page->changes.empty() && end_seq > delivered && now - last_delivery >= progress_period;
    if (!page->changes.empty() || progress) {
      {
        std::lock_guard<std::mutex> lk(mtx);
        if (stop) {
          ended = true;
          break;
        }
      }
      on_changes(std::move(*page));
      delivered = end_seq;
      last_delivery = now;
      ++batches;
    }
    std::lock_guard<std::mutex> lk(mtx);
    cursor = std::max(cursor, end_seq);
    at = cursor;
    ended = stop;
    if (!ended && (page->at_head || batches == batches_per_pass)) {
      runner = {};
      return page->at_head ? outcome::at_head : outcome::more;
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
  std::lock_guard<std::mutex> lk(mtx);
  finished = true;
  runner = {};
  cv.notify_all();
  return outcome::ended;
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

watch_hub::watch_hub(engine_core& core)
  : core_(core), base_workers_(std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 4)) {
}

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

void watch_hub::enqueue(const std::shared_ptr<watcher>& w, std::optional<std::uint64_t> hit_from) {
  if (hit_from && !w->hit) {
    w->hit = true;
    w->hit_from = *hit_from;
  }
  switch (w->st) {
    case watcher::state::idle:
      w->st = watcher::state::queued;
      ready_.push_back(w);
      if (idle_ > 0)
        work_cv_.notify_one();
      else if (workers_ < base_workers_)
        add_worker();
      // else every thread is in a pass: the hub looks for a stall
      break;
    case watcher::state::running: w->again = true; break;
    case watcher::state::queued:
    case watcher::state::done: break;
  }
}

void watch_hub::wake(const std::shared_ptr<watcher>& w) {
  std::lock_guard<std::mutex> lk(mtx_);
  enqueue(w);
}

bool watch_hub::add_worker() {
  // Join the threads that already returned (each is past its last use of
  // the hub's state, or just about to be).
  for (auto id : exited_)
    for (auto it = threads_.begin(); it != threads_.end(); ++it)
      if (it->get_id() == id) {
        it->join();
        threads_.erase(it);
        break;
      }
  exited_.clear();
  try {
    threads_.emplace_back([this] { work(); });
  } catch (const std::system_error&) {
    return false; // out of threads: the hub tries again at its next check
  }
  ++workers_;
  return true;
}

result<std::unique_ptr<watch_handle>> watch_hub::start(watch_request req, std::uint64_t after,
                                                       std::uint64_t head, bool oldest,
                                                       change_handler on_changes,
                                                       end_handler on_end) {
  auto w = std::make_shared<watcher>();
  w->core = &core_;
  w->hub = this;
  w->req = std::move(req);
  w->oldest = oldest;
  w->on_changes = std::move(on_changes);
  w->on_end = std::move(on_end);
  w->cursor = after;
  w->delivered = after; // progress is measured from the start
  w->last_delivery = clock::now();
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
    const auto no_thread = error{errc::unavailable, "no thread can be started for watches"};
    if (!thread_.joinable()) {
      next_sweep_ = clock::now() + sweep_period;
      try {
        thread_ = std::thread([this] { run(); });
      } catch (const std::system_error&) {
        return no_thread;
      }
    }
    if (workers_ == 0 && !add_worker())
      return no_thread;
    watches_.push_back(w);
    ++generation_;
    live_.fetch_add(1, std::memory_order_relaxed);
    // The first pass reads the log after `after` unasked: a row the hub
    // scanned before this watch was listed is not missed.
    enqueue(w);
  }
  return std::unique_ptr<watch_handle>(std::make_unique<handle>(w));
}

void watch_hub::close() {
  std::vector<std::shared_ptr<watcher>> all;
  {
    std::lock_guard<std::mutex> lk(mtx_);
    if (closed_)
      return;
    closed_ = true;
    all = watches_;
  }
  for (auto& w : all)
    w->end(watch_end_reason::closing);
  std::vector<std::thread> threads;
  {
    std::unique_lock<std::mutex> lk(mtx_);
    gone_.wait(lk, [&] { return watches_.empty(); });
    stopping_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  work_cv_.notify_all();
  for (auto& t : threads)
    t.join();
  if (thread_.joinable())
    thread_.join();
}

void watch_hub::work() {
  std::unique_lock<std::mutex> lk(mtx_);
  for (;;) {
    if (ready_.empty()) {
      ++idle_;
      const bool woken =
        work_cv_.wait_for(lk, linger, [&] { return stopping_ || !ready_.empty(); });
      --idle_;
      if (ready_.empty()) {
        if (stopping_ || (!woken && workers_ > base_workers_)) {
          --workers_;
          exited_.push_back(std::this_thread::get_id());
          return;
        }
        continue;
      }
    }
    auto w = std::move(ready_.front());
    ready_.pop_front();
    w->st = watcher::state::running;
    ++passes_;
    const std::uint64_t skip = w->behind ? 0 : w->hit ? w->hit_from : scanned_;
    w->hit = false;
    lk.unlock();
    const auto done = w->pass(skip);
    lk.lock();
    w->last_pass = clock::now();
    w->behind = done != watcher::outcome::at_head;
    if (done == watcher::outcome::ended) {
      w->st = watcher::state::done;
      watches_.erase(std::find(watches_.begin(), watches_.end(), w));
      ++generation_;
      live_.fetch_sub(1, std::memory_order_relaxed);
      gone_.notify_all();
    } else {
      w->st = watcher::state::idle;
      if (std::exchange(w->again, false) || done == watcher::outcome::more)
        enqueue(w);
    }
  }
}

void watch_hub::run() {
  std::unique_lock<std::mutex> lk(mtx_);
  for (;;) {
    // While a thread is in a pass, look for a stall every `stall_after`.
    auto deadline = next_sweep_;
    if (idle_ < workers_)
      deadline = std::min(deadline, clock::now() + stall_after);
    cv_.wait_until(lk, deadline, [&] { return stopping_ || published_ > scanned_; });
    if (stopping_)
      return;
    auto now = clock::now();
    // A stall: watches wait, every thread is in a pass, and none started a
    // pass for `stall_after`.
    if (ready_.empty() || idle_ > 0 || passes_ != seen_passes_) {
      seen_passes_ = passes_;
      seen_at_ = now;
    } else if (now - seen_at_ >= stall_after && workers_ < watches_.size()
               && workers_ < max_workers) {
      add_worker();
      seen_at_ = now;
    }
    // Progress: idle watches not given a pass for a period get one.
    if (now >= next_sweep_) {
      for (auto& w : watches_)
        if (w->st == watcher::state::idle && now - w->last_pass >= progress_period)
          enqueue(w);
      next_sweep_ = now + sweep_period;
    }
    if (published_ <= scanned_)
      continue;
    const std::uint64_t head = published_, from = scanned_;
    if (generation_ != index_generation_) {
      // The watch list changed: index it again. Session watches by session
      // id (a row names one session: one lookup instead of a comparison per
      // watch); the others are tried in turn.
      index_generation_ = generation_;
      listed_ = watches_;
      by_id_.clear();
      wide_.clear();
      for (std::size_t i = 0; i < listed_.size(); ++i) {
        if (listed_[i]->req.scope == watch_scope::session)
          by_id_.emplace(listed_[i]->req.session_id, i);
        else
          wide_.push_back(i);
      }
    }
    lk.unlock();
    // listed_, by_id_ and wide_ are the hub thread's own.
    hits_.assign(listed_.size(), 0);
    auto try_watch = [&](std::size_t i, const store::change_row& row) {
      if (!hits_[i] && store::names_row(listed_[i]->req, row))
        hits_[i] = 1;
    };
    bool all = false;
    if (auto txn = store::begin_read(*core_.kv)) {
      auto r = store::scan_changes(**txn, from, [&](const store::change_row& row) {
        if (row.kind == change_kind::remove_user || row.kind == change_kind::remove_app) {
          for (std::size_t i = 0; i < listed_.size(); ++i) // names no one session
            try_watch(i, row);
        } else {
          auto [b, e] = by_id_.equal_range(row.id);
          for (auto it = b; it != e; ++it)
            try_watch(it->second, row);
          for (auto i : wide_)
            try_watch(i, row);
        }
        return row.seq < head;
      });
      all = !r; // a gap or damage: let every watch read and find out
    } else {
      all = true;
    }
    // Taking a watch for a pass reads scanned_ and the hits under mtx_: the
    // two move together, so a pass may skip to scanned_ only past rows the
    // hub found nothing in for it.
    lk.lock();
    scanned_ = std::max(scanned_, head);
    for (std::size_t i = 0; i < listed_.size(); ++i)
      if (all || hits_[i])
        enqueue(listed_[i], from);
  }
}

} // namespace agentstate::detail
