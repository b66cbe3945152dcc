// SPDX-License-Identifier: Apache-2.0
// store/listing.hpp: pages of an app's or a user's sessions (L1-L3 and
// list_request's options), from the list indexes.
#pragma once

#include <cstddef>

#include "agentstate/error.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// The longest page token list_sessions reads; a longer one is refused
/// unread (invalid_argument). Every token it issues is shorter (at most 430
/// characters: names are at most 100 bytes).
inline constexpr std::size_t max_page_token_bytes = 1024;

/// One page in the snapshot `txn`, in update-time, creation-time or id
/// order, without the sessions that have expired at `now` (epoch seconds,
/// T1). A page token names the listing it was issued for (app, user or
/// none, order_by, direction) and the position in it, and carries a
/// CRC-32C of both: it depends on nothing but the request and the store's
/// keys, so it stays valid across restarts. The checksum detects damaged,
/// made-up and other listings' tokens; it is not a secret (a client that
/// forges one only starts its own listing at another position).
/// Errors: invalid_argument (a page token over max_page_token_bytes, not
/// one list_sessions issued, or one of another listing), storage errors,
/// data_corrupt: a damaged row read, or (store format 9) a walk of the
/// whole range - a page without a token that reaches the range's end, or
/// include_total's count - that finds a number of entries other than the
/// app's or user's session count (store::encode_session_count), or a page
/// that reaches an end of the range whose key just past that end fails its
/// seal (a key damaged out of the range; an intact neighbour's holds). A
/// page from a token that stops before the end checks neither. Cost:
/// O(offset + page) index reads and a record and state read per listed
/// session (O(matching) more with include_total), a get of the count when
/// the whole range was walked and one search per range end reached. The page ends early, with a next_page_token, once its
/// JSON would pass `max_bytes` (it holds at least one session; too_large
/// when the first alone passes it). With list_state::once the shared
/// scopes' state is counted once per page, not once per session.
/// REQUIRES: page_size in 1..1000.
result<session_page> list_sessions(kv_read& txn, const list_request& req, std::size_t page_size,
                                   std::size_t max_bytes, double now);

} // namespace agentstate::store
