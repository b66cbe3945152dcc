// SPDX-License-Identifier: Apache-2.0
// model/checks.hpp: the checks of every client-supplied value against the
// documented limits (docs/guide.md "Limits"): names, ids, state keys, nesting,
// events, modifies and derived-key definitions. Pure functions; they never
// throw; each error names the offending field.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/options.hpp"
#include "agentstate/types.hpp"

namespace agentstate::model {

/// A string of at most `max` bytes without NUL, in valid UTF-8. Errors:
/// too_large, invalid_argument.
result<void> check_string(std::string_view value, const char* what, std::size_t max);

/// A name (app, user or session id): non-empty, at most max_name_bytes, no
/// NUL byte, valid UTF-8. `what` names the parameter in the message.
result<void> check_name(std::string_view value, const char* what);

/// Normalises and checks a session reference: the session id loses
/// surrounding whitespace (as a create's does, so every method names the same
/// session for " s " and "s"); app name and user id are taken exactly. Then
/// each part is checked with check_name.
result<void> normalize_ref(session_ref& r);

/// A state key a client may write: not derived:, at most
/// max_state_key_bytes, no NUL, valid UTF-8.
result<void> check_key(const std::string& key);

/// `x` nests at most lim.max_json_depth levels. Errors: too_large.
result<void> check_depth(const limits& lim, const json& x, const std::string& what);
/// check_depth of each member's value of the object `obj` (the limit applies
/// to each value a client supplies, not to the objects that carry them).
result<void> check_member_depths(const limits& lim, const json& obj, const char* what);

/// The strings that identify an event: its id, invocation_id and author.
/// One rule for all three (and for every path that stores an event: the
/// protocol, `import`, `import --from-adk-sqlite`): at most
/// max_event_id_bytes, no NUL byte, valid UTF-8; empty is allowed here (a
/// stored event's id is given by the engine). Errors: invalid_argument
/// (NUL, UTF-8), too_large; the message names the member.
result<void> check_event_ids(const event& ev);

/// An invocation id (or event id) a request names outside an event:
/// end_invocation's invocation_id, get_session's and inject_state's,
/// a rewind's before_invocation_id and event_id. The rule of
/// check_event_ids, so an id no event can carry is refused wherever it
/// enters, not looked up; empty is allowed here (callers that require one
/// say so). `what` names the parameter. Errors: invalid_argument (NUL,
/// UTF-8), too_large.
result<void> check_invocation_id(std::string_view value, const char* what);

/// Shape and size checks of an event that do not need the session: ids,
/// state keys, nesting, members spelled in ADK-JS camelCase.
result<void> validate_event(const limits& lim, const event& ev);

/// A create's initial state: an object of writable keys within the nesting
/// limit (its byte size is checked once encoded).
result<void> check_initial_state(const limits& lim, const json& state);

/// A modify of a stored key (not temp:/turn:/derived:), with a function and
/// values within the nesting limit.
result<void> check_modify(const limits& lim, const state_modify& m);

/// options::derived: names, inputs, functions. Errors: invalid_argument.
result<void> check_derived(const std::vector<derived_key>& defs);

} // namespace agentstate::model
