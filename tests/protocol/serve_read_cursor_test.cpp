// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_read_cursor_test
// Reads answer their change-feed cursor through `agentstate serve` (the real
// binary, over pipes): create_session and get_session carry `cursor`;
// get_user_state / get_app_state answer {state, cursor} with
// `with_cursor: true` and the bare state without it; a watch from a read's
// cursor delivers exactly the changes after the read; a with_cursor that is
// not a boolean is invalid_argument.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;

struct fixture {
  temp_dir dir;
  std::string store() const { return (dir.path() / "store").string(); }
  std::string err() const { return (dir.path() / "stderr.txt").string(); }
};

json ref_params(const std::string& session) {
  return json{{"app_name", "app"}, {"user_id", "u"}, {"session_id", session}};
}

json append_params(const std::string& session, json delta) {
  auto p = ref_params(session);
  p["event"] =
    json{{"author", "agent"}, {"invocation_id", "i"}, {"actions", {{"state_delta", delta}}}};
  return p;
}

std::uint64_t seq_of(const std::string& cursor) {
  return std::stoull(cursor.substr(cursor.rfind('-') + 1));
}

} // namespace

TEST_CASE("serve: create_session, get_session and the scope reads answer the cursor of what "
          "they show") {
  fixture f;
  server s({"--store", f.store()}, f.err());
  auto created = s.ok("create_session", ref_params("s1"));
  REQUIRE(created["cursor"].is_string());
  auto a1 = s.ok("append_event", append_params("s1", json{{"user:lang", "fr"}, {"n", 1}}));
  CHECK(seq_of(a1["cursor"]) > seq_of(created["cursor"]));

  auto got = s.ok("get_session", ref_params("s1"));
  REQUIRE(got["cursor"].is_string());
  CHECK(got["cursor"] == a1["cursor"]); // nothing committed since the append
  CHECK(got["version"] == 1);

  auto bare = s.ok("get_user_state", json{{"app_name", "app"}, {"user_id", "u"}});
  CHECK(bare == json{{"lang", "fr"}});
  auto user =
    s.ok("get_user_state", json{{"app_name", "app"}, {"user_id", "u"}, {"with_cursor", true}});
  CHECK(user["state"] == json{{"lang", "fr"}});
  CHECK(user["cursor"] == a1["cursor"]);
  auto app = s.ok("get_app_state", json{{"app_name", "app"}, {"with_cursor", true}});
  CHECK(app["state"] == json::object());
  REQUIRE(app["cursor"].is_string());
  CHECK(s.ok("get_app_state", json{{"app_name", "app"}, {"with_cursor", false}}) == json::object());

  // Read, then watch from the read's cursor: the first change delivered is
  // the next append, and nothing before it.
  auto w = s.ok("watch",
                json{{"scope", "session"},
                     {"app_name", "app"},
                     {"user_id", "u"},
                     {"session_id", "s1"},
                     {"from", got["cursor"]}});
  s.send_line(json{{"jsonrpc", "2.0"},
                   {"id", "a2"},
                   {"method", "append_event"},
                   {"params", append_params("s1", json{{"n", 2}})}});
  json a2, first;
  for (int i = 0; i < 50 && (a2.is_null() || first.is_null()); ++i) {
    auto line = s.next();
    if (line.value("id", "") == "a2") {
      REQUIRE(line.contains("result"));
      a2 = line["result"];
      continue;
    }
    REQUIRE(line.value("method", "") == "changes");
    for (auto& c : line["params"]["changes"])
      if (first.is_null())
        first = c;
  }
  REQUIRE(!a2.is_null());
  REQUIRE(!first.is_null());
  CHECK(first["cursor"] == a2["cursor"]);
  CHECK(first["version"] == 2);
  // unwatch: notifications (watch_ended, perhaps progress) come first.
  s.send_line(json{{"jsonrpc", "2.0"},
                   {"id", "u1"},
                   {"method", "unwatch"},
                   {"params", {{"watch_id", w["watch_id"]}}}});
  for (int i = 0; i < 50; ++i) {
    auto line = s.next();
    if (line.value("id", "") == "u1")
      break;
    REQUIRE(!line.contains("id"));
  }
  auto bad =
    s.call("get_user_state", json{{"app_name", "app"}, {"user_id", "u"}, {"with_cursor", "yes"}});
  REQUIRE(bad.contains("error"));
  CHECK(bad["error"]["data"]["kind"] == "invalid_argument");
}
