// SPDX-License-Identifier: Apache-2.0
// store/write_set.hpp: what one create, append or delete writes, as rows.
// The engine prepares it (validated and encoded, off the writer's thread);
// store::apply writes it inside a transaction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/json.hpp"

namespace agentstate::store {

/// One state row to write: the key (unprefixed for app/user scope), the
/// value's JSON text as stored, or `erase` to delete the row. `value` is the
/// decoded value, carried for the engine (scope notifications, creates'
/// late-bound keys); apply ignores it.
struct state_write {
  std::string key;
  json value;
  std::string text;
  bool erase = false;
};

/// Moved, never copied, between threads.
struct write_set {
  /// remove_user / remove_app: `app` (and `user`) name the scope to delete
  /// (store/scope_delete.hpp); no other member is used.
  enum class kind : std::uint8_t {
    create,
    append,
    remove,
    remove_user,
    remove_app,
    /// A cluster's app: write at the app's home (store/app_writes.hpp):
    /// app_writes' rows, and `outcome` kept under write id `id`; no change
    /// row (the append it belongs to logs it on its session's node).
    app_write,
    /// The outbox row of session (app, user, id) at `version` (its record
    /// must be at version-1), body `outcome`; no change row
    /// (store/outbox.hpp).
    outbox_put,
    /// Deletes that row (its append failed or its session is gone); no
    /// change row.
    outbox_drop
  } op = kind::append;
  std::string app, user, id;
  /// append: the version this event gets; the session must be at version-1.
  std::uint64_t version = 0;
  /// create: creation time; append: the event's timestamp.
  double time = 0;
  /// append: the event's row as stored (store::encode_event_row under
  /// event_key(session_key(app, user, id), version): sealed, so it is
  /// encoded after version is known).
  std::string event_row;
  std::vector<state_write> session_writes, user_writes, app_writes;
  /// create: the session's origin row (its own state as created; as-of reads
  /// and rewinds replay events over it). By default the object of
  /// session_writes; a fork carries its source's (`origin_body`), or none
  /// (`no_origin`) when the source has none.
  std::optional<std::string> origin_body;
  bool no_origin = false;
  /// create of a fork: the new session's events 1..version as stored rows
  /// (each sealed under its event_key in the new session). Its record is
  /// at `version`; `time` is its creation and last update time.
  std::vector<std::string> fork_events;
  /// create: when the session expires (epoch seconds; 0: never) and the
  /// refresh its record keeps (session_record::refresh). append: the new
  /// expiry when the append refreshes it (0: unchanged).
  double expires = 0;
  double refresh = 0;
  /// app_write: the outcome to keep (JSON text), and the write ids of the
  /// same app whose kept outcomes go (their senders no longer need them).
  std::string outcome;
  std::vector<std::string> forget;
  /// remove (engine::prune): when set, the delete applies only while the
  /// session is as it was read: a record with this version, creation and
  /// last update time, and no append out at its app's home (an outbox row).
  /// Otherwise the write set fails with condition_failed, writing nothing.
  struct record_guard {
    std::uint64_t version = 0;
    double created = 0, last_update_time = 0;
  };
  std::optional<record_guard> only_if;
  /// append: app_writes are kept at the app's home, not here (a cluster
  /// node, store/outbox.hpp): they go into the change row only. And the
  /// session's outbox row at `version` is deleted in the same commit.
  bool app_elsewhere = false;

  /// Approximate bytes this write set puts (for the batch byte cap).
  std::size_t bytes() const;
};

} // namespace agentstate::store
