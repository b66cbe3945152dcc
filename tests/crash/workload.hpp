// SPDX-License-Identifier: Apache-2.0
// tests/crash/workload.hpp: the deterministic workload shared by the kill -9
// child (crash_child.cpp) and its parent (crash_loop.cpp): which sessions,
// which event ids, which state each event writes in every scope, and how the
// child's watcher records a change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agentstate/types.hpp"
#include "agentstate/watch.hpp"

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

/// A change as the child's watcher records it, one line without its '\n':
///   CURSOR KIND APP USER SID VERSION EVENT_ID
/// (EVENT_ID "-" when the change carries no event). The parent describes the
/// log's changes the same way, so a record and its change compare as text.
inline std::string change_record(const agentstate::change& c) {
  return c.cursor + " " + agentstate::to_string(c.kind) + " " + c.app_name + " " + c.user_id + " "
    + c.session_id + " " + std::to_string(c.version) + " " + (c.ev ? c.ev->id : std::string("-"));
}

/// The cursor of a record (its first field).
inline std::string record_cursor(const std::string& record) {
  return record.substr(0, record.find(' '));
}

} // namespace crashload
