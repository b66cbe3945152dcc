// SPDX-License-Identifier: Apache-2.0
// protocol/dispatcher.hpp: the ordering of one stream's requests (per-session
// pipelines and turns, flush barriers, the in-flight caps) and the writing of
// their responses. Internal to agentstate_protocol.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agentstate/engine.hpp"
#include "protocol/methods.hpp"
#include "protocol/responses.hpp"

namespace agentstate::protocol::detail {

/// Runs prepared requests through the engine (the rules of ordering, see
/// methods.hpp): a free one at once; a per-session one once every earlier
/// request naming the same session has been started (pipelined) or has
/// completed (per_session), and no earlier per_session one of it is still
/// waiting or running; a barrier after every earlier non-barrier request has
/// completed. One session's requests are started in the order they were
/// submitted, one at a time (never two threads starting calls of one
/// session at once), so the engine's per-session order is the stream's.
///
/// Responses: each answered request's response line goes to `write`, one
/// call at a time, under the dispatcher's lock. One session's responses go
/// out in the order its requests were submitted: a reply that arrives before
/// an earlier one of its session (an error the engine or a refusal answers at
/// once) waits for it, and the earlier one's thread writes it along. A
/// request counts as completed (for per_session, barriers, the in-flight caps
/// and wait_idle) once its response has been passed to `write`.
///
/// Ownership: always held by shared_ptr (create with std::make_shared); every
/// request in flight holds one, so the dispatcher outlives its rpc_session
/// when a callback is still returning as wait_idle() wakes up. Borrows the
/// engine.
/// Thread safety: submit() from one thread (the stream's reader); answer(),
/// notify(), wait_idle() and in_flight() from any; completions arrive on
/// engine threads, and may start the requests they unblock there and write
/// the responses they release.
/// Cost per request: one allocation for its record, one lock of the
/// dispatcher's mutex to admit it and one to answer and complete it (the
/// write included); a session's entry lives while it has requests in flight,
/// and is reused for another session after.
class dispatcher : public std::enable_shared_from_this<dispatcher> {
public:
  /// Observers of the answers (rpc_config's); each may be empty, none may
  /// block or throw (what they throw is dropped).
  struct hooks {
    /// data.kind of each failure answered to a request (notifications are
    /// not answered, so not counted).
    std::function<void(std::string_view kind)> on_error;
    /// After one or more requests completed; in_flight() no longer counts
    /// them. Called outside the lock, on the thread that completed them.
    std::function<void()> on_complete;
    /// Members added to a `stats` result (prepared::server_stats) as "server".
    std::function<json()> server_stats;
  };

  /// The bounds on what is admitted and not yet completed.
  struct bounds {
    std::size_t requests = 4096; ///< 0 counts as 1
    std::size_t bytes = std::size_t{16} << 20; ///< of the requests' lines; 0 counts as 1
    /// Bytes in flight of every dispatcher sharing it (a server's
    /// connections): added to at admission, subtracted at completion. Null:
    /// not shared. No bound is applied here (the owner checks it).
    std::shared_ptr<std::atomic<std::uint64_t>> shared_bytes;
  };

  /// `write` as for rpc_session.
  dispatcher(engine& e, std::function<void(std::string)> write, bounds b, hooks h = {});
  ~dispatcher();

  /// Admits and starts (or queues) `p`, whose request line had `bytes`
  /// bytes; answers with `id` unless `notification`. Blocks while
  /// bounds.requests requests are outstanding, or while admitting it would
  /// take the bytes in flight past bounds.bytes (a request is always
  /// admitted when nothing is in flight). Throws only bad_alloc, before the
  /// request is admitted.
  void submit(json id, bool notification, prepared p, std::size_t bytes);

  /// Writes the response line answering `id` with `o`. Never throws: a line
  /// that cannot be built or written is dropped.
  void answer(const json& id, const outcome& o);

  /// Writes a notification line (the server's own, such as a watch's
  /// changes) between responses, through the same `write`. Never throws.
  void notify(std::string line);

