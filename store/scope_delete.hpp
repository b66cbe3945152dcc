// SPDX-License-Identifier: Apache-2.0
// store/scope_delete.hpp: deleting a user or an app (semantics X2, X3;
// docs/storage.md). delete_user / delete_app commit one small write set that
// puts a fence row in table `fences` (key app ‖ 0 ‖ user ‖ 0, or app ‖ 0: the
// prefix of every session key and state row under it) and logs one change.
// From that commit on, readers treat everything under the fence as gone and
// store::apply refuses creates and appends under it; the store writer then
// deletes the rows under it in bounded steps (purge_step), whole sessions
// first, then user state, then app state, and drops the fence with the last
// step. The fence makes the work resumable after a crash.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "store/kv.hpp"

namespace agentstate::store {

/// app ‖ 0 ‖ user ‖ 0 (a user), or app ‖ 0 (an app: `user` null).
std::string fence_key(std::string_view app, const std::string* user);

/// Whether a session or the state of user `user` of `app` is under a fence
/// in this snapshot (its user's or its app's). Cost: nothing when
/// txn.may_hold_fences() is false, else two lookups. Throws kv_failure.
bool fenced(kv_read& txn, std::string_view app, std::string_view user);
/// Whether app `app` is under a fence (its app: state). Throws kv_failure.
bool app_fenced(kv_read& txn, std::string_view app);
/// Whether some user of `app` is under a fence of its own. Throws kv_failure.
bool any_user_fenced(kv_read& txn, std::string_view app);

/// Puts the fence `key` (fence_key). Throws kv_failure.
void put_fence(kv_write& txn, std::string_view key);

/// Whether any fence is left (a writer starting on a store resumes the
/// purge). Throws kv_failure.
bool any_fence(kv_read& txn);

/// Deletes up to about `max_rows` rows under the first fence: a session's
/// event and state rows, then, once none is left, its record, list entries,
/// origin and expiry entry; when no session is left, user state rows, then
/// (an app's fence) app state rows and the outcomes of app writes applied
/// here (store/app_writes.hpp); then the fence. Returns what it deleted
/// (0: no fence). Throws kv_failure.
std::size_t purge_fence_step(kv_write& txn, std::size_t max_rows);

} // namespace agentstate::store
