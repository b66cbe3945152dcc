// SPDX-License-Identifier: Apache-2.0
#include "agentstate/scope.hpp"

#include <cstring>

namespace agentstate {

namespace {

bool starts_with(std::string_view s, std::string_view p) noexcept {
  return s.size() >= p.size() && std::memcmp(s.data(), p.data(), p.size()) == 0;
}

} // namespace

scope scope_of(std::string_view key) noexcept {
  // Every prefix is 4 or 5 bytes; the first byte picks the candidates.
  if (key.size() < app_prefix.size())
    return scope::session;
  switch (key[0]) {
    case 'a': return starts_with(key, app_prefix) ? scope::app : scope::session;
    case 'u': return starts_with(key, user_prefix) ? scope::user : scope::session;
    case 't':
      return starts_with(key, temp_prefix) || starts_with(key, turn_prefix) ? scope::temp
                                                                            : scope::session;
    default: return scope::session;
  }
}

bool is_derived(std::string_view key) noexcept {
  return starts_with(key, derived_prefix);
}

std::string_view unprefixed(std::string_view key) noexcept {
  switch (scope_of(key)) {
    case scope::app: return key.substr(app_prefix.size());
    case scope::user: return key.substr(user_prefix.size());
    case scope::temp:
      return key.substr(starts_with(key, temp_prefix) ? temp_prefix.size() : turn_prefix.size());
    case scope::session: break;
  }
  return key;
}

scoped_delta partition_delta(const json& delta) {
  scoped_delta out;
  if (!delta.is_object())
    return out;
  for (auto it = delta.begin(); it != delta.end(); ++it) {
    const std::string& k = it.key();
    switch (scope_of(k)) {
      case scope::app: out.app[std::string(unprefixed(k))] = it.value(); break;
      case scope::user: out.user[std::string(unprefixed(k))] = it.value(); break;
      case scope::temp: out.temp[k] = it.value(); break;
      case scope::session: out.session[k] = it.value(); break;
    }
  }
  return out;
}

json strip_temp(const json& delta) {
  if (!delta.is_object())
    return delta;
  json out = json::object();
  for (auto it = delta.begin(); it != delta.end(); ++it)
    if (scope_of(it.key()) != scope::temp)
      out[it.key()] = it.value();
  return out;
}

json merge_state(const json& session_state, const json& user_state, const json& app_state) {
  json out = session_state.is_object() ? session_state : json::object();
  if (app_state.is_object())
    for (auto it = app_state.begin(); it != app_state.end(); ++it)
      out[std::string(app_prefix) + it.key()] = it.value();
  if (user_state.is_object())
    for (auto it = user_state.begin(); it != user_state.end(); ++it)
      out[std::string(user_prefix) + it.key()] = it.value();
  return out;
}

} // namespace agentstate
