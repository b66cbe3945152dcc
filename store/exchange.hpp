// SPDX-License-Identifier: Apache-2.0
// store/exchange.hpp: a store as JSON lines, and back. `agentstate export`,
// `dump` and `import` are thin wrappers. Export -> import -> export is
// byte-identical: records come in key order and values are re-encoded with
// the same encoder that wrote them.
//
// Records, one JSON object per line, in this order:
//   {"type":"header","format":1}
//   per session (key order): {"type":"session","app_name","user_id","id",
//     "created","last_update_time","version","state":{own keys only},
//     "origin":{its own state as created; absent when the store has none},
//     "expires_at", "refresh_ttl_s": only for a session that expires}
//     (a session that has expired is not exported: it is deleted)
//     then its events: {"type":"event","app_name","user_id","session_id",
//     "version","event":{...}}
//   {"type":"user_state","app_name","user_id","state":{...}} per user
//   {"type":"app_state","app_name","state":{...}} per app
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <string>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// The export's own format (the header's "format"), independent of the
/// store's format_version: store formats 1 and 2 export the same records.
inline constexpr std::uint32_t export_format_version = 1;

/// Restricts an export to one app, one user of it, or one session of that.
/// REQUIRES: user only with app; session only with user.
struct export_filter {
  std::optional<std::string> app, user, session;
};

/// Emits the records of the snapshot `txn` that match `filter`, one line per
/// `sink` call (no trailing newline). Returns the number of records.
/// A session, user or app scope with a damaged row (data_corrupt: a wrong
/// checksum) is left out whole and reported to `on_damaged`, and the export
/// goes on; without `on_damaged` it ends the export with that error. Memory:
/// one session's lines are held until all of them decode.
/// Errors: data_corrupt, internal (a row does not decode: run verify),
/// storage errors.
result<std::uint64_t> export_store(kv_read& txn, const export_filter& filter,
                                   const std::function<void(const std::string&)>& sink,
                                   const std::function<void(const error&)>& on_damaged = {});

/// Emits the user_state and app_state records of the snapshot `txn` (what
/// export_store emits after the sessions). Returns the number of records.
/// Errors as export_store.
result<std::uint64_t> export_scope_states(kv_read& txn,
                                          const std::function<void(const std::string&)>& sink);

/// Writes the records read from `in` into `kv`, which must hold no session
/// and no scope state (invalid_argument otherwise). Commits every 10,000
/// records; on error, what was committed stays (import into a fresh
/// directory). The first commit gives the store a new epoch and an empty
/// change log (the imported sessions are in no log; earlier cursors are
/// refused). A session's events must be consecutive lines (as export_store
/// writes them) with distinct ids and versions, and event ids, invocation
/// ids and authors pass model::check_event_ids. Errors: invalid_argument
/// naming the line (for a repeat: the session, the id or version, and the
/// earlier line), storage errors. `progress(records)` is called after each
/// commit.
result<std::uint64_t> import_store(kv_store& kv, std::istream& in,
                                   const std::function<void(std::uint64_t)>& progress = {});

} // namespace agentstate::store
