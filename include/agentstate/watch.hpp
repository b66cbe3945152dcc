// SPDX-License-Identifier: Apache-2.0
// agentstate/watch.hpp: the change feed. Every committed create, append and
// delete takes the next number of the store's commit sequence inside its
// transaction and is logged under it (the change log, docs/storage.md), so a
// reader sees change N+1 only with every change before it. A cursor names a
// point in that sequence: a change's own cursor, or the point a read saw.
// Reading "after cursor C" resumes with no gap and no duplicate, across
// disconnects, restarts and crashes, while C is within the log's retention
// (options::change_retention); older, the read fails with
// errc::cursor_expired and error::oldest_cursor. No CAF here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"

namespace agentstate {

/// What a feed follows.
enum class watch_scope {
  session, ///< one session (app_name, user_id, session_id): its own changes
  user, ///< one user's `user:` keys (app_name, user_id), set by any session
  app, ///< one app's `app:` keys (app_name), set by any session
  all, ///< every change in the store
};

/// A feed's filter and start. For `user` and `app`, include_sessions adds
/// every change of every session of that user or app (whole, with events);
/// without it a change is delivered only for its `user:` (or `app:`) keys,
/// with those keys alone and no event. A key_prefix (the key as an event
/// names it, prefix included: "user:cart", "app:", "score") keeps only the
/// keys that start with it, and only changes that keep at least one.
struct watch_request {
  watch_scope scope = watch_scope::all;
  std::string app_name; ///< required unless scope is all
  std::string user_id; ///< required for user and session
  std::string session_id; ///< required for session
  bool include_sessions = false;
  std::string key_prefix;
  /// Exclusive: the first change delivered is the one after this cursor.
  /// from_start ("start"): from the oldest change the log keeps (never
  /// cursor_expired). Unset: read_changes starts at the oldest change the
  /// log keeps, a watch after the newest.
  std::optional<std::string> from;
};

/// The watch_request::from that names the oldest change the log keeps.
inline constexpr const char* from_start = "start";

/// remove_user / remove_app: delete_user / delete_app removed every session
/// of a user (user_id set, session_id empty) or of an app (both empty) and
/// their user: / app: state; one change for all of it, delivered to every
/// watch of a scope inside (whatever its key prefix).
enum class change_kind { create, append, remove, remove_user, remove_app };

/// "create", "append", "delete", "delete_user", "delete_app".
const char* to_string(change_kind k) noexcept;

/// One committed change, as a feed delivers it.
struct change {
  std::string cursor; ///< this change's point in the commit sequence
  change_kind kind = change_kind::append;
  std::string app_name, user_id, session_id;
  /// The session's version after the change (create: 0; delete: its
  /// version when deleted).
  std::uint64_t version = 0;
  /// Keys set, each with its scope prefix as in an event's state_delta,
  /// with the values committed (a modify's result, derived keys). A
  /// create's initial state is its state_delta. Never a temp: or turn: key.
  json state_delta = json::object();
  /// Keys removed (state_remove as committed).
  std::vector<std::string> state_remove;
  /// An append's event as stored, when the feed includes sessions.
  std::optional<event> ev;
};

/// A page of changes in commit order.
struct change_page {
  std::vector<change> changes;
  /// Where the read stopped: pass it as the next read's `from`. It is past
  /// every change examined, delivered or filtered out.
  std::string cursor;
  /// Whether the read reached the newest committed change.
  bool at_head = false;
};

json to_json(const change& x);
json to_json(const change_page& x);

// -- the push form (engine::watch) ---------------------------------------------

/// Why a watch ended.
enum class watch_end_reason {
  cancelled, ///< watch_handle::cancel() or the handle's destruction
  closing, ///< the engine closed
  /// Its position fell out of the log's retention while it was behind
  /// (err carries oldest_cursor).
  cursor_expired,
  failed, ///< a read of the log failed (err: data_corrupt, a storage error)
};

/// "cancelled", "closing", "cursor_expired", "failed".
const char* to_string(watch_end_reason r) noexcept;

struct watch_end {
  watch_end_reason reason = watch_end_reason::cancelled;
  std::optional<error> err; ///< set for cursor_expired and failed
  /// Past every change delivered (and every change examined and not taken):
  /// a watch or read from it misses nothing and repeats nothing.
  std::string resume_from;
};

/// Receives a watch's batches: in commit order, one at a time, on one of
/// the engine's delivery threads (shared by all watches). A batch holds 1
/// to 256 changes and at most 4 MiB of their stored text (beyond that, one
/// change); an empty batch is progress (at most once a second, when the
/// feed's cursor moved past changes the watch does not take). It may block:
/// its own watch waits (the log keeps what it has not read yet), and other
/// watches wait about 10 ms, after which the engine adds a delivery thread,
/// up to 16 in all: beyond that, callbacks that block hold back the watches
/// queued behind them, so a host that must not stall others returns at once
/// and resumes later from the batch's cursor. It may cancel its own watch;
/// it must not close the engine.
using change_handler = std::function<void(change_page batch)>;
/// Called once when the watch ends, on a delivery thread, after its last
/// batch.
using end_handler = std::function<void(const watch_end& end)>;

/// A running watch; destroying it cancels it.
class watch_handle {
public:
  virtual ~watch_handle() = default;
  /// Stops the watch: no batch starts after it returns, and on_end(cancelled)
  /// has been called, unless the watch had already ended. Waits for a batch
  /// in progress, unless called from inside that batch's callback.
  virtual void cancel() = 0;
  /// Past every change delivered or examined so far (resume from here).
  virtual std::string cursor() const = 0;
};

} // namespace agentstate
