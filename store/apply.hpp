// SPDX-License-Identifier: Apache-2.0
// store/apply.hpp: writing a write set's rows (docs/storage.md).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "agentstate/error.hpp"
#include "store/change_log.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"
#include "store/write_set.hpp"

namespace agentstate::store {

/// Applies `ws` inside `txn`: a create's record, rows and list entries; an
/// append's event row, state rows, record and moved list entries; a
/// delete's every row. Precondition failures come back as errors
/// (already_exists for a create of an existing id; not_found, or unavailable
/// when an earlier append of the session failed so this one's version no
/// longer follows; condition_failed for a guarded delete, write_set::only_if,
/// of a session written since) only before the first write: an error return leaves
/// `txn` as it was. Throws kv_failure on storage failure, possibly after
/// some of the write set's puts (the caller's savepoint takes them back).
/// Every state row written keeps its scope's tally (store::state_tally):
/// the tallies of the scopes the write set writes are read before its first
/// write (a damaged one: data_corrupt, nothing written). A create and a
/// delete keep the app's and the user's session counts (count_sessions).
/// Cost: an append is ~10 puts/deletes, plus a get per state row and a
/// put per scope it writes; a delete O(rows of the session) up
/// to inline_delete_events events, beyond that a few puts and deletes (the
/// rest is purged in steps: store/purge.hpp). A remove_user / remove_app
/// puts a fence (store/scope_delete.hpp); under a fence a create is
/// unavailable and an append not_found. An app_write puts its app rows and
/// its outcome (store/app_writes.hpp), drops the outcomes it forgets, and
/// is unavailable under its app's fence.
/// With a `log`, a write set that writes anything but an app_write also
/// writes its change row (log_change). Returns whether it logged one
/// (false for an app_write and for a delete of a session that does not
/// exist).
result<bool> apply(kv_write& txn, const write_set& ws, change_log* log = nullptr);

/// The tally of scope `key` (store::state_tally) of state table `t`; zero
/// when it has none. Errors: data_corrupt when its row is damaged; storage
/// errors.
result<state_tally> read_tally(kv_read& txn, table t, std::string_view key);
/// Stores `x` as the tally of scope `key` of state table `t` (deletes the
/// row when it counts nothing). Throws kv_failure.
void put_tally(kv_write& txn, table t, std::string_view key, const state_tally& x);
/// Writes the state row `key` of state table `t`: `text` sealed (`buf` is
/// scratch space), or with `text` null deletes the row; `tally` (its
/// scope's, put back by the caller with put_tally) counts the old row out
/// and the new one in. Cost: a get before the put or delete. Throws
/// kv_failure.
void put_state_row(kv_write& txn, table t, std::string_view key, const std::string* text,
                   std::string& buf, state_tally& tally);

/// Counts one session of `app`'s user `user` in (`delta` 1) or out (-1) of
/// both session counts (store::encode_session_count), deleting a count that
/// reaches 0. A count row that is damaged is left as it is (its readers
/// report it); one that is missing counts from 0 and never goes below it.
/// Cost: two gets and two puts or deletes. Throws kv_failure.
void count_sessions(kv_write& txn, std::string_view app, std::string_view user, int delta);
/// Adds session `skey` of `app`'s user `user` to the shard index (store
/// format 11, table shard_index: key shard_index_key, an empty sealed body),
/// or with `add` false removes it. Every write that creates or removes a
/// session's record does this in the same transaction: creates and forks,
/// deletes (a large one too), the purge of a deleted user's or app's
/// sessions, import, a shard copy (store/shard_copy.hpp). Cost: a put or a
/// delete. Throws kv_failure.
void index_session(kv_write& txn, std::string_view app, std::string_view user,
                   std::string_view skey, bool add);

/// The session count of scope `key` (an app, or `app ‖ 0 ‖ user`); 0 when
/// it has none. Errors: data_corrupt when its row is damaged.
result<std::uint64_t> read_session_count(kv_read& txn, std::string_view key);

/// A session's list-index entries: by_update and by_user at its last update
/// time `updated`, by_created and by_user_created at its creation time.
std::array<std::pair<table, std::string>, 4> list_entries(std::string_view app,
                                                          std::string_view user,
                                                          std::string_view id, double updated,
                                                          double created);
/// Puts every entry of list_entries (each value seals its key). Throws
/// kv_failure.
void put_list_entries(kv_write& txn, std::string_view app, std::string_view user,
                      std::string_view id, double updated, double created);

} // namespace agentstate::store
