// SPDX-License-Identifier: Apache-2.0
// actors/prepare.hpp: creates and appends taken apart into write plans, off
// the writer's thread: values encoded as the store keeps them, rows split by
// scope, the event's stored text; and the encoders the writer's late
// binding shares. Pure functions over the request; they never throw.
#pragma once

#include <string>
#include <vector>

#include "actors/core.hpp"
#include "actors/write_plan.hpp"
#include "agentstate/types.hpp"

namespace agentstate::detail {

/// The longest time to live a create may ask for (T1): 100 years.
inline constexpr double max_ttl_s = 100.0 * 365 * 24 * 3600;

/// The plan of a create: session rows, shared rows, creation time and
/// expiry (T1: invalid_argument for a bad ttl_s); temp: keys dropped (C3);
/// late-bound when it sets a derived key's input.
result<write_plan> prepare_create(const engine_core& core, const create_request& req);

struct prepared_append {
  write_plan plan;
  /// The event as stored: temp: keys stripped. Provisional when plan.late is
  /// set (the writer adds modify and derived values).
  event stored;
  /// The delta's temp: keys, for the live invocation; null when it has none.
  json temp;
  std::vector<std::string> temp_removed; ///< temp: keys the event removes
  /// `stored` as stored JSON text (append_result::text); empty when
  /// plan.late is set (the writer encodes the event).
  std::string text;
};

/// Takes `ev` apart into the plan of version `version`; `modify` (and
/// derived keys whose inputs the event changes) make it late-bound. `ev` is
/// moved from, also on error. REQUIRES: model::validate_event(ev) passed;
/// ev.id and ev.timestamp set.
result<prepared_append> prepare_append(const engine_core& core, const session_ref& r, event&& ev,
                                       std::uint64_t version, std::vector<state_modify>&& modify);

/// One state value as a row (its stored text), within max_value_bytes.
result<store::state_write> encode_value(const limits& lim, std::string key, const json& value);

/// Adds the row of a value resolved at commit (prefixed key) to `ws`.
result<void> add_resolved_row(const limits& lim, store::write_set& ws, const std::string& key,
                              const json& value);

/// Encodes `ev` as stored into ws.event_row (at ws.time, sealed under the
/// key of ws.version: REQUIRES ws's app, user, id and version set), within
/// max_event_bytes (of its text). Returns the text (the row's body after its
/// timestamp).
result<std::string> encode_event(const limits& lim, const event& ev, store::write_set& ws);

} // namespace agentstate::detail
