// SPDX-License-Identifier: Apache-2.0
// tests/support/change_feed.hpp: builders and views of the change feed for
// the feed's tests (watch requests, a change as one comparable line, a
// cursor's sequence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agentstate/engine.hpp"

namespace agentstate::test {

inline watch_request scope_req(watch_scope s, std::string app = {}, std::string user = {},
                               std::string id = {}, bool sessions = false,
                               std::string prefix = {}) {
  watch_request r;
  r.scope = s;
  r.app_name = std::move(app);
  r.user_id = std::move(user);
  r.session_id = std::move(id);
  r.include_sessions = sessions;
  r.key_prefix = std::move(prefix);
  return r;
}

/// A change as one line: kind, identity, version, keys set and removed, the
/// event's id; with its cursor when `with_cursor`.
inline std::string describe_change(const change& c, bool with_cursor = false) {
  std::string s = (with_cursor ? c.cursor + " " : std::string()) + to_string(c.kind) + " "
    + c.app_name + "/" + c.user_id + "/" + c.session_id + " v" + std::to_string(c.version) + " "
    + c.state_delta.dump() + " -" + json(c.state_remove).dump();
  if (c.ev)
    s += " ev=" + c.ev->id;
  return s;
}

/// A cursor's sequence number (the digits after its last '-').
inline std::uint64_t seq_of(const std::string& cursor) {
  return std::stoull(cursor.substr(cursor.rfind('-') + 1));
}

} // namespace agentstate::test
