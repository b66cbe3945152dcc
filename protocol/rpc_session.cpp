// SPDX-License-Identifier: Apache-2.0
#include "protocol/rpc_session.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "protocol/dispatcher.hpp"
#include "protocol/request.hpp"

namespace agentstate::protocol {

// The observers of what the session answers itself (refusals, authenticate);
// the dispatcher holds those of the requests it runs (dispatcher::hooks).
struct rpc_session::observers {
  std::function<void(std::string_view)> on_error;
  std::function<void(bool)> on_authenticate;

  void error(std::string_view kind) const noexcept {
    if (on_error)
      try {
        on_error(kind);
      } catch (...) {
      }
  }
};

/// A live watch's handle and its place in the server's count (given back
/// when the handle is gone).
struct counted_watch {
  std::unique_ptr<watch_handle> handle;
  std::shared_ptr<std::atomic<std::size_t>> server_count;
  counted_watch(std::unique_ptr<watch_handle> h, std::shared_ptr<std::atomic<std::size_t>> c)
    : handle(std::move(h)), server_count(std::move(c)) {}
  counted_watch(counted_watch&&) = default;
  counted_watch& operator=(counted_watch&&) = delete;
  ~counted_watch() {
    handle.reset(); // cancels, waiting for a batch in progress
    if (server_count)
      server_count->fetch_sub(1);
  }
};

// The stream's watches. Shared with their callbacks, which run on the
// engine's delivery threads.
struct rpc_session::watches {
  std::mutex mtx;
  std::map<std::string, counted_watch> live; ///< by watch_id
  std::size_t max_live = 64;
  std::shared_ptr<std::atomic<std::size_t>> server_count;
  std::size_t max_server = 0;
  std::uint64_t next = 1;
  std::atomic<bool> closing{false}; ///< the stream is ending: send nothing more
  /// end_watches() runs: batches not yet sent are dropped and each watch's
  /// watch_ended says closing, resuming after the last batch sent.
  std::atomic<bool> ending{false};
  std::function<std::size_t()> queued_output_bytes;
  std::size_t max_backlog = 0;

  // Waits until the stream has room for `bytes` more, or is ending (false).
  bool wait_for_room(std::size_t bytes) {
    if (!queued_output_bytes)
      return !closing && !ending;
    while (!closing && !ending) {
      auto queued = queued_output_bytes();
      if (queued == 0 || queued + bytes <= max_backlog)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
};

namespace {

// Opens once the `watch` response is written: a watch's first notification
// never overtakes it.
struct answered_latch {
  std::mutex mtx;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard<std::mutex> lk(mtx);
      open = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mtx);
    cv.wait(lk, [&] { return open; });
  }
};

std::string notification_line(const char* method, json params) {
  return json{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}}.dump(
    -1, ' ', false, json::error_handler_t::replace);
}

} // namespace

rpc_session::rpc_session(engine& eng, std::function<void(std::string)> write, rpc_config cfg)
  : dispatch_(std::make_shared<detail::dispatcher>(
    eng, std::move(write), cfg.max_in_flight,
    detail::dispatcher::hooks{cfg.on_error, std::move(cfg.on_complete),
                              std::move(cfg.server_stats)})),
    max_line_depth_(cfg.max_line_depth),
    gate_(cfg.tokens ? access_gate(cfg.tokens) : access_gate()),
    watches_(std::make_shared<watches>()), eng_(eng) {
  watches_->queued_output_bytes = std::move(cfg.queued_output_bytes);
  watches_->max_backlog = std::max<std::size_t>(1, cfg.max_watch_backlog);
  watches_->max_live = cfg.max_watches;
  watches_->server_count = std::move(cfg.server_watches);
  watches_->max_server = cfg.max_server_watches;
  if (cfg.on_error || cfg.on_authenticate)
    observers_ = std::make_shared<const observers>(
      observers{std::move(cfg.on_error), std::move(cfg.on_authenticate)});
}

rpc_session::~rpc_session() {
  watches_->closing = true;
  std::map<std::string, counted_watch> live;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    live.swap(watches_->live);
  }
  live.clear(); // cancels each, waiting for a batch in progress
  drain();
}