  /// Blocks until every submitted request has completed and been answered.
  /// REQUIRES: not called from an engine callback.
  void wait_idle();

  /// Requests submitted and not yet completed.
  std::size_t in_flight() const;
  /// The bytes of their request lines.
  std::size_t in_flight_bytes() const;

private:
  struct lane;
  /// One admitted request. Deleted by whichever of its reply and the return
  /// of its start comes second.
  struct record {
    std::shared_ptr<dispatcher> owner; ///< keeps the dispatcher while in flight
    json id; ///< null for notifications
    bool notification = false; ///< run, never answered
    bool server_stats = false; ///< see prepared::server_stats
    ordering order = ordering::free;
    operation op;
    lane* l = nullptr; ///< its session's lane (pipelined, per_session)
    std::uint64_t epoch = 0; ///< the epoch it was admitted in (not barriers)
    std::size_t bytes = 0; ///< its request line's
    record* next = nullptr; ///< the next waiting request of its lane
    record* later = nullptr; ///< the next unanswered request of its lane
    bool ready = false; ///< replied; `line` waits for earlier answers
    bool has_line = false; ///< `line` is to be written (not a notification)
    std::string line; ///< its response, while it waits
    std::atomic<bool> replied{false};
    std::atomic<int> phase{0};
  };
  /// A session with requests in flight or waiting: its requests waiting to
  /// start, in order, what runs, and its requests not yet answered, in order.
  struct lane {
    const std::string* key = nullptr; ///< its key in lanes_
    std::size_t running = 0; ///< started, not completed
    bool exclusive = false; ///< a per_session request is running
    bool starting = false; ///< a thread is starting its waiting ones
    record* head = nullptr; ///< waiting to start (via `next`)
    record* tail = nullptr;
    record* first = nullptr; ///< admitted, unanswered (via `later`)
    record* last = nullptr;
  };
  /// Requests admitted between two barriers, and the barrier that closes
  /// them (null for the newest, open one).
  struct epoch {
    std::size_t pending = 0; ///< non-barrier requests not yet completed
    record* barrier = nullptr;
  };

  void start(record* r);
  static void reply_to(void* r, outcome o);
  void on_reply(record* r, outcome o);
  std::string answer_line(record& r, outcome& o);
  void write_line(std::string line);
  static record* take_ready(lane* l);
  void settle(record* r, lane*& to_run, std::vector<record*>& barriers);
  void after_settle(lane* to_run, std::vector<record*>& barriers);
  static void release(record* r);
  void run_lane(lane* l);
  void drop_if_idle(lane* l);
  void ready_barriers(std::vector<record*>& out);
  static bool may_start(const lane& l, const record& r);

  engine& eng_;
  std::function<void(std::string)> write_; ///< called under mtx_
  std::size_t max_in_flight_;
  std::size_t max_in_flight_bytes_;
  std::shared_ptr<std::atomic<std::uint64_t>> shared_bytes_;
  hooks hooks_;

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool waiting_room_ = false; ///< submit() waits for room (cv_)
  std::size_t idle_waiters_ = 0; ///< threads in wait_idle() (cv_)
  std::size_t in_flight_ = 0; ///< admitted, not yet completed (barriers too)
  std::size_t in_flight_bytes_ = 0; ///< their request lines' bytes
  std::uint64_t first_epoch_ = 0; ///< the number of epochs_.front()
  std::deque<epoch> epochs_{1};
  using lane_map = std::unordered_map<std::string, lane>;
  lane_map lanes_; ///< sessions with work
  /// Entries of lanes_ whose sessions went idle, kept (at most
  /// max_spare_lanes) for the next sessions to have work, so that a
  /// session's entry costs no allocation while the stream stays busy.
  std::vector<lane_map::node_type> spare_;
  static constexpr std::size_t max_spare_lanes = 64;
};

} // namespace agentstate::protocol::detail
