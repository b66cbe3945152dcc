// SPDX-License-Identifier: Apache-2.0
// tools/adk/checks.hpp: the engine's limits applied to the records an ADK
/// import makes (store::import_store trusts its input, so rows beyond the
/// limits are found here and listed as skipped). Each check returns a reason
/// (a sentence) or nothing. Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agentstate/json.hpp"
#include "agentstate/options.hpp"

namespace agentstate::tools::adk {

/// The limits an import checks: the engine's defaults.
inline const limits default_limits{};

/// The most bytes of event_data an import reads: four times the event
/// limit, room for the escapes and spaces ADK's JSON may hold beyond the
/// stored form (Python's json.dumps writes "\ud83d\ude00" for a 4-byte
/// character). A longer cell is refused by its size, unread.
inline const std::size_t max_event_data_bytes = 4 * default_limits.max_event_bytes;
/// The most bytes of a state column an import reads: the largest response
/// (a session's state is served in one). A longer cell is refused by its
/// size, unread.
inline const std::size_t max_state_column_bytes = default_limits.max_response_bytes;

/// Why `v` cannot be stored as `what` (over `max` bytes, a NUL, not UTF-8).
std::optional<std::string> string_problem(std::string_view v, const char* what, std::size_t max);

/// string_problem for an app, user or session name, which must not be empty.
std::optional<std::string> name_problem(std::string_view v, const char* what);

/// string_problem for a state key.
std::optional<std::string> key_problem(const std::string& key);

/// Why `v` nests too deep to store as `what`.
std::optional<std::string> depth_problem(const json& v, const std::string& what);

/// Why `v` cannot be a state value (nesting, UTF-8, size as JSON).
std::optional<std::string> value_problem(const json& v);

/// depth_problem for each member value of the object `obj`.
std::optional<std::string> members_depth_problem(const json& obj, const std::string& what);

/// The checks of validate_event, and the stored size, of the event JSON `e`
/// as import_store will store it.
std::optional<std::string> event_problem(const json& e);

/// Whether `k` is a temp: key (never stored; an import drops it).
bool is_temp_key(const std::string& k);

} // namespace agentstate::tools::adk
