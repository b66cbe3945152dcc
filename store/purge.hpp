// SPDX-License-Identifier: Apache-2.0
// store/purge.hpp: deleting a large session in bounded steps (store format 7,
// docs/storage.md). A delete of a session with more than
// inline_delete_events events removes its record, list entries and origin
// and logs its change in its own small transaction (the session is gone for
// every reader at once) and leaves a mark in table `doomed`; its event and
// state rows are then deleted by purge_step, a bounded number per write
// transaction, by the store writer between group commits. The mark makes
// the work resumable after a crash, and tells readers and `verify` that the
// rows left are being purged. A create of a marked session first deletes
// what is left, inside its own transaction.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// A delete of a session of at most this many events deletes its rows
/// inside its own transaction; a larger one is purged in steps.
inline constexpr std::uint64_t inline_delete_events = 1024;
/// Rows one purge_step deletes at most.
inline constexpr std::size_t purge_step_rows = 64;

/// Up to `max` keys of table `t` under `prefix`, in key order. Throws
/// kv_failure.
std::vector<std::string> first_keys(kv_read& txn, table t, std::string_view prefix,
                                    std::size_t max);
/// Deletes `keys` of table `t`; returns how many. Throws kv_failure.
std::size_t delete_keys(kv_write& txn, table t, const std::vector<std::string>& keys);
/// Deletes up to `max_rows` of session `skey`'s event rows, then its state
/// rows, then its state tally; returns how many (fewer than `max_rows`:
/// none is left). Throws
/// kv_failure.
std::size_t delete_session_rows(kv_write& txn, std::string_view skey, std::size_t max_rows);

/// Marks session `skey` (whose record the caller deletes in `txn`) for
/// purging. Throws kv_failure.
void mark_doomed(kv_write& txn, std::string_view skey);

/// Whether session `skey` is marked for purging.
bool is_doomed(kv_read& txn, std::string_view skey);

/// Deletes every row left of marked session `skey` and its mark, inside
/// `txn` (a create of the same session). Cost: a delete per row. Throws
/// kv_failure.
void purge_now(kv_write& txn, std::string_view skey);

/// Deletes up to `max_rows` rows of the first marked session (events, then
/// state rows), and its mark once nothing is left; with no marked session,
/// a step under the first fence of a deleted user or app
/// (store/scope_delete.hpp). Returns the rows and marks deleted: 0 when
/// nothing is left to purge. Throws kv_failure.
std::size_t purge_step(kv_write& txn, std::size_t max_rows = purge_step_rows);

/// Whether any session is marked. Throws kv_failure.
bool any_doomed(kv_read& txn);
/// Whether anything is left to purge: a marked session or a fence (a
/// writer starting on a store resumes the purge). Throws kv_failure.
bool any_purge(kv_read& txn);

/// any_purge in a fresh snapshot of `kv`. Errors: storage errors.
result<bool> purge_left(kv_store& kv);

/// One purge_step in its own write transaction of `kv`, committed. Returns
/// what it deleted (0: nothing left to purge). Errors: storage errors.
result<std::size_t> purge_once(kv_store& kv);

} // namespace agentstate::store
