// actors/validate.hpp: checks of every client-supplied value against the
// documented limits, and the encoding of creates and appends into write
// sets. Pure functions; never throw; errors name the offending field.
#pragma once

#include <string>
#include <string_view>

#include "actors/core.hpp"
#include "agentstate/types.hpp"
#include "store/layout.hpp"

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
result<store::write_set> prepare_create(const engine_core& core,
                                        const create_request& req);

struct prepared_append {
  store::write_set ws;
  event stored;                ///< the event as stored: temp: keys stripped
  json temp = json::object();  ///< the delta's temp: keys, for the live invocation
};

/// Takes `ev` apart into the write set of version `version`. On error `ev`
/// may have lost its temp: keys. REQUIRES: validate_event(ev) passed; ev.id
/// and ev.timestamp set.
result<prepared_append> prepare_append(const engine_core& core, const session_ref& r,
                                       event&& ev, std::uint64_t version);

} // namespace agentstate::detail
