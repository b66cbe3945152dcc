// actors/validate.hpp: checks of every client-supplied value against the
// documented limits, and the encoding of creates and appends into write
// sets. Pure functions; never throw; errors name the offending field.
#pragma once

#include <string>
#include <string_view>

#include "actors/core.hpp"
#include "agentstate/types.hpp"
#include "actors/write_plan.hpp"
#include "store/kv.hpp"

namespace agentstate::detail {

/// A name (app, user or session id): non-empty, at most max_name_bytes, no
/// NUL byte, valid UTF-8. `what` names the parameter in the message.
result<void> check_name(std::string_view value, const char* what);
result<void> check_ref(const session_ref& r);

/// Shape and size checks of an event that do not need the session: ids,
/// state keys, JSON depth.
result<void> validate_event(const limits& lim, const event& ev);

/// The write set of a create, with session rows, shared rows and creation
/// time. temp: keys are dropped (C3).
result<write_plan> prepare_create(const engine_core& core, const create_request& req);

struct prepared_append {
  write_plan plan;
  /// The event as stored: temp: keys stripped. Provisional when plan.late is
  /// set (the writer adds modify and derived values).
  event stored;
  json temp = json::object();  ///< the delta's temp: keys, for the live invocation
  std::vector<std::string> temp_removed; ///< temp: keys the event removes
};

/// Takes `ev` apart into the write set of version `version`; `modify` (and
/// derived keys whose inputs the event changes) make it late-bound. On error
/// `ev` may have lost its temp: keys. REQUIRES: validate_event(ev) passed;
/// ev.id and ev.timestamp set.
result<prepared_append> prepare_append(const engine_core& core, const session_ref& r,
                                       event&& ev, std::uint64_t version,
                                       std::vector<state_modify>&& modify);

/// Checks options::derived (names, inputs, functions). Errors: invalid_argument.
result<void> check_derived(const std::vector<derived_key>& defs);

/// Finishes a late-bound write set inside the writer's transaction: resolves
/// modifies against the committed values (in order), recomputes derived keys
/// whose inputs changed, adds their rows and, for appends, records them in
/// plan.late->ev and encodes it into plan.ws.event_row. Host functions that
/// throw or return values over the limits fail this write set alone
/// (invalid_argument / too_large); a compare_and_set that does not match
/// fails it with condition_failed. Storage failures come back as errors.
/// REQUIRES: plan.late set.
result<void> resolve_late(store::kv_read& txn, const engine_core& core, write_plan& plan);

} // namespace agentstate::detail
