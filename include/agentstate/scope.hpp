// SPDX-License-Identifier: Apache-2.0
// agentstate/scope.hpp: state keys, their scopes, and the pure functions that
// split and merge state by scope (docs/semantics.md S1-S4). No I/O, no actors.
#pragma once

#include <string>
#include <string_view>

#include "agentstate/json.hpp"

namespace agentstate {

/// Where a state key lives. Decided by its prefix, case-sensitive, first match
/// wins (S1): "app:" -> app, "user:" -> user, "temp:" and "turn:" -> temp
/// (invocation-scoped, never persisted; N1), else session. "session:", "bg:"
/// and "derived:" keys are session keys (N1); "derived:" keys are written
/// only by the engine (clients get invalid_argument).
enum class scope { session, user, app, temp };

inline constexpr std::string_view app_prefix = "app:";
inline constexpr std::string_view user_prefix = "user:";
inline constexpr std::string_view temp_prefix = "temp:";
inline constexpr std::string_view turn_prefix = "turn:";
inline constexpr std::string_view derived_prefix = "derived:";

/// The scope of `key` (S1). "app:" alone is an app key with an empty name.
scope scope_of(std::string_view key) noexcept;

/// True for "derived:" keys, which clients may read but not write (N1).
bool is_derived(std::string_view key) noexcept;

/// `key` without its app:/user:/temp:/turn: prefix (other keys unchanged).
std::string_view unprefixed(std::string_view key) noexcept;

/// A state delta split by scope. Each member is a JSON object; app and user
/// keys are stored without their prefix, temp keys keep theirs.
struct scoped_delta {
  json session = json::object();
  json user = json::object();
  json app = json::object();
  json temp = json::object();
};

/// Splits `delta` (a JSON object; a non-object yields four empty parts).
scoped_delta partition_delta(const json& delta);

/// `delta` without its temp: keys (A3/A4). A non-object is returned as is.
json strip_temp(const json& delta);

/// The merged view of S2: session keys, then every app key as "app:"+k, then
/// every user key as "user:"+k. Each argument is a JSON object.
json merge_state(const json& session_state, const json& user_state, const json& app_state);

} // namespace agentstate
