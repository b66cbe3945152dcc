// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_history_test
// A session's past through a real `agentstate serve` on an LMDB store
// (docs/protocol.md): get_session's as_of_version and apply_rewinds,
// rewind_session, rewind_plan, list_invocations and fork_session, their
// parameter errors, a rewind request followed by pipelined appends on the
// same stream (the stream's order holds), and all of it again after the
// server restarts on the same store.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;

namespace {

json event_with(const std::string& id, const std::string& inv, json delta) {
  return json{{"id", id},
              {"invocation_id", inv},
              {"author", "agent"},
              {"actions", {{"state_delta", std::move(delta)}}}};
}

std::string kind_of(const json& r) {
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  return r["error"]["data"]["kind"].get<std::string>();
}

std::vector<std::string> ids_of(const json& session) {
  std::vector<std::string> out;
  for (auto& ev : session["events"])
    out.push_back(ev["id"].get<std::string>());
  return out;
}

} // namespace

TEST_CASE("serve: as_of_version, rewinds, invocations and forks, across a restart") {
  temp_dir dir;
  auto store = (dir.path() / "store").string();
  auto err = (dir.path() / "stderr.txt").string();
  {
    server s({"--store", store, "--durability", "nosync"}, err);
    s.ok("create_session",
         with(session_params("s"), "state", json{{"lang", "fr"}, {"user:name", "Ana"}}));
    s.ok("append_event", with(session_params("s"), "event", event_with("e1", "i1", {{"n", 1}})));
    s.ok("append_event",
         with(session_params("s"), "event", event_with("e2", "i2", {{"n", 2}, {"x", true}})));
    s.ok("append_event",
         with(session_params("s"), "event",
              event_with("e3", "i3", {{"n", 3}, {"lang", "de"}, {"user:name", "Bo"}})));

    auto past = s.ok("get_session", with(session_params("s"), "as_of_version", 1));
    CHECK(past["version"] == 1);
    CHECK(ids_of(past) == std::vector<std::string>{"e1"});
    CHECK(past["state"] == json{{"lang", "fr"}, {"n", 1}, {"user:name", "Bo"}});
    CHECK(past["as_of"] == json{{"version", 1}, {"shared_state", "current"}, {"exact", true}});
    CHECK(kind_of(s.call("get_session", with(session_params("s"), "as_of_version", 4)))
          == "invalid_argument");
    CHECK(kind_of(s.call("get_session", with(session_params("s"), "as_of_version", -1)))
          == "invalid_argument");

    auto plan = s.ok("rewind_plan", with(session_params("s"), "before_invocation_id", "i2"));
    CHECK(plan["state_delta"] == json{{"n", 1}, {"lang", "fr"}});
    CHECK(plan["state_remove"] == json::array({"x"}));
    CHECK(plan["before_version"] == 2);
    CHECK(plan["exact"] == true);

    // A rewind, then appends pipelined behind it on the same stream: they
    // land after it, in the stream's order.
    s.send_line(
      rpc(1, "rewind_session",
          with(with(session_params("s"), "before_invocation_id", "i2"), "event_id", "rw")));
    s.send_line(rpc(2, "append_event",
                    with(session_params("s"), "event", event_with("e5", "i5", {{"n", 10}}))));
    std::map<int, json> got;
    for (int i = 0; i < 2; ++i) {
      auto r = s.next();
      got[r["id"].get<int>()] = r;
    }
    REQUIRE(got[1].contains("result"));
    auto rewind = got[1]["result"];
    CHECK(rewind["version"] == 4);
    CHECK(rewind["event"]["author"] == "user");
    CHECK(rewind["event"]["actions"]["rewind_before_invocation_id"] == "i2");
    CHECK(rewind["event"]["actions"]["state_remove"] == json::array({"x"}));
    CHECK(got[2]["result"]["version"] == 5);
    CHECK(s.ok("get_session", session_params("s"))["state"]
          == json{{"lang", "fr"}, {"n", 10}, {"user:name", "Bo"}});

    auto kept = s.ok("get_session", with(session_params("s"), "apply_rewinds", true));
    CHECK(ids_of(kept) == std::vector<std::string>{"e1", "e5"});

    auto invs = s.ok("list_invocations", session_params("s"));
    REQUIRE(invs.size() == 5);
    CHECK(invs[1]
          == json{{"invocation_id", "i2"},
                  {"first_version", 2},
                  {"last_version", 2},
                  {"events", 1},
                  {"annulled", true},
                  {"rewind", false}});
    CHECK(invs[3]["rewind"] == true);
    CHECK(invs[3]["annulled"] == false);

    auto fork =
      s.ok("fork_session", with(with(session_params("s"), "at_version", 3), "new_session_id", "f"));
    CHECK(fork["id"] == "f");
    CHECK(fork["version"] == 3);
    CHECK(fork["state"] == json{{"lang", "de"}, {"n", 3}, {"x", true}, {"user:name", "Bo"}});
    CHECK(!fork["cursor"].get<std::string>().empty());

    // Parameter errors: neither or both points, a zero version, no at_version.
    CHECK(kind_of(s.call("rewind_session", session_params("s"))) == "invalid_argument");
    CHECK(kind_of(s.call(
            "rewind_session",
            with(with(session_params("s"), "before_invocation_id", "i1"), "before_version", 1)))
          == "invalid_argument");
    CHECK(kind_of(s.call("rewind_session", with(session_params("s"), "before_version", 0)))
          == "invalid_argument");
    CHECK(kind_of(s.call("rewind_session", with(session_params("s"), "before_version", 99)))
          == "invalid_argument");
    CHECK(kind_of(s.call("rewind_session", with(session_params("nope"), "before_version", 1)))
          == "not_found");
    CHECK(kind_of(s.call("fork_session", session_params("s"))) == "invalid_argument");
    CHECK(kind_of(s.call("fork_session",
                         with(with(session_params("s"), "at_version", 1), "new_session_id", "f")))
          == "already_exists");
    CHECK(kind_of(s.call("list_invocations", session_params("nope"))) == "not_found");
    CHECK(s.wait_exit() == 0);
  }
  // After a restart: the past is read from the store.
  server s({"--store", store, "--durability", "nosync"}, err);
  auto past = s.ok("get_session", with(session_params("f"), "as_of_version", 0));
  CHECK(past["state"] == json{{"lang", "fr"}, {"user:name", "Bo"}});
  CHECK(past["as_of"]["exact"] == true);
  auto again =
    s.ok("rewind_session",
         with(with(session_params("s"), "before_invocation_id", "i2"), "event_id", "rw"));
  CHECK(again["version"] == 4); // the stored rewind (A6), not a new one
  CHECK(s.ok("get_session", session_params("s"))["version"] == 5);
  CHECK(s.wait_exit() == 0);
}
