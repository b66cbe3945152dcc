// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: rpc_session's one impl; its watches, authentication and routing share
// one stream's private state (observers, watches, the span runs).
#include "protocol/rpc_session.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>
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

namespace {

// Destroys engine watch handles on its own thread, in order. A handle's
// destruction waits until its watch's delivery thread has called on_end;
// the stream's reader (an I/O thread) hands its handles here instead, so
// ending watches never makes it wait for delivery threads. One thread per
// process, started at first use and joined at exit (after the handles
// queued by then are destroyed).
class handle_reaper {
public:
  static void release(std::vector<std::unique_ptr<watch_handle>> hs) {
    if (hs.empty())
      return;
    static handle_reaper r;
    r.push(std::move(hs));
  }

  ~handle_reaper() {
    {
      std::lock_guard<std::mutex> lk(mtx_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

private:
  void push(std::vector<std::unique_ptr<watch_handle>> hs) {
    {
      std::lock_guard<std::mutex> lk(mtx_);
      if (!thread_.joinable()) {
        try {
          thread_ = std::thread([this] { run(); });
        } catch (const std::system_error&) {
          // No thread: the caller's thread waits for the watches instead.
        }
      }
      if (thread_.joinable()) {
        for (auto& h : hs)
          queue_.push_back(std::move(h));
        hs.clear();
      }
    }
    cv_.notify_one();
    hs.clear();
  }

  void run() {
    std::unique_lock<std::mutex> lk(mtx_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      auto h = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      h.reset();
      lk.lock();
    }
  }

  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<watch_handle>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

std::string notification_line(const char* method, json params) {
  return json{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}}.dump(
    -1, ' ', false, json::error_handler_t::replace);
}

std::string ended_line(const std::string& id, std::string_view reason,
                       const std::string& resume_from, const std::optional<error>& err) {
  json params{{"watch_id", id}, {"reason", reason}, {"resume_from", resume_from}};
  if (err) {
    params["error"] = {{"kind", to_string(err->code)}, {"message", err->message}};
    if (err->oldest_cursor)
      params["error"]["oldest"] = *err->oldest_cursor;
  }
  return notification_line("watch_ended", std::move(params));
}

/// A watch_ended line whose error (when not null) is a JSON object {kind,
/// message, oldest?} already.
std::string ended_line(const std::string& id, std::string_view reason,
                       const std::string& resume_from, json err) {
  json params{{"watch_id", id}, {"reason", reason}, {"resume_from", resume_from}};
  if (err.is_object())
    params["error"] = std::move(err);
  return notification_line("watch_ended", std::move(params));
}

} // namespace

// One watch of the stream (a watch_id). Its notifications come from the
// callbacks of one engine watch at a time: a watch whose stream has no room
// for its next batch ends its engine watch from inside the callback
// (`paused`: no thread waits, the batch in hand is dropped) and the stream
// starts another from `sent` once its output has drained (resume_watches).
// Shared by the stream and the callbacks of its engine watches.
namespace {
/// A watch across nodes (route_refusal::span_watch_open): part 0 is this
/// node's (client_watch::handle), part i the one at peers[i - 1]. Guarded
/// by its client_watch's mutex.
struct span_parts {
  json params; ///< the request's
  std::vector<std::string> peers;
  std::function<json(const json&, std::size_t)> part_params;
  peer_watch_open open;
  std::function<std::string(const std::string&, std::size_t, const std::string&)> cursor;
  std::vector<std::function<void()>> close; ///< the parts open at peers
  bool relay = false; ///< route_refusal::span_relay: no part 0

  void close_peers() {
    auto all = std::move(close);
    close.clear();
    for (auto& c : all)
      if (c)
        c();
  }
};

struct client_watch {
  enum class state { running, paused, over };
  std::string id;
  watch_request req; ///< as asked; a restart reads from `sent`
  /// The app its access needs; nullopt: every app (scope all).
  std::optional<std::string> app;
  std::shared_ptr<std::atomic<std::size_t>> server_count; ///< its slot, given back once
  /// Orders the watch's lines and guards the members below. Held while its
  /// engine watch starts and its answer is written, so no notification
  /// overtakes the `watch` answer. Never held while a handle is destroyed.
  std::mutex mtx;
  state st = state::running;
  std::uint64_t gen = 0; ///< the engine watch whose callbacks count
  std::string sent; ///< past the last `changes` written (the start until then)
  std::unique_ptr<watch_handle> handle; ///< the engine watch (null while paused)
  /// Set for a watch across nodes: its parts at the peers; `sent` is a merged
  /// cursor then.
  std::unique_ptr<span_parts> span;

  /// Gives the server-wide slot back (once): when the watch leaves the
  /// stream's list, or with the last reference.
  void release_slot() {
    if (auto c = std::exchange(server_count, nullptr))
      c->fetch_sub(1);
  }
  ~client_watch() { release_slot(); }
};
} // namespace

// The stream's watches and what their callbacks need of the stream. Shared
// with the callbacks, which run on the engine's delivery threads.
struct rpc_session::watches : std::enable_shared_from_this<rpc_session::watches> {
  std::mutex mtx;
  std::map<std::string, std::shared_ptr<client_watch>> live; ///< by watch_id
  std::size_t max_live = 64;
  std::shared_ptr<std::atomic<std::size_t>> server_count;
  std::size_t max_server = 0;
  std::uint64_t next = 1;
  std::atomic<bool> closing{false}; ///< the stream is gone: send nothing more
  std::atomic<std::size_t> paused{0}; ///< watches waiting for room
  std::function<std::size_t()> queued_output_bytes;
  std::size_t max_backlog = 0;
  std::function<void()> on_watch_paused; ///< called under the watch's mutex
  std::weak_ptr<detail::dispatcher> out;

  // The stream's access, for delivery: a copy of the gate's token digest,
  // looked up again when the token source's table is replaced.
  std::shared_ptr<const token_source> tokens; ///< null: every app allowed
  std::mutex access_mtx;
  std::optional<token_table::digest> digest; ///< under access_mtx
  std::optional<grant> current; ///< under access_mtx
  std::uint64_t generation = 0; ///< under access_mtx

  bool allowed(const std::optional<std::string>& app) {
    if (!tokens)
      return true;
    std::lock_guard<std::mutex> lk(access_mtx);
    if (!digest)
      return false;
    auto gen = tokens->generation();
    if (gen != generation) {
      current = tokens->current()->find_digest(*digest);
      generation = gen;
    }
    if (!current)
      return false;
    return current->all_apps || (app && current->allows(*app));
  }

  // Gives `w` its id and a slot among the stream's and the server's
  // watches, or answers why there is none (kind unavailable).
  std::optional<std::string> admit(client_watch& w) {
    {
      std::lock_guard<std::mutex> lk(mtx);
      if (live.size() >= max_live)
        return "this connection has " + std::to_string(live.size())
          + " live watches, the most it may have (--max-watches): unwatch one first";
      w.id = "w" + std::to_string(next++);
    }
    if (server_count) {
      if (server_count->fetch_add(1) >= max_server) {
        server_count->fetch_sub(1);
        return "the server has " + std::to_string(max_server)
          + " live watches, the most it may have (--max-server-watches); retry later";
      }
      w.server_count = server_count;
    }
    return std::nullopt;
  }

  bool has_room(std::size_t bytes) const {
    if (!queued_output_bytes)
      return true;
    auto queued = queued_output_bytes();
    return queued == 0 || queued + bytes <= max_backlog;
  }

  void write(std::string line) {
    if (auto d = out.lock())
      d->notify(std::move(line));
  }

  // Drops `w` from `live` (when it is still there).
  void forget(const std::shared_ptr<client_watch>& w) {
    std::lock_guard<std::mutex> lk(mtx);
    auto it = live.find(w->id);
    if (it != live.end() && it->second == w) {
      live.erase(it);
      w->release_slot();
    }
  }

  void paused_one() {
    if (on_watch_paused)
      try {
        on_watch_paused();
      } catch (...) {
      }
  }

  // Starts an engine watch for `w` from `w->sent` (or from req.from, the
  // first time). REQUIRES: w->mtx held. On failure `w` is over and its
  // watch_ended written; the error is returned.
  std::optional<error> start_engine_watch(engine& eng, const std::shared_ptr<client_watch>& w,
                                          bool first);
  // The callbacks of `w`'s engine watch number `gen`.
  static change_handler on_changes_of(std::weak_ptr<watches> wsw, std::shared_ptr<client_watch> w,
                                      std::uint64_t gen);
  static end_handler on_end_of(std::weak_ptr<watches> wsw, std::shared_ptr<client_watch> w,
                               std::uint64_t gen);

  // A watch across nodes (client_watch::span). Every part is opened again
  // at each start and restart (all under one generation, w->gen); an event
  // of an older generation is ignored.
  //
  // Opens every part of `w`: the first time from the request's `from`, a
  // restart from `w->sent`. REQUIRES: w->mtx held (the parts' events wait
  // for it). On failure the parts opened are closed, `w` is over, a
  // restart's watch_ended is written, and the error is returned (a
  // cursor_expired's oldest_cursor as a merged cursor).
  std::optional<error> start_span_parts(engine& eng, const std::shared_ptr<client_watch>& w,
                                        bool first);
  // Relays part `part`'s batch (`changes` with that part's own cursors, and
  // the batch's `cursor`) under merged cursors, or pauses `w` when the
  // stream has no room for it. REQUIRES: w->mtx held, `w` running. The
  // local engine watch to release, if any, is moved to `release`.
  void relay_span_batch(client_watch& w, std::size_t part, json changes, const std::string& cursor,
                        std::vector<std::unique_ptr<watch_handle>>& release);
  // Ends `w` because one of its parts ended: watch_ended with `reason` and
  // `err` (an error object, or null), every other part closed. REQUIRES:
  // w->mtx held, `w` running.
  void end_span(client_watch& w, std::string_view reason, json err,
                std::vector<std::unique_ptr<watch_handle>>& release);
  static change_handler span_changes_of(std::weak_ptr<watches> wsw, std::shared_ptr<client_watch> w,
                                        std::uint64_t gen);
  static end_handler span_end_of(std::weak_ptr<watches> wsw, std::shared_ptr<client_watch> w,
                                 std::uint64_t gen);
  // A peer part's events; holds `w` weakly (the peer's connection holds
  // this handler, and `w` holds the connection's close).
  static std::function<void(peer_watch_event)> span_peer_events(std::weak_ptr<watches> wsw,
                                                                std::weak_ptr<client_watch> w,
                                                                std::uint64_t gen,
                                                                std::size_t part);
};

std::optional<error>
rpc_session::watches::start_engine_watch(engine& eng, const std::shared_ptr<client_watch>& w,
                                         bool first) {
  auto req = w->req;
  if (!first)
    req.from = w->sent;
  const auto gen = ++w->gen;
  auto h = eng.watch(std::move(req), on_changes_of(weak_from_this(), w, gen),
                     on_end_of(weak_from_this(), w, gen));
  if (!h) {
    w->st = client_watch::state::over;
    if (!first) {
      auto code = h.code();
      write(ended_line(w->id, code == errc::cursor_expired ? "cursor_expired" : "failed", w->sent,
                       h.err()));
    }
    return std::move(h).err();
  }
  if (first)
    w->sent = (*h)->cursor();
  w->handle = std::move(*h);
  w->st = client_watch::state::running;
  return std::nullopt;
}

change_handler rpc_session::watches::on_changes_of(std::weak_ptr<watches> wsw,
                                                   std::shared_ptr<client_watch> w,
                                                   std::uint64_t gen) {
  return [wsw, w, gen](change_page page) {
    auto ws = wsw.lock();
    if (!ws)
      return;
    std::unique_ptr<watch_handle> own; // destroyed after the lock: its own callback, no wait
    bool forget = false;
    {
      std::lock_guard<std::mutex> lk(w->mtx);
      if (w->gen != gen || w->st != client_watch::state::running || ws->closing)
        return;
      if (!ws->allowed(w->app)) {
        // The stream's token was revoked or replaced: nothing more of the
        // app goes out.
        w->st = client_watch::state::over;
        own = std::move(w->handle);
        ws->write(ended_line(w->id, "permission_denied", w->sent, std::nullopt));
        forget = true;
      } else {
        json changes = json::array();
        for (auto& c : page.changes)
          changes.push_back(to_json(c));
        auto line = notification_line(
          "changes",
          json{{"watch_id", w->id}, {"changes", std::move(changes)}, {"cursor", page.cursor}});
        if (ws->has_room(line.size())) {
          ws->write(std::move(line));
          w->sent = page.cursor;
        } else {
          w->st = client_watch::state::paused;
          ++ws->paused;
          own = std::move(w->handle);
          // Under the lock: once the stream has ended its watches, no
          // callback calls the stream's hooks.
          ws->paused_one();
        }
      }
    }
    own.reset();
    if (forget)
      ws->forget(w);
  };
}

end_handler rpc_session::watches::on_end_of(std::weak_ptr<watches> wsw,
                                            std::shared_ptr<client_watch> w, std::uint64_t gen) {
  return [wsw, w, gen](const watch_end& e) {
    auto ws = wsw.lock();
    if (!ws)
      return;
    std::lock_guard<std::mutex> lk(w->mtx);
    // Paused, ended by the stream, or superseded: the stream said what it
    // had to.
    if (w->gen != gen || w->st != client_watch::state::running || ws->closing)
      return;
    // Ended by the engine (closing, cursor_expired, failed). It keeps its
    // slot until unwatch.
    w->st = client_watch::state::over;
    w->sent = e.resume_from;
    ws->write(ended_line(w->id, to_string(e.reason), e.resume_from, e.err));
  };
}

std::optional<error> rpc_session::watches::start_span_parts(engine& eng,
                                                            const std::shared_ptr<client_watch>& w,
                                                            bool first) {
  auto& sp = *w->span;
  const auto gen = ++w->gen;
  json params = sp.params;
  if (!first)
    params["from"] = w->sent;
  // Where the merged cursor starts: the request's own, or none.
  std::string merged;
  if (auto f = params.find("from"); f != params.end() && f->is_string())
    merged = f->get<std::string>();
  auto fail = [&](std::size_t part, error e) {
    w->st = client_watch::state::over;
    sp.close_peers();
    if (e.oldest_cursor)
      e.oldest_cursor = sp.cursor(merged, part, *e.oldest_cursor);
    if (!first)
      write(ended_line(w->id, e.code == errc::cursor_expired ? "cursor_expired" : "failed", w->sent,
                       e));
    return e;
  };
  // This node's part.
  if (!sp.relay) {
    auto req = w->req;
    req.from.reset();
    json local = sp.part_params(params, 0);
    if (auto f = local.find("from"); f != local.end() && f->is_string())
      req.from = f->get<std::string>();
    auto h = eng.watch(std::move(req), span_changes_of(weak_from_this(), w, gen),
                       span_end_of(weak_from_this(), w, gen));
    if (!h)
      return fail(0, std::move(h).err());
    merged = sp.cursor(merged, 0, (*h)->cursor());
    w->handle = std::move(*h);
  }
  // The peers' parts, each opened once the one before has answered.
  for (std::size_t i = 1; i <= sp.peers.size(); ++i) {
    auto opened = sp.open(sp.peers[i - 1], sp.part_params(params, i),
                          span_peer_events(weak_from_this(), w, gen, i));
    if (!opened) {
      if (w->handle)
        handle_reaper::release([&] {
          std::vector<std::unique_ptr<watch_handle>> hs;
          hs.push_back(std::move(w->handle));
          return hs;
        }());
      return fail(i, std::move(opened).err());
    }
    merged = sp.cursor(merged, i, opened->cursor);
    sp.close.push_back(std::move(opened->close));
  }
  w->sent = std::move(merged);
  w->st = client_watch::state::running;
  return std::nullopt;
}

void rpc_session::watches::relay_span_batch(client_watch& w, std::size_t part, json changes,
                                            const std::string& cursor,
                                            std::vector<std::unique_ptr<watch_handle>>& release) {
  auto merged = w.sent;
  for (auto& c : changes)
    if (auto at = c.find("cursor"); at != c.end() && at->is_string()) {
      merged = w.span->cursor(merged, part, at->get_ref<const std::string&>());
      *at = merged;
    }
  merged = w.span->cursor(merged, part, cursor);
  auto line = notification_line(
    "changes", json{{"watch_id", w.id}, {"changes", std::move(changes)}, {"cursor", merged}});
  if (has_room(line.size())) {
    write(std::move(line));
    w.sent = std::move(merged);
    return;
  }
  // No room: every part stops; a restart opens them again from `sent`.
  w.st = client_watch::state::paused;
  ++paused;
  if (w.handle)
    release.push_back(std::move(w.handle));
  w.span->close_peers();
  paused_one();
}

void rpc_session::watches::end_span(client_watch& w, std::string_view reason, json err,
                                    std::vector<std::unique_ptr<watch_handle>>& release) {
  w.st = client_watch::state::over;
  if (w.handle)
    release.push_back(std::move(w.handle));
  w.span->close_peers();
  write(ended_line(w.id, reason, w.sent, std::move(err)));
}

change_handler rpc_session::watches::span_changes_of(std::weak_ptr<watches> wsw,
                                                     std::shared_ptr<client_watch> w,
                                                     std::uint64_t gen) {
  return [wsw, w, gen](change_page page) {
    auto ws = wsw.lock();
    if (!ws)
      return;
    std::vector<std::unique_ptr<watch_handle>> release;
    bool forget = false;
    {
      std::lock_guard<std::mutex> lk(w->mtx);
      if (w->gen != gen || w->st != client_watch::state::running || ws->closing)
        return;
      if (!ws->allowed(w->app)) {
        ws->end_span(*w, "permission_denied", nullptr, release);
        forget = true;
      } else {
        json changes = json::array();
        for (auto& c : page.changes)
          changes.push_back(to_json(c));
        ws->relay_span_batch(*w, 0, std::move(changes), page.cursor, release);
      }
    }
    handle_reaper::release(std::move(release));
    if (forget)
      ws->forget(w);
  };
}

end_handler rpc_session::watches::span_end_of(std::weak_ptr<watches> wsw,
                                              std::shared_ptr<client_watch> w, std::uint64_t gen) {
  return [wsw, w, gen](const watch_end& e) {
    auto ws = wsw.lock();
    if (!ws)
      return;
    std::vector<std::unique_ptr<watch_handle>> release;
    {
      std::lock_guard<std::mutex> lk(w->mtx);
      if (w->gen != gen || w->st != client_watch::state::running || ws->closing)
        return;
      json err;
      if (e.err) {
        err = {{"kind", to_string(e.err->code)}, {"message", e.err->message}};
        if (e.err->oldest_cursor)
          err["oldest"] = w->span->cursor(w->sent, 0, *e.err->oldest_cursor);
      }
      ws->end_span(*w, to_string(e.reason), std::move(err), release);
    }
    handle_reaper::release(std::move(release));
  };
}

std::function<void(peer_watch_event)>
rpc_session::watches::span_peer_events(std::weak_ptr<watches> wsw, std::weak_ptr<client_watch> ww,
                                       std::uint64_t gen, std::size_t part) {
  return [wsw, ww, gen, part](peer_watch_event e) {
    auto ws = wsw.lock();
    auto w = ww.lock();
    if (!ws || !w)
      return;
    std::vector<std::unique_ptr<watch_handle>> release;
    bool forget = false;
    if (!e.params.is_object())
      e.params = json::object(); // lost: none
    {
      std::lock_guard<std::mutex> lk(w->mtx);
      if (w->gen != gen || w->st != client_watch::state::running || ws->closing)
        return;
      const auto& peer = w->span->peers[part - 1];
      if (e.what == peer_watch_event::kind::changes && !ws->allowed(w->app)) {
        ws->end_span(*w, "permission_denied", nullptr, release);
        forget = true;
      } else if (e.what == peer_watch_event::kind::changes) {
        json changes = json::array();
        std::string cursor;
        if (auto c = e.params.find("changes"); c != e.params.end() && c->is_array())
          changes = std::move(*c);
        if (auto c = e.params.find("cursor"); c != e.params.end() && c->is_string())
          cursor = c->get<std::string>();
        ws->relay_span_batch(*w, part, std::move(changes), cursor, release);
      } else {
        // A part ended: so does the watch. Only its own feed's limits end
        // it as they would here; anything else (the node closing, the
        // connection lost) is the node's unavailability, retryable.
        const auto r = e.params.find("reason");
        std::string reason = r != e.params.end() && r->is_string() ? r->get<std::string>() : "";
        const auto x = e.params.find("error");
        json err = x != e.params.end() ? *x : json();
        if (e.what == peer_watch_event::kind::ended
            && (reason == "cursor_expired" || reason == "failed") && err.is_object()) {
          if (auto old = err.find("oldest"); old != err.end() && old->is_string())
            *old = w->span->cursor(w->sent, part, old->get<std::string>());
        } else {
          err = {{"kind", to_string(errc::unavailable)},
                 {"message",
                  e.what == peer_watch_event::kind::lost ? "the connection to the node at " + peer
                      + ", which watches its part of this scope, was lost: " + e.why
                                                         : "the node at " + peer
                      + " ended its part of this watch (" + reason + "): resume from resume_from"}};
          reason = "failed";
        }
        ws->end_span(*w, reason, std::move(err), release);
      }
    }
    handle_reaper::release(std::move(release));
    if (forget)
      ws->forget(w);
  };
}

rpc_session::rpc_session(engine& eng, std::function<void(std::string)> write, rpc_config cfg)
  : dispatch_(std::make_shared<detail::dispatcher>(
    eng, std::move(write),
    detail::dispatcher::bounds{cfg.max_in_flight, cfg.max_in_flight_bytes,
                               std::move(cfg.server_in_flight_bytes)},
    detail::dispatcher::hooks{cfg.on_error, std::move(cfg.on_complete),
                              std::move(cfg.server_stats)})),
    max_line_depth_(cfg.max_line_depth),
    gate_(cfg.tokens ? access_gate(cfg.tokens) : access_gate()),
    watches_(std::make_shared<watches>()), route_(std::move(cfg.route)),
    cluster_map_(std::move(cfg.cluster_map)), node_call_(std::move(cfg.node_call)),
    forward_(std::move(cfg.forward)), eng_(eng) {
  watches_->queued_output_bytes = std::move(cfg.queued_output_bytes);
  watches_->max_backlog = std::max<std::size_t>(1, cfg.max_watch_backlog);
  watches_->on_watch_paused = std::move(cfg.on_watch_paused);
  watches_->max_live = cfg.max_watches;
  watches_->server_count = std::move(cfg.server_watches);
  watches_->max_server = cfg.max_server_watches;
  watches_->tokens = cfg.tokens;
  watches_->out = dispatch_;
  if (cfg.on_error || cfg.on_authenticate)
    observers_ = std::make_shared<const observers>(
      observers{std::move(cfg.on_error), std::move(cfg.on_authenticate)});
}

rpc_session::~rpc_session() {
  watches_->closing = true;
  end_all(nullptr);
  drain();
}

void rpc_session::start_watch(detail::decoded_request& d) {
  auto w = std::make_shared<client_watch>();
  if (auto full = watches_->admit(*w))
    return refuse(d, rpc_code::engine_error, *full, to_string(errc::unavailable));
  w->req = std::move(*d.watch);
  if (w->req.scope != watch_scope::all)
    w->app = w->req.app_name;
  begin_watch(d, w, [this](const std::shared_ptr<client_watch>& x) {
    return watches_->start_engine_watch(eng_, x, true);
  });
}

template <class W, class Start>
void rpc_session::begin_watch(detail::decoded_request& d, const std::shared_ptr<W>& w,
                              Start&& start) {
  // Held until the answer is written: the first notifications wait for it.
  std::lock_guard<std::mutex> lk(w->mtx);
  if (auto failed = start(w)) {
    if (observers_)
      observers_->error(to_string(failed->code));
    if (!d.notification)
      dispatch_->answer(d.id, detail::from_engine(*failed));
    return;
  }
  {
    std::lock_guard<std::mutex> guard(watches_->mtx);
    watches_->live.emplace(w->id, w);
  }
  if (!d.notification)
    dispatch_->answer(d.id, detail::outcome{json{{"watch_id", w->id}, {"cursor", w->sent}}});
}

void rpc_session::start_span_watch(detail::decoded_request& d, json params, route_refusal& r) {
  auto w = std::make_shared<client_watch>();
  if (auto full = watches_->admit(*w))
    return refuse(d, rpc_code::engine_error, *full, to_string(errc::unavailable));
  w->req = std::move(*d.watch);
  if (w->req.scope != watch_scope::all)
    w->app = w->req.app_name;
  auto sp = std::make_unique<span_parts>();
  sp->params = std::move(params);
  sp->peers = std::move(r.span_peers);
  sp->part_params =
    r.span_params ? std::move(r.span_params) : [](const json& p, std::size_t) { return p; };
  sp->open = std::move(r.span_watch_open);
  sp->cursor = std::move(r.span_cursor);
  sp->relay = r.span_relay;
  w->span = std::move(sp);
  begin_watch(d, w, [this](const std::shared_ptr<client_watch>& x) {
    return watches_->start_span_parts(eng_, x, true);
  });
}

bool rpc_session::watching() const {
  std::lock_guard<std::mutex> lk(watches_->mtx);
  return !watches_->live.empty();
}

bool rpc_session::watches_paused() const {
  return watches_->paused.load() > 0;
}

void rpc_session::end_all(const char* reason) {
  std::map<std::string, std::shared_ptr<client_watch>> live;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    live.swap(watches_->live);
  }
  std::vector<std::unique_ptr<watch_handle>> handles;
  for (auto& [id, w] : live) {
    std::lock_guard<std::mutex> lk(w->mtx);
    if (w->st == client_watch::state::paused)
      --watches_->paused;
    if (w->st != client_watch::state::over && reason && !watches_->closing)
      watches_->write(ended_line(w->id, reason, w->sent, std::nullopt));
    w->st = client_watch::state::over;
    w->release_slot();
    if (w->handle)
      handles.push_back(std::move(w->handle));
    if (w->span)
      w->span->close_peers();
  }
  handle_reaper::release(std::move(handles));
}

void rpc_session::end_watches() {
  end_all("closing");
}

void rpc_session::resume_watches() {
  if (watches_->paused.load() == 0 || watches_->closing)
    return;
  std::vector<std::shared_ptr<client_watch>> paused;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    for (auto& [id, w] : watches_->live)
      paused.push_back(w);
  }
  for (auto& w : paused) {
    bool forget = false;
    {
      std::lock_guard<std::mutex> lk(w->mtx);
      if (w->st != client_watch::state::paused)
        continue;
      // Half the backlog free: a resumed watch has room for a few batches.
      if (watches_->queued_output_bytes
          && watches_->queued_output_bytes() > watches_->max_backlog / 2)
        return;
      --watches_->paused;
      if (!watches_->allowed(w->app)) {
        w->st = client_watch::state::over;
        watches_->write(ended_line(w->id, "permission_denied", w->sent, std::nullopt));
        forget = true;
      } else if (w->span) {
        (void)watches_->start_span_parts(eng_, w, false);
      } else {
        (void)watches_->start_engine_watch(eng_, w, false);
      }
    }
    if (forget)
      watches_->forget(w);
  }
}

void rpc_session::check_watch_access() {
  if (!watches_->tokens)
    return;
  std::vector<std::shared_ptr<client_watch>> all;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    for (auto& [id, w] : watches_->live)
      all.push_back(w);
  }
  std::vector<std::unique_ptr<watch_handle>> handles;
  for (auto& w : all) {
    {
      std::lock_guard<std::mutex> lk(w->mtx);
      if (w->st == client_watch::state::over || watches_->allowed(w->app))
        continue;
      if (w->st == client_watch::state::paused)
        --watches_->paused;
      w->st = client_watch::state::over;
      watches_->write(ended_line(w->id, "permission_denied", w->sent, std::nullopt));
      if (w->handle)
        handles.push_back(std::move(w->handle));
      if (w->span)
        w->span->close_peers();
    }
    watches_->forget(w);
  }
  handle_reaper::release(std::move(handles));
}

