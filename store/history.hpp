// SPDX-License-Identifier: Apache-2.0
// store/history.hpp: a session's past, computed from its stored events in
// one snapshot (store format 7, docs/storage.md): its own state as of any
// version, the rewinds in its log, and its invocations. A session's origin
// row (table `origins`) holds its own state as created, so replaying
// events 1..N over it gives the state after N exactly. Functions here never
// throw; every row read is checked against its checksum (data_corrupt
// naming the row when damaged).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "store/kv.hpp"
#include "store/write_set.hpp"

namespace agentstate::store {

/// The origin row's body for a create's session-scope rows: the JSON object
/// text of their keys and stored texts (erased rows left out).
std::string origin_body(const std::vector<state_write>& rows);

/// The origin row of session `skey`: its body (a JSON object's text), or
/// nullopt when the session was created before store format 7.
result<std::optional<std::string>> read_origin(kv_read& txn, std::string_view skey);

/// A session's own state after version `version`: its keys as stored
/// (session scope only: no app:, user:, temp: or turn: key). `exact` is
/// false when the session has no origin row: the keys it was created with
/// are then known only where no event touched them (a key first set by an
/// event is taken as absent before it, a key never touched as present).
struct past_state {
  json state = json::object();
  bool exact = true;
};

/// The state of session `skey` (record version `head`) after `version`
/// (REQUIRES: version <= head). Cost: one decode per event 1..version (and
/// 1..head without an origin row) in `txn`.
result<past_state> state_at(kv_read& txn, std::string_view skey, std::uint64_t head,
                            std::uint64_t version);

/// The rewind markers of a log, as the event's actions name them: ADK's
/// rewind_before_invocation_id, or agentstate's rewind_before_version.
struct rewind_mark {
  std::string before_invocation_id;
  std::uint64_t before_version = 0;
  bool is_rewind() const { return !before_invocation_id.empty() || before_version != 0; }
};

/// What the backward scan of ADK's context builder does with each event of
/// a log (positions 0..n-1 are versions 1..n): kept, a rewind marker, or
/// annulled (inside the range a later rewind undid). A rewind marker names
/// the first event of its invocation (or its version); the events from
/// there up to the marker are annulled; a marker inside an annulled range
/// is annulled itself and undoes nothing. A marker whose invocation has no
/// earlier event is dropped alone.
enum class event_fate : std::uint8_t { kept, marker, annulled };
std::vector<event_fate> rewind_fates(const std::vector<std::string>& invocation_ids,
                                     const std::vector<rewind_mark>& marks);

/// Each event's invocation id and rewind mark, versions 1..`upto`, in one
/// pass over `txn`. Cost: one decode per event.
struct log_outline {
  std::vector<std::string> invocation_ids;
  std::vector<rewind_mark> marks;
};
result<log_outline> read_outline(kv_read& txn, std::string_view skey, std::uint64_t upto);

/// The invocations of an outline, by first version (list_invocations).
std::vector<invocation_info> invocation_spans(const log_outline& outline);

/// The effect of rewinding session `skey` (record version `head`) to the
/// point `req` names (its before_invocation_id or before_version; the rest
/// is not read), computed against its current state rows in `txn`: each key
/// changed since the point restored to its value there (`state_delta`),
/// each key that did not exist there deleted (`state_remove`, sorted);
/// derived: keys left out (the engine recomputes them from the restored
/// inputs). Errors: invalid_argument (neither or both of the point's
/// members; a version out of 1..head; an invocation id with no event in the
/// session), storage and data_corrupt errors.
result<rewind_changes> plan_rewind(kv_read& txn, std::string_view skey, std::uint64_t head,
                                   const rewind_request& req);

} // namespace agentstate::store
