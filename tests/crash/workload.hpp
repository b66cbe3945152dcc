// SPDX-License-Identifier: Apache-2.0
// tests/crash/workload.hpp: the deterministic workload shared by the kill -9
// child (crash_child.cpp) and its parent (crash_loop.cpp): which sessions,
// which event ids, which state each event writes in every scope.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agentstate/types.hpp"

namespace crashload {

using agentstate::json;

/// 2 apps x 2 users x 2 sessions.
inline std::vector<agentstate::session_ref> all_sessions() {
  std::vector<agentstate::session_ref> out;
  for (auto app : {"appA", "appB"})
    for (auto user : {"u0", "u1"})
      for (auto sid : {"s0", "s1"})
        out.push_back(agentstate::session_ref{app, user, sid});
  return out;
}

inline std::string event_id(const agentstate::session_ref& r, std::uint64_t n) {
  return r.session_id + "#" + std::to_string(n);
}

/// The user-scope key (without "user:") the n-th event of `r` sets to n.
inline std::string user_key(const agentstate::session_ref& r) {
  return r.session_id + ".n";
}
/// The app-scope key (without "app:") the n-th event of `r` sets to n.
inline std::string app_key(const agentstate::session_ref& r) {
  return r.user_id + "." + r.session_id + ".n";
}

/// The n-th event of session `r` (stored at version n). Its delta writes n to
/// the session ("n"), the user scope and the app scope, plus a temp: key
/// that must never be stored, and a growing-size payload.
inline agentstate::event make_event(const agentstate::session_ref& r, std::uint64_t n) {
  agentstate::event e;
  e.id = event_id(r, n);
  e.invocation_id = "inv-" + std::to_string(n / 10);
  e.author = "crash_child";
  e.timestamp = 1700000000.0 + static_cast<double>(n);
  e.content = json{{"n", n}, {"pad", std::string(16 + (n % 7) * 64, 'p')}};
  e.actions.state_delta =
    json{{"n", n}, {"temp:t", n}, {"user:" + user_key(r), n}, {"app:" + app_key(r), n}};
  return e;
}

} // namespace crashload