void rpc_session::stop_watch(detail::decoded_request& d) {
  std::shared_ptr<client_watch> w;
  {
    std::lock_guard<std::mutex> lk(watches_->mtx);
    auto it = watches_->live.find(*d.unwatch);
    if (it != watches_->live.end()) {
      w = std::move(it->second);
      watches_->live.erase(it);
    }
  }
  if (!w)
    return refuse(d, rpc_code::engine_error, "no watch '" + *d.unwatch + "' on this connection",
                  to_string(errc::not_found));
  std::string resume;
  std::vector<std::unique_ptr<watch_handle>> handles;
  {
    std::lock_guard<std::mutex> lk(w->mtx);
    if (w->st == client_watch::state::paused)
      --watches_->paused;
    if (w->st != client_watch::state::over)
      watches_->write(ended_line(w->id, "cancelled", w->sent, std::nullopt));
    w->st = client_watch::state::over;
    w->release_slot();
    resume = w->sent;
    if (w->handle)
      handles.push_back(std::move(w->handle));
    if (w->span)
      w->span->close_peers();
  }
  handle_reaper::release(std::move(handles));
  if (!d.notification)
    dispatch_->answer(d.id, detail::outcome{json{{"resume_from", resume}}});
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
  if (watches_->tokens) {
    // The watches' copy of the stream's access follows the gate's: a
    // refused token leaves the stream unauthenticated, and its watches end.
    {
      std::lock_guard<std::mutex> lk(watches_->access_mtx);
      if (r) {
        watches_->digest = token_table::digest_of(*d.token);
        watches_->generation = watches_->tokens->generation();
        watches_->current = watches_->tokens->current()->find_digest(*watches_->digest);
      } else {
        watches_->digest.reset();
        watches_->current.reset();
      }
    }
    check_watch_access();
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
  json result{{"apps", std::move(apps)}};
  if (r->read_only)
    result["read_only"] = true;
  dispatch_->answer(d.id, detail::outcome{std::move(result)});
}

decoded_line::decoded_line() noexcept = default;
decoded_line::~decoded_line() = default;
decoded_line::decoded_line(decoded_line&&) noexcept = default;
decoded_line& decoded_line::operator=(decoded_line&&) noexcept = default;

void rpc_session::answer_internal(const char* what) {
  if (observers_)
    observers_->error("internal");
  dispatch_->answer(nullptr, detail::internal_failure("request handling", what));
}

void rpc_session::handle_line(std::string_view line) {
  try {
    auto d = detail::decode_request(line, max_line_depth_);
    handle_request(d, line, line.size());
  } catch (const std::exception& e) {
    answer_internal(e.what());
  } catch (...) {
    answer_internal("unknown exception");
  }
}

decoded_line rpc_session::decode(std::string line) const noexcept {
  decoded_line out;
  out.bytes_ = line.size();
  try {
    out.req_ =
      std::make_unique<detail::decoded_request>(detail::decode_request(line, max_line_depth_));
    if (route_)
      out.line_ = std::move(line);
  } catch (const std::exception& e) {
    out.req_.reset();
    try {
      out.failure_ = e.what();
    } catch (...) {
    }
  } catch (...) {
  }
  return out;
}

void rpc_session::handle_decoded(decoded_line l) {
  try {
    if (!l.req_)
      return answer_internal(l.failure_.empty() ? "unknown exception" : l.failure_.c_str());
    handle_request(*l.req_, l.line_, l.bytes_);
  } catch (const std::exception& e) {
    answer_internal(e.what());
  } catch (...) {
    answer_internal("unknown exception");
  }
}

// REQUIRES: `line` is d's line of `bytes` bytes, or empty when route_ is
// empty (routing is the only reader of the line here). What it throws, its
// callers answer (answer_internal).
void rpc_session::handle_request(detail::decoded_request& d, std::string_view line,
                                 std::size_t bytes) {
  if (d.token)
    return authenticate(d);
  const bool watching = d.watch || d.unwatch;
  const bool node_method = d.cluster_map || d.node_call;
  if (!d.method.empty() && (d.run || d.refusal || watching || node_method))
    if (auto denied = gate_.check(d.method, d.app_name, !d.run && !watching && !node_method))
      return refuse(d, rpc_code::access_error, denied->message, to_string(denied->code));
  if (d.cluster_map)
    return answer_cluster_map(d);
  if (d.node_call)
    return answer_node_call(d, bytes);
  if (route_ && (d.run || d.watch) && route_refused(d, line))
    return;
  if (d.watch)
    return start_watch(d);
  if (d.unwatch)
    return stop_watch(d);
  if (d.run) {
    dispatch_->submit(std::move(d.id), d.notification, std::move(*d.run), bytes);
  } else if (d.refusal) {
    if (observers_)
      observers_->error(d.refusal->kind);
    dispatch_->answer(d.id, *d.refusal);
  }
}

void rpc_session::answer_cluster_map(detail::decoded_request& d) {
  if (!cluster_map_)
    return refuse(d, rpc_code::method_not_found,
                  "unknown method 'cluster_map' (not a cluster node)",
                  to_string(errc::invalid_argument));
  auto r = cluster_map_(*d.cluster_map);
  if (!r)
    return refuse(
      d, r.code() == errc::invalid_argument ? rpc_code::invalid_params : rpc_code::engine_error,
      r.err().message, to_string(r.code()));
  dispatch_->answer(d.id, std::move(*r));
}

void rpc_session::answer_node_call(detail::decoded_request& d, std::size_t bytes) {
  if (!node_call_)
    return refuse(d, rpc_code::method_not_found,
                  "unknown method '" + d.method + "' (not a cluster node)",
                  to_string(errc::invalid_argument));
  detail::prepared run;
  run.op = [call = node_call_, method = d.method,
            params = std::move(*d.node_call)](engine&, const detail::reply_fn& reply) mutable {
    call(method, std::move(params), [reply](result<json> r) {
      if (r)
        return reply(detail::outcome{std::move(*r)});
      detail::rpc_failure f;
      f.code =
        r.code() == errc::invalid_argument ? rpc_code::invalid_params : rpc_code::engine_error;
      f.message = r.err().message;
      f.kind = to_string(r.code());
      reply(detail::outcome{std::move(f)});
    });
  };
  dispatch_->submit(std::move(d.id), d.notification, std::move(run), bytes);
}

namespace {

/// A peer's answer to a forwarded request as this stream's outcome: its
/// result (as text when it came as text, see forward_done), its error
/// carried over whole (code, message, data), or the forwarding's own
/// failure when it never answered.
detail::outcome forwarded_outcome(result<json> value, const json& error_object) {
  if (value && value->is_binary()) {
    const auto& bytes = value->get_binary();
    return detail::raw_result{std::string(bytes.begin(), bytes.end())};
  }
  if (value)
    return std::move(*value);
  detail::rpc_failure f;
  f.code = rpc_code::engine_error;
  f.message = value.err().message;
  f.kind = to_string(value.code());
  if (error_object.is_object()) {
    if (auto c = error_object.find("code"); c != error_object.end() && c->is_number_integer())
      f.code = c->get<int>();
    if (auto m = error_object.find("message"); m != error_object.end() && m->is_string())
      f.message = m->get<std::string>();
    if (auto data = error_object.find("data"); data != error_object.end() && data->is_object()) {
      f.data = *data;
      if (auto k = data->find("kind"); k != data->end() && k->is_string())
        f.kind = k->get<std::string>();
      f.data.erase("kind");
    }
  }
  return f;
}

/// Steps over the JSON value at `p` (before `end`) of a text known to be
/// well-formed; false when the text ends first.
bool skip_value(const char*& p, const char* end) {
  auto skip_string = [&] { // at the opening quote
    for (++p; p < end; ++p) {
      if (*p == '\\')
        ++p;
      else if (*p == '"')
        return ++p, true;
    }
    return false;
  };
  if (p >= end)
    return false;
  if (*p == '"')
    return skip_string();
  if (*p == '{' || *p == '[') {
    std::size_t depth = 0;
    while (p < end) {
      char c = *p;
      if (c == '"') {
        if (!skip_string())
          return false;
        continue;
      }
      ++p;
      if (c == '{' || c == '[')
        ++depth;
      else if ((c == '}' || c == ']') && --depth == 0)
        return true;
    }
    return false;
  }
  const char* from = p;
  while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n'
         && *p != '\r')
    ++p;
  return p > from;
}

/// Where a request line's params are, found without reading the line as a
/// JSON value.
struct params_span {
  enum class kind {
    text, ///< `text` is the params member's value
    none, ///< no params member, or null
    unknown, ///< not found this way (a member name with an escape, the
    ///< name twice, a byte order mark): read the line as JSON
  };
  kind what = kind::unknown;
  std::string_view text;
};

/// The params of `line`, a request line already decoded (so one
/// well-formed JSON object).
params_span find_params(std::string_view line) {
  const char* p = line.data();
  const char* end = p + line.size();
  auto ws = [&] {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
      ++p;
  };
  params_span out;
  out.what = params_span::kind::none;
  bool seen = false;
  ws();
  if (p == end || *p != '{')
    return {};
  ++p;
  ws();
  if (p < end && *p == '}')
    return out;
  for (;;) {
    ws();
    if (p == end || *p != '"')
      return {};
    const char* name = ++p;
    while (p < end && *p != '"' && *p != '\\')
      ++p;
    if (p == end || *p != '"')
      return {}; // the end, or an escape in the name
    std::string_view key(name, static_cast<std::size_t>(p - name));
    ++p;
    ws();
    if (p == end || *p != ':')
      return {};
    ++p;
    ws();
    const char* value = p;
    if (!skip_value(p, end))
      return {};
    if (key == "params") {
      if (seen)
        return {};
      seen = true;
      std::string_view v(value, static_cast<std::size_t>(p - value));
      if (v != "null") {
        out.what = params_span::kind::text;
        out.text = v;
      }
    }
    ws();
    if (p < end && *p == ',') {
      ++p;
      continue;
    }
    if (p < end && *p == '}')
      return out;
    return {};
  }
}

/// A request's outcome as a part's answer to a spanning request.
span_answer as_span_answer(detail::outcome o) {
  span_answer a;
  if (auto* j = std::get_if<json>(&o)) {
    a.result = std::move(*j);
  } else if (auto* raw = std::get_if<detail::raw_result>(&o)) {
    a.result = json::parse(raw->text, nullptr, false);
    if (a.result.is_discarded()) {
      a.result = nullptr;
      a.error = detail::error_object(
        detail::internal_failure("a spanning request", "a part's result is not JSON"));
    }
  } else {
    a.error = detail::error_object(std::get<detail::rpc_failure>(o));
  }
  return a;
}

/// A peer's answer (rpc_config::forward's) as a part's or a step's: its
/// result, or its error object (made of the error when it never answered).
span_answer peer_answer(result<json> value, json error_object) {
  span_answer a;
  if (value)
    a.result = std::move(*value);
  else
    a.error = error_object.is_object() ? std::move(error_object)
                                       : detail::error_object(detail::from_engine(value.err()));
  return a;
}

/// The request's outcome of a merged answer: its result, or its error
/// object passed on as a peer's.
detail::outcome outcome_of(span_answer answer) {
  return answer.error.is_null()
    ? detail::outcome(std::move(answer.result))
    : forwarded_outcome(error{errc::internal, "a part of the request failed"}, answer.error);
}

/// The parts of one spanning request in flight: collects their answers and
/// replies once the last has come; keeps itself alive until then.
struct span_run {
  span_run(std::size_t n, detail::reply_fn r, json p,
           std::function<span_answer(const json&, std::vector<span_answer>)> f)
    : parts(n), left(n), reply(r), params(std::move(p)), span(std::move(f)) {}

  std::mutex mtx;
  std::vector<span_answer> parts; ///< guarded by mtx until left is 0
  std::size_t left; ///< guarded by mtx
  detail::reply_fn reply;
  json params;
  std::function<span_answer(const json&, std::vector<span_answer>)> span;
  std::shared_ptr<span_run> self;

  void done(std::size_t i, span_answer a) {
    {
      std::lock_guard<std::mutex> lock(mtx);
      parts[i] = std::move(a);
      if (--left > 0)
        return;
    }
    auto keep = std::move(self);
    detail::outcome out;
    try {
      out = outcome_of(span(params, std::move(parts)));
    } catch (const std::exception& e) {
      out = detail::internal_failure("a spanning request", e.what());
    }
    reply(std::move(out));
  }

  static void local_done(void* ctx, detail::outcome o) {
    static_cast<span_run*>(ctx)->done(0, as_span_answer(std::move(o)));
  }
};

/// A request with a step after it (route_refusal::then): runs the step
/// once the request has succeeded, then answers; keeps itself alive until
/// then.
struct then_run {
  detail::reply_fn reply{nullptr, nullptr};
  engine* eng = nullptr;
  std::function<void(const std::string&, const std::string&, json, forward_done)> fwd;
  std::string peer, method;
  json params;
  std::function<span_answer(json, span_answer)> then;
  json answered; ///< the request's result, once it succeeded
  std::shared_ptr<then_run> self;

  void finish(span_answer step) {
    auto keep = std::move(self);
    detail::outcome out;
    try {
      out = outcome_of(then(std::move(answered), std::move(step)));
    } catch (const std::exception& e) {
      out = detail::internal_failure("a request's step at another node", e.what());
    }
    reply(std::move(out));
  }

  static void step_done(void* ctx, detail::outcome o) {
    static_cast<then_run*>(ctx)->finish(as_span_answer(std::move(o)));
  }

  static void first_done(void* ctx, detail::outcome o) {
    auto* t = static_cast<then_run*>(ctx);
    if (std::holds_alternative<detail::rpc_failure>(o)) {
      auto keep = std::move(t->self);
      t->reply(std::move(o));
      return;
    }
    auto a = as_span_answer(std::move(o));
    if (!a.error.is_null()) {
      auto keep = std::move(t->self);
      t->reply(forwarded_outcome(error{errc::internal, "the request failed"}, a.error));
      return;
    }
    t->answered = std::move(a.result);
    try {
      if (!t->peer.empty()) {
        t->fwd(t->peer, t->method, std::move(t->params), [t](result<json> value, json eo) {
          auto step = peer_answer(std::move(value), std::move(eo));
          t->finish(std::move(step));
        });
        return;
      }
      auto prepare = detail::find_method(t->method);
      auto local = prepare ? prepare(t->params)
                           : detail::prepare_result(detail::internal_failure(
                             "a request's step", "the step's method is unknown"));
      if (auto* f = std::get_if<detail::rpc_failure>(&local)) {
        span_answer step;
        step.error = detail::error_object(*f);
        t->finish(std::move(step));
        return;
      }
      std::get<detail::prepared>(local).op(*t->eng, detail::reply_fn(&then_run::step_done, t));
    } catch (const std::exception& e) {
      span_answer step;
      step.error = detail::error_object(detail::internal_failure("a request's step", e.what()));
      t->finish(std::move(step));
    }
  }
};

/// Makes `op` run route_refusal::then's step after it, through `fwd`
/// (`r`'s step members are moved from).
void add_then_step(
  detail::operation& op, route_refusal& r,
  const std::function<void(const std::string&, const std::string&, json, forward_done)>& fwd_) {
  op = [first = std::move(op), fwd = fwd_, peer = std::move(r.then_peer),
        method = std::move(r.then_method), params = std::move(r.then_params),
        then = std::move(r.then)](engine& e, const detail::reply_fn& reply) mutable {
    auto t = std::make_shared<then_run>();
    t->reply = reply;
    t->eng = &e;
    t->fwd = fwd;
    t->peer = peer;
    t->method = method;
    t->params = params;
    t->then = then;
    t->self = t;
    try {
      first(e, detail::reply_fn(&then_run::first_done, t.get()));
    } catch (const std::exception& x) {
      then_run::first_done(t.get(), detail::internal_failure("a request", x.what()));
    }
  };
}

/// A request run after a step (route_refusal::before): keeps itself alive
/// until the request has answered.
struct before_run {
  detail::reply_fn reply{nullptr, nullptr};
  engine* eng = nullptr;
  std::string method;
  json params;
  std::function<span_answer(json, span_answer)> before;
  std::shared_ptr<before_run> self;

  static void request_done(void* ctx, detail::outcome o) {
    auto* b = static_cast<before_run*>(ctx);
    auto keep = std::move(b->self);
    b->reply(std::move(o));
  }

  void step_done(span_answer step) {
    try {
      auto next = before(std::move(params), std::move(step));
      if (!next.error.is_null()) {
        auto keep = std::move(self);
        reply(forwarded_outcome(error{errc::internal, "a step of the request failed"}, next.error));
        return;
      }
      auto prepare = detail::find_method(method);
      auto local = prepare ? prepare(next.result)
                           : detail::prepare_result(detail::internal_failure(
                             "a request after a step", "the method is unknown"));
      if (auto* f = std::get_if<detail::rpc_failure>(&local)) {
        auto keep = std::move(self);
        reply(std::move(*f));
        return;
      }
      std::get<detail::prepared>(local).op(*eng, detail::reply_fn(&before_run::request_done, this));
    } catch (const std::exception& e) {
      auto keep = std::move(self);
      reply(detail::internal_failure("a request after a step", e.what()));
    }
  }
};

/// `d`'s operation as route_refusal::before says: the step, then the
/// request with the params it makes of `params`.
void add_before_step(
  detail::operation& op, route_refusal& r, std::string method, json params,
  const std::function<void(const std::string&, const std::string&, json, forward_done)>& fwd_) {
  op = [fwd = fwd_, peer = std::move(r.then_peer), step_method = std::move(r.then_method),
        step_params = std::move(r.then_params), before = std::move(r.before),
        method = std::move(method),
        params = std::move(params)](engine& e, const detail::reply_fn& reply) mutable {
    auto b = std::make_shared<before_run>();
    b->reply = reply;
    b->eng = &e;
    b->method = method;
    b->params = params;
    b->before = before;
    b->self = b;
    auto* raw = b.get();
    try {
      fwd(peer, step_method, step_params, [raw](result<json> value, json eo) {
        auto step = peer_answer(std::move(value), std::move(eo));
        raw->step_done(std::move(step));
      });
    } catch (const std::exception& x) {
      span_answer step;
      step.error = detail::error_object(detail::internal_failure("a request's step", x.what()));
      raw->step_done(std::move(step));
    }
  };
}

} // namespace

