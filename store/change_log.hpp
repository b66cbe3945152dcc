// SPDX-License-Identifier: Apache-2.0
// store/change_log.hpp: the commit sequence and the change log (store
// format 6, docs/storage.md). Every write set that changes the store takes
// the next sequence number inside its own transaction and writes one row of
// table `changes` under it, so a snapshot that holds sequence N holds every
// sequence before it that retention kept. Only the store writer writes the
// log (through commit_batch); any thread reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/watch.hpp"
#include "store/kv.hpp"
#include "store/write_set.hpp"

namespace agentstate::store {

/// One decoded row of the log. `delta` is the JSON object text of the keys
/// set, each with its scope prefix as in an event's state_delta (no temp:
/// or turn: key is ever stored); `removed` the JSON array text of the keys
/// removed; `event` an append's event as stored JSON text (empty
/// otherwise). Views point into the row they were decoded from.
struct change_row {
  std::uint64_t seq = 0;
  /// Stored as one byte: 0 create, 1 append, 2 delete, 3 delete_user,
  /// 4 delete_app.
  change_kind kind = change_kind::append;
  std::uint64_t version = 0;
  double time = 0; ///< when the writer committed it (epoch seconds)
  std::string_view app, user, id, delta, removed, event;
};

/// How much of the log the writer keeps: the newest `max_entries`, none
/// older than `max_age_seconds` (the newest entry is always kept, so the
/// head of the sequence stays readable).
struct retention_bound {
  std::uint64_t max_entries = 1'000'000;
  double max_age_seconds = 7 * 24 * 3600.0;
};

/// The writer's view of the log. `next` is the sequence the next logged
/// write set takes; `oldest` the first sequence the log holds (0: empty).
/// Owned by the store writer's thread.
struct change_log {
  std::uint64_t next = 1;
  std::uint64_t oldest = 0;
  retention_bound keep;
  double now = 0; ///< the commit time written into rows (commit_batch's `now`)
  /// trim_log's memo: the time of the row at sequence `timed` (0: none),
  /// read once rather than at every commit. A damaged row's time is +inf
  /// (it is never too old: verify names it). Rows never change under a
  /// sequence, so the memo stays true while that row is the oldest.
  std::uint64_t timed = 0;
  double timed_time = 0;
};

/// The log's key of sequence `seq` (8 bytes, big-endian).
std::string change_key(std::uint64_t seq);

/// Puts the change row of `ws` (a write set store::apply is applying; the
/// session is at `version` after it, or was when deleted) under log.next
/// and advances it. Throws kv_failure. Cost: one put of about the event's
/// size plus the changed values' text.
void log_change(kv_write& txn, const write_set& ws, std::uint64_t version, change_log& log);

/// Deletes the oldest rows beyond log.keep (at most `max_deletes` of them),
/// updating log.oldest. Throws kv_failure.
void trim_log(kv_write& txn, change_log& log, std::size_t max_deletes);

/// Deletes every row of the log (an upgrade to format 6, an import). Throws
/// kv_failure. Cost: a delete per row.
void clear_log(kv_write& txn);

/// The first and last sequence in the log as `txn` sees it ({0, 0} when
/// empty). Storage errors as results.
struct log_bounds {
  std::uint64_t first = 0, last = 0;
};
result<log_bounds> read_log_bounds(kv_read& txn);
/// The last sequence in the log as `txn` sees it (0 when empty): the point a
/// read in `txn` sees. Cost: one seek.
result<std::uint64_t> read_log_last(kv_read& txn);

/// The store's epoch (meta["epoch"]) and its log's bounds, from one
/// snapshot. Errors: data_corrupt when the store has no epoch; storage
/// errors.
struct log_head {
  std::string epoch;
  log_bounds bounds;
};
result<log_head> read_log_head(kv_store& kv);

/// A fresh store epoch: 16 random lowercase hex digits (new at store
/// creation and at import; a cursor names the epoch of its store).
std::string new_epoch();

/// The cursor text of `seq` in the store of `epoch`.
std::string format_cursor(std::string_view epoch, std::uint64_t seq);
/// The sequence of `cursor`. Errors: invalid_argument when it is not a
/// cursor, or names another store than `epoch`.
result<std::uint64_t> parse_cursor(std::string_view cursor, std::string_view epoch);

/// Decodes the log row `key` → `value`. Errors: data_corrupt.
result<change_row> decode_change(std::string_view key, std::string_view value);

/// Visits the rows after sequence `after` in order until `fn` returns false.
/// Errors: cursor_expired (oldest_cursor unset: the caller names it) when
/// rows after `after` were trimmed; data_corrupt for a damaged row; storage
/// errors.
result<void> scan_changes(kv_read& txn, std::uint64_t after,
                          const std::function<bool(const change_row&)>& fn);

} // namespace agentstate::store
