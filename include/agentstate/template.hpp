// SPDX-License-Identifier: Apache-2.0
// agentstate/template.hpp: inject_state, the instruction-template renderer of
// docs/semantics.md I2. A pure function over a state snapshot; no I/O of its own.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"

namespace agentstate {

/// Returns an artifact's text, or nullopt when there is no such artifact.
using artifact_lookup = std::function<std::optional<std::string>(std::string_view name)>;

/// Renders `tmpl` against `state` (a merged state object, as get_session
/// returns it):
///   {name}           the value of state key `name`; a missing key is an error
///   {name?}          the same, or "" when missing
///   {artifact.file}  the text of artifact `file` via `artifacts` (also with ?)
/// A name is an identifier ([A-Za-z_][A-Za-z0-9_]*), optionally with one
/// "app:", "user:" or "temp:" prefix; whitespace inside the braces is ignored.
/// Anything else in braces (JSON, {a-b}, {a:b:c}, {}) is left verbatim.
/// Values render as: null -> "", strings raw, anything else compact JSON.
/// Errors: not_found naming the missing key or artifact; invalid_argument
/// when a value cannot be encoded (invalid UTF-8); too_large as soon as the
/// output would pass `max_output_bytes` (the output is never built beyond
/// it; the default is limits::max_response_bytes' default).
/// Cost: O(template + output).
result<std::string> inject_state(std::string_view tmpl, const json& state,
                                 const artifact_lookup& artifacts = {},
                                 std::size_t max_output_bytes = std::size_t{64} << 20);

} // namespace agentstate