bool rpc_session::route_refused(detail::decoded_request& d, std::string_view line) {
  route_query q;
  q.method = d.method;
  q.app_name = d.app_name ? &*d.app_name : nullptr;
  q.user_id = d.user_id ? &*d.user_id : nullptr;
  q.scope = d.scope ? &*d.scope : nullptr;
  q.this_node = d.this_node;
  q.from = d.watch && d.watch->from ? &*d.watch->from : nullptr;
  auto refusal = route_(q);
  if (!refusal)
    return false;
  if (refusal->span_watch_open && refusal->span_cursor && refusal->forward_to.empty() && forward_
      && d.watch) {
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    json req = json::parse(line, nullptr, false); // decoded once already: well-formed
    json params = req.is_object() && req.contains("params") ? req["params"] : json::object();
    start_span_watch(d, std::move(params), *refusal);
    return true;
  }
  if (!refusal->forward_to.empty() && forward_ && d.run) {
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    // The params go on as the line has them (forward's binary form), unread.
    json params;
    auto found = find_params(line);
    if (found.what == params_span::kind::text) {
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(found.text.data());
      params = json::binary(json::binary_t::container_type(bytes, bytes + found.text.size()));
    } else if (found.what == params_span::kind::unknown) {
      json req = json::parse(line, nullptr, false); // decoded once already: well-formed
      params = req.is_object() && req.contains("params") ? req["params"] : json(nullptr);
    }
    auto& run = *d.run;
    // Run once: the params move on to the peer's request.
    run.op = [fwd = forward_, peer = std::move(refusal->forward_to), method = d.method,
              params = std::move(params)](engine&, const detail::reply_fn& reply) mutable {
      fwd(peer, method, std::move(params), [reply](result<json> value, json error_object) {
        reply(forwarded_outcome(std::move(value), error_object));
      });
    };
    run.server_stats = false;
    dispatch_->submit(std::move(d.id), d.notification, std::move(run), line.size());
    return true;
  }
  if (refusal->span && refusal->forward_to.empty() && forward_ && d.run) {
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    json req = json::parse(line, nullptr, false); // decoded once already: well-formed
    json params = req.is_object() && req.contains("params") ? req["params"] : json::object();
    // Each part's params: [0] this node's, [i] span_peers[i - 1]'s.
    std::vector<json> part_params;
    for (std::size_t i = 0; i <= refusal->span_peers.size(); ++i)
      part_params.push_back(refusal->span_params ? refusal->span_params(params, i) : params);
    auto prepare = detail::find_method(d.method);
    auto local = prepare ? prepare(part_params[0])
                         : detail::prepare_result(detail::internal_failure(
                           "a spanning request", "the method has no local part"));
    if (auto* f = std::get_if<detail::rpc_failure>(&local)) {
      if (observers_)
        observers_->error(f->kind);
      if (!d.notification)
        dispatch_->answer(d.id, std::move(*f));
      return true;
    }
    auto& run = *d.run;
    run.op = [fwd = forward_, peers = std::move(refusal->span_peers),
              span = std::move(refusal->span), method = d.method, params = std::move(params),
              part_params = std::move(part_params),
              local_op = std::move(std::get<detail::prepared>(local).op)](
               engine& e, const detail::reply_fn& reply) mutable {
      auto st =
        std::make_shared<span_run>(peers.size() + 1, reply, std::move(params), std::move(span));
      st->self = st;
      for (std::size_t i = 0; i < peers.size(); ++i)
        fwd(peers[i], method, std::move(part_params[i + 1]),
            [st, i](result<json> value, json error_object) {
              auto a = peer_answer(std::move(value), std::move(error_object));
              st->done(i + 1, std::move(a));
            });
      try {
        local_op(e, detail::reply_fn(&span_run::local_done, st.get()));
      } catch (const std::exception& x) {
        st->done(0, as_span_answer(detail::internal_failure("a spanning request", x.what())));
      }
    };
    run.server_stats = false;
    if (refusal->then)
      add_then_step(run.op, *refusal, forward_);
    dispatch_->submit(std::move(d.id), d.notification, std::move(run), line.size());
    return true;
  }
  if (refusal->before && !refusal->then_peer.empty() && refusal->forward_to.empty() && forward_
      && d.run && !refusal->span) {
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    json req = json::parse(line, nullptr, false); // decoded once already: well-formed
    json params = req.is_object() && req.contains("params") ? req["params"] : json::object();
    auto& run = *d.run;
    add_before_step(run.op, *refusal, d.method, std::move(params), forward_);
    run.server_stats = false;
    dispatch_->submit(std::move(d.id), d.notification, std::move(run), line.size());
    return true;
  }
  if (refusal->then && refusal->forward_to.empty() && forward_ && d.run && !refusal->span) {
    auto& run = *d.run;
    add_then_step(run.op, *refusal, forward_);
    run.server_stats = false;
    dispatch_->submit(std::move(d.id), d.notification, std::move(run), line.size());
    return true;
  }
  if (refusal->span || refusal->then || refusal->before) {
    // A span (or a step) this stream cannot run (no forward hook): refused,
    // not answered in part.
    refusal->kind = "invalid_argument";
    refusal->message = "'" + d.method + "' needs several nodes, and this stream does not forward";
  }
  detail::rpc_failure f;
  f.code = refusal->kind == "invalid_argument" ? rpc_code::invalid_params : rpc_code::engine_error;
  f.message = std::move(refusal->message);
  f.kind = std::move(refusal->kind);
  f.data = std::move(refusal->data);
  if (d.run && !d.run->key.empty()) {
    // Answered in the session's order, after its earlier requests (the
    // dispatcher reports its error kind).
    dispatch_->submit(std::move(d.id), d.notification,
                      detail::refusal_call(std::move(f), std::move(d.run->key)), line.size());
    return true;
  }
  if (observers_)
    observers_->error(f.kind);
  if (!d.notification)
    dispatch_->answer(d.id, std::move(f));
  return true;
}

void rpc_session::handle_oversized_line(std::uint64_t bytes, std::uint64_t limit) {
  handle_oversized_line(bytes, limit, std::string());
}

void rpc_session::handle_oversized_line(std::uint64_t bytes, std::uint64_t limit,
                                        const std::string& why) {
  if (observers_)
    observers_->error(to_string(errc::too_large));
  std::string message = "line of " + std::to_string(bytes) + " bytes ";
  if (why.empty() || why.rfind("before", 0) == 0)
    message +=
      "exceeds the limit of " + std::to_string(limit) + " bytes" + (why.empty() ? "" : " " + why);
  else
    message += "discarded: " + why;
  message += "; it was discarded unread";
  dispatch_->answer(nullptr, detail::make_failure(rpc_code::parse_error, message, errc::too_large));
}

void rpc_session::drain() {
  dispatch_->wait_idle();
}

std::size_t rpc_session::in_flight() const {
  return dispatch_->in_flight();
}

std::size_t rpc_session::in_flight_bytes() const {
  return dispatch_->in_flight_bytes();
}

} // namespace agentstate::protocol
