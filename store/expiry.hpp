// SPDX-License-Identifier: Apache-2.0
// store/expiry.hpp: sessions that expire (semantics T1-T4, docs/storage.md).
// A session created with a time to live has `expires` in its record and an
// entry ord64(expires) ‖ skey in table `expiry`, kept in step with the
// record by store::apply. Readers treat an expired record as no session;
// the engine's reaper deletes due sessions through their session actors,
// reading them here in expiry order.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// Adds (`expires` != 0) or removes the expiry entry of session `skey`.
/// Throws kv_failure.
void put_expiry(kv_write& txn, std::string_view skey, double expires);
void del_expiry(kv_write& txn, std::string_view skey, double expires);

/// Up to `max` sessions whose expiry is at or before `now`, soonest first.
/// Entries that are damaged or whose session's record does not hold their
/// expiry are skipped (verify reports them). Cost: a record read per entry
/// scanned. Errors: storage errors.
result<std::vector<session_ref>> due_sessions(kv_read& txn, double now, std::size_t max);

/// How many sessions under key prefix `prefix` (app ‖ 0, or app ‖ 0 ‖ user
/// ‖ 0) have expired at `now` (so a listing's total leaves them out). Cost:
/// one entry read per expired session of the store. Throws kv_failure.
std::uint64_t count_expired(kv_read& txn, double now, std::string_view prefix);

/// The earliest expiry of any session, or 0 when none expires. Throws
/// kv_failure.
double next_expiry(kv_read& txn);

} // namespace agentstate::store
