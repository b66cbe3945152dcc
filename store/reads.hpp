// SPDX-License-Identifier: Apache-2.0
// store/reads.hpp: every read of a session and of the shared scopes, each
// in one snapshot (docs/storage.md). These functions never throw: storage
// failures come back as errors; every row read is checked against its
// checksum first, and a damaged one is data_corrupt naming the session and
// the row (store::damaged), never a value; a row that passes but does not
// decode is internal ("corrupt store: ...", a bug of its writer).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"

namespace agentstate::store {

/// A snapshot of `kv` (kv_store::begin_read as a result).
result<std::unique_ptr<kv_read>> begin_read(kv_store& kv);

/// The rows of table `t` under `prefix` as an object keyed by the rest of
/// each row's key (one scope's state). For a state table and a prefix
/// ending in NUL (a scope), in a snapshot with state tallies (format 8),
/// the rows are checked against the scope's tally: data_corrupt naming the
/// scope when they differ (a row lost from, or swapped in, the store's
/// pages), never the state without a key.
result<json> read_rows(kv_read& txn, table t, const std::string& prefix);

result<std::optional<session_record>> read_record(kv_read& txn, std::string_view skey);
/// read_record in a fresh snapshot of `kv`, with a session whose user or app
/// is being deleted (X2/X3) read as none; an expired session is returned
/// (its actor tracks the expiry). No record while the session's event or
/// state rows exist (and no purge mark) is data_corrupt, as for the reader
/// below.
result<std::optional<session_record>> read_record_unless_deleted(kv_store& kv,
                                                                 std::string_view skey);
/// read_record, with a session that has expired at `now` (epoch seconds,
/// T1), or whose user or app is being deleted (X2/X3), read as none;
/// data_corrupt when there is no record but the session's rows exist (a
/// damaged record key).
result<std::optional<session_record>> read_live_record(kv_read& txn, std::string_view skey,
                                                       double now);

/// The stored event of session `skey` at `version`, if any.
result<std::optional<append_result>> read_event(kv_read& txn, std::string_view skey,
                                                std::uint64_t version);

/// Calls fn(version, body) for the stored events of session `skey` up to
/// version `upto`, oldest first, while fn answers true; each row is checked
/// against its checksum first (data_corrupt naming a damaged one); `body` is
/// open_row's answer (event_body_text gives the event's JSON), valid during
/// the call. Errors: fn's, storage errors.
result<void>
scan_event_bodies(kv_read& txn, std::string_view skey, std::uint64_t upto,
                  const std::function<result<bool>(std::uint64_t, std::string_view)>& fn);

/// Calls fn(version, id) for every stored event of session `skey`, oldest
/// first. Cost: decodes every event of the session (~1 µs each).
result<void> scan_event_ids(kv_read& txn, std::string_view skey,
                            const std::function<void(std::uint64_t, const std::string&)>& fn);

/// The session per G1-G6, in one snapshot; none when it has expired at
/// `now` (epoch seconds, T1). Does not validate `req`.
/// too_large when the selected events' stored JSON passes `max_bytes`
/// (found before any is decoded or copied). With a store `epoch`, the
/// session's cursor is the snapshot's newest change (one more seek);
/// without, it is empty.
result<std::optional<session>> read_session(kv_read& txn, const get_request& req,
                                            std::size_t max_bytes, double now,
                                            std::string_view epoch = {});
result<std::optional<session>> read_session(kv_store& kv, const get_request& req,
                                            std::size_t max_bytes, double now,
                                            std::string_view epoch = {});

/// read_session as JSON text, equal to dump_json(to_json(session)), or
/// "null" when the session does not exist. Stored event texts are copied,
/// never parsed: O(bytes) instead of a DOM per event. `extra` (an object,
/// may be null) is merged into the state (the live invocation's temp: keys).
/// too_large as read_session; the cursor as read_session's.
result<std::string> read_session_text(kv_read& txn, const get_request& req, const json* extra,
                                      std::size_t max_bytes, double now,
                                      std::string_view epoch = {});
result<std::string> read_session_text(kv_store& kv, const get_request& req, const json* extra,
                                      std::size_t max_bytes, double now,
                                      std::string_view epoch = {});

/// The stored value of one state key of session (app, user, id), by the
/// key's scope (S1; prefixed key), or nullopt when missing (temp: keys are
/// never stored; the scope's user or app is being deleted, X2/X3). A key
/// found is checked by its seal; a key not found by the seals of the rows
/// just before and after it in its table (a key damaged out of place but
/// still in order is one of them): data_corrupt when either fails. It reads
/// no tally: a row lost outright is not seen (docs/storage.md).
result<std::optional<json>> read_state_value(kv_read& txn, std::string_view app,
                                             std::string_view user, std::string_view id,
                                             std::string_view key);

/// One scope's state object: user scope when `user` is given, else app scope.
/// Keys are unprefixed. Empty while the scope is being deleted (X2/X3).
result<json> read_scope(kv_read& txn, std::string_view app, const std::string* user);

} // namespace agentstate::store
