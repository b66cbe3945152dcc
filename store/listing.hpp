// SPDX-License-Identifier: Apache-2.0
// store/listing.hpp: pages of an app's or a user's sessions (L1-L3 and
// list_request's options), from the list indexes.
#pragma once

#include <cstddef>

#include "agentstate/error.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// One page in the snapshot `txn`, in update-time, creation-time or id
/// order, without the sessions that have expired at `now` (epoch seconds,
/// T1). Errors: invalid_argument (a page token of another listing),
/// storage errors, data_corrupt. Cost: O(offset + page) index reads and a
/// record and state read per listed session (O(matching) more with
/// include_total). The page ends early, with a next_page_token, once its
/// JSON would pass `max_bytes` (it holds at least one session; too_large
/// when the first alone passes it). With list_state::once the shared
/// scopes' state is counted once per page, not once per session.
/// REQUIRES: page_size in 1..1000.
result<session_page> list_sessions(kv_read& txn, const list_request& req, std::size_t page_size,
                                   std::size_t max_bytes, double now);

} // namespace agentstate::store