void rpc_session::start_watch(detail::decoded_request& d) {
  std::string id;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    if (watches_->live.size() >= watches_->max_live)
      return refuse(d, rpc_code::engine_error,
                    "this connection has " + std::to_string(watches_->live.size())
                      + " live watches, the most it may have (--max-watches): unwatch one first",
                    to_string(errc::unavailable));
    id = "w" + std::to_string(watches_->next++);
  }
  std::shared_ptr<std::atomic<std::size_t>> counted;
  if (auto& all = watches_->server_count) {
    if (all->fetch_add(1) >= watches_->max_server) {
      all->fetch_sub(1);
      return refuse(d, rpc_code::engine_error,
                    "the server has " + std::to_string(watches_->max_server)
                      + " live watches, the most it may have (--max-server-watches); retry later",
                    to_string(errc::unavailable));
    }
    counted = all;
  }
  auto latch = std::make_shared<answered_latch>();
  auto ws = watches_;
  std::weak_ptr<detail::dispatcher> out = dispatch_;
  // The cursor of the last `changes` written (the start until then). Set
  // before the latch opens; then used only by the watch's callbacks, one
  // callback at a time.
  auto sent = std::make_shared<std::string>();
  auto on_changes = [latch, ws, out, id, sent](change_page page) {
    latch->wait();
    json changes = json::array();
    for (auto& c : page.changes)
      changes.push_back(to_json(c));
    auto line = notification_line(
      "changes", json{{"watch_id", id}, {"changes", std::move(changes)}, {"cursor", page.cursor}});
    if (!ws->wait_for_room(line.size()))
      return;
    if (auto d = out.lock()) {
      d->notify(std::move(line));
      *sent = page.cursor;
    }
  };
  auto on_end = [latch, ws, out, id, sent](const watch_end& e) {
    latch->wait();
    if (ws->closing)
      return; // the stream is gone: nobody to tell
    // While the stream ends, batches may have been dropped: resume after
    // the last one written.
    const bool ending = ws->ending;
    json params{
      {"watch_id", id},
      {"reason",
       ending && e.reason == watch_end_reason::cancelled ? "closing" : to_string(e.reason)},
      {"resume_from", ending ? *sent : e.resume_from}};
    if (e.err) {
      params["error"] = {{"kind", to_string(e.err->code)}, {"message", e.err->message}};
      if (e.err->oldest_cursor)
        params["error"]["oldest"] = *e.err->oldest_cursor;
    }
    if (auto d = out.lock())
      d->notify(notification_line("watch_ended", std::move(params)));
  };
  auto h = eng_.watch(std::move(*d.watch), on_changes, on_end);
  if (!h) {
    if (counted)
      counted->fetch_sub(1);
    latch->release();
    if (observers_)
      observers_->error(to_string(h.code()));
    if (!d.notification)
      dispatch_->answer(d.id, detail::from_engine(h.err()));
    return;
  }
  auto cursor = (*h)->cursor();
  *sent = cursor;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    watches_->live.emplace(id, counted_watch(std::move(*h), std::move(counted)));
  }
  if (!d.notification)
    dispatch_->answer(d.id, detail::outcome{json{{"watch_id", id}, {"cursor", cursor}}});
  latch->release();
}

bool rpc_session::watching() const {
  std::lock_guard<std::mutex> lk(watches_->mtx);
  return !watches_->live.empty();
}

void rpc_session::end_watches() {
  watches_->ending = true;
  std::map<std::string, counted_watch> live;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    live.swap(watches_->live);
  }
  for (auto& w : live)
    w.second.handle->cancel(); // its watch_ended (closing) is written first
}

void rpc_session::stop_watch(detail::decoded_request& d) {
  std::optional<counted_watch> w;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    auto it = watches_->live.find(*d.unwatch);
    if (it != watches_->live.end()) {
      w.emplace(std::move(it->second));
      watches_->live.erase(it);
    }
  }
  if (!w)
    return refuse(d, rpc_code::engine_error, "no watch '" + *d.unwatch + "' on this connection",
                  to_string(errc::not_found));
  w->handle->cancel(); // its watch_ended (cancelled) goes out first
  if (!d.notification)
    dispatch_->answer(d.id, detail::outcome{json{{"resume_from", w->handle->cursor()}}});
}

void rpc_session::refuse(const detail::decoded_request& d, int code, const std::string& message,
                         std::string_view kind) {
  if (d.notification)
    return;
  detail::rpc_failure f;
  f.code = code;
  f.message = message;
  f.kind = std::string(kind);
  if (observers_)
    observers_->error(f.kind);
  dispatch_->answer(d.id, f);
}

void rpc_session::authenticate(detail::decoded_request& d) {
  auto r = gate_.authenticate(*d.token);
  if (observers_ && observers_->on_authenticate)
    try {
      observers_->on_authenticate(r.ok());
    } catch (...) {
    }
  if (!r)
    return refuse(d, rpc_code::access_error, r.err().message, to_string(r.err().code));
  if (d.notification)
    return;
  json apps = json::array();
  if (r->all_apps)
    apps = "*";
  else
    for (const auto& a : r->apps)
      apps.push_back(a);
  dispatch_->answer(d.id, detail::outcome{json{{"apps", std::move(apps)}}});
}

void rpc_session::handle_line(std::string_view line) {
  try {
    auto d = detail::decode_request(line, max_line_depth_);
    if (d.token)
      return authenticate(d);
    const bool watching = d.watch || d.unwatch;
    if (!d.method.empty() && (d.run || d.refusal || watching))
      if (auto denied = gate_.check(d.method, d.app_name, !d.run && !watching))
        return refuse(d, rpc_code::access_error, denied->message, to_string(denied->code));
    if (d.watch)
      return start_watch(d);
    if (d.unwatch)
      return stop_watch(d);
    if (d.run) {
      dispatch_->submit(std::move(d.id), d.notification, std::move(*d.run));
    } else if (d.refusal) {
      if (observers_)
        observers_->error(d.refusal->kind);
      dispatch_->answer(d.id, *d.refusal);
    }
  } catch (const std::exception& e) {
    if (observers_)
      observers_->error("internal");
    dispatch_->answer(nullptr, detail::internal_failure("request handling", e.what()));
  } catch (...) {
    if (observers_)
      observers_->error("internal");
    dispatch_->answer(nullptr, detail::internal_failure("request handling", "unknown exception"));
  }
}

void rpc_session::handle_oversized_line(std::uint64_t bytes, std::uint64_t limit) {
  if (observers_)
    observers_->error(to_string(errc::too_large));
  dispatch_->answer(nullptr,
                    detail::make_failure(rpc_code::parse_error,
                                         "line of " + std::to_string(bytes)
                                           + " bytes exceeds the limit of " + std::to_string(limit)
                                           + " bytes; it was discarded unread",
                                         errc::too_large));
}

void rpc_session::drain() {
  dispatch_->wait_idle();
}

std::size_t rpc_session::in_flight() const {
  return dispatch_->in_flight();
}

} // namespace agentstate::protocol
