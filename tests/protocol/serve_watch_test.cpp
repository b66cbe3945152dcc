// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_watch_test
// The change feed through `agentstate serve` over pipes (the real binary):
// read_changes pages and resumes; watch sends `changes` notifications
// between responses, in commit order, each change once; unwatch ends it with
// watch_ended (cancelled) and a resume_from that a new watch continues from;
// appends answer their cursor; expired and foreign cursors are typed errors;
// create_session and get_session carry the cursor of what they show, and
// get_user_state / get_app_state answer {state, cursor} with `with_cursor`,
// so a watch from a read's cursor delivers exactly the changes after it.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

struct fixture {
  temp_dir dir;
  std::string store() const { return (dir.path() / "store").string(); }
  std::string err() const { return (dir.path() / "stderr.txt").string(); }
};

json ref_params(const std::string& session) {
  return json{{"app_name", "app"}, {"user_id", "u"}, {"session_id", session}};
}

json append_req(const std::string& id, const std::string& session, json delta) {
  auto p = ref_params(session);
  p["event"] =
    json{{"author", "agent"}, {"invocation_id", "i"}, {"actions", {{"state_delta", delta}}}};
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", "append_event"}, {"params", p}};
}

std::uint64_t seq_of(const std::string& cursor) {
  return std::stoull(cursor.substr(cursor.rfind('-') + 1));
}

} // namespace

TEST_CASE("serve: watch notifications arrive between responses, in commit order, once each; "
          "unwatch ends the watch with a cursor a new watch resumes from") {
  fixture f;
  server s({"--store", f.store()}, f.err());
  s.ok("create_session", ref_params("s1"));
  s.ok("create_session", ref_params("s2"));
  auto w =
    s.ok("watch",
         json{{"scope", "session"}, {"app_name", "app"}, {"user_id", "u"}, {"session_id", "s1"}});
  REQUIRE(w["watch_id"].is_string());
  REQUIRE(w["cursor"].is_string());
  const auto watch_id = w["watch_id"].get<std::string>();

  // 40 appends, alternating sessions, pipelined; the watch takes s1's.
  const int n = 40;
  for (int i = 0; i < n; ++i)
    s.send_line(
      append_req("a" + std::to_string(i), i % 2 ? "s2" : "s1", json{{"n", i}, {"temp:t", i}}));
  std::map<std::string, json> responses;
  std::vector<json> changes;
  std::string last_cursor = w["cursor"];
  while (responses.size() < std::size_t(n) || changes.size() < std::size_t(n / 2)) {
    auto line = s.next();
    if (line.contains("id")) {
      responses[line["id"].get<std::string>()] = line;
      continue;
    }
    REQUIRE(line["method"] == "changes");
    CHECK(!line.contains("id"));
    CHECK(line["params"]["watch_id"] == watch_id);
    for (auto& c : line["params"]["changes"]) {
      CHECK(seq_of(c["cursor"]) > seq_of(last_cursor));
      last_cursor = c["cursor"].get<std::string>();
      changes.push_back(c);
    }
    CHECK(seq_of(line["params"]["cursor"]) >= seq_of(last_cursor));
  }
  REQUIRE(changes.size() == std::size_t(n / 2));
  for (int k = 0; k < n / 2; ++k) {
    auto& c = changes[k];
    CHECK(c["kind"] == "append");
    CHECK(c["session_id"] == "s1");
    CHECK(c["version"] == k + 1);
    CHECK(c["state_delta"] == json{{"n", 2 * k}});
    CHECK(c["event"]["actions"]["state_delta"] == json{{"n", 2 * k}});
    // The append's own answer names the same cursor.
    auto& r = responses["a" + std::to_string(2 * k)];
    REQUIRE(r.contains("result"));
    CHECK(r["result"]["cursor"] == c["cursor"]);
  }
  // Nothing more for the watch: one more append to s1 is the barrier. The
  // watch sends in commit order, so a change it should not send (one of
  // s2's, a repeat) would come before this one's.
  auto only_marker_next = [&](const std::string& marker) {
    s.send_line(append_req(marker, "s1", json{{"marker", marker}}));
    std::vector<json> seen;
    bool answered = false;
    while (!answered || seen.empty() || seen.back()["state_delta"] != json{{"marker", marker}}) {
      auto line = s.next();
      if (line.contains("id")) {
        REQUIRE(line["id"] == marker);
        REQUIRE(line.contains("result"));
        answered = true;
        continue;
      }
      REQUIRE(line["method"] == "changes");
      for (auto& c : line["params"]["changes"]) {
        last_cursor = c["cursor"].get<std::string>();
        seen.push_back(c);
      }
    }
    INFO("changes up to the marker: ", json(seen).dump());
    CHECK(seen.size() == 1);
  };
  only_marker_next("m1");

  // unwatch: watch_ended (cancelled) first, then the answer.
  s.send_line(json{
    {"jsonrpc", "2.0"}, {"id", "u1"}, {"method", "unwatch"}, {"params", {{"watch_id", watch_id}}}});
  auto ended = s.next();
  REQUIRE(ended["method"] == "watch_ended");
  CHECK(ended["params"]["watch_id"] == watch_id);
  CHECK(ended["params"]["reason"] == "cancelled");
  auto unwatched = s.next();
  REQUIRE(unwatched["id"] == "u1");
  auto resume = unwatched["result"]["resume_from"].get<std::string>();
  CHECK(resume == ended["params"]["resume_from"]);
  CHECK(seq_of(resume) >= seq_of(last_cursor));

  // Appends while no watch runs, then a watch from the resume point: it
  // delivers exactly those, nothing before.
  for (int i = 0; i < 3; ++i)
    s.ok("append_event", append_req("x", "s1", json{{"later", i}})["params"]);
  auto w2 = s.ok("watch",
                 json{{"scope", "session"},
                      {"app_name", "app"},
                      {"user_id", "u"},
                      {"session_id", "s1"},
                      {"from", resume}});
  std::vector<json> later;
  while (later.size() < 3) {
    auto line = s.next();
    REQUIRE(line["method"] == "changes");
    for (auto& c : line["params"]["changes"])
      later.push_back(c["state_delta"]);
  }
  CHECK(later == std::vector<json>{json{{"later", 0}}, json{{"later", 1}}, json{{"later", 2}}});
  only_marker_next("m2");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: read_changes pages follow cursors; bad filters, foreign and expired cursors, "
          "and unknown watches are typed errors") {
  fixture f;
  server s({"--store", f.store()}, f.err());
  s.ok("create_session", ref_params("s1"));
  for (int i = 0; i < 25; ++i)
    s.ok("append_event", append_req("x", "s1", json{{"user:n", i}, {"k", i}})["params"]);
  // The user's keys alone, 10 at a time, from the oldest.
  std::vector<json> got;
  json from = nullptr;
  for (int guard = 0; guard < 10; ++guard) {
    json p{{"scope", "user"}, {"app_name", "app"}, {"user_id", "u"}, {"limit", 10}};
    if (!from.is_null())
      p["from"] = from;
    auto page = s.ok("read_changes", p);
    for (auto& c : page["changes"]) {
      CHECK(c["state_delta"].size() == 1);
      CHECK(!c.contains("event"));
      got.push_back(c["state_delta"]["user:n"]);
    }
    from = page["cursor"];
    if (page["at_head"] == true && page["changes"].empty())
      break;
  }
  REQUIRE(got.size() == 25);
  for (int i = 0; i < 25; ++i)
    CHECK(got[i] == i);

  auto kind_of = [](const json& r) { return r["error"]["data"]["kind"].get<std::string>(); };
  auto bad_scope = s.call("read_changes", json{{"scope", "everything"}});
  CHECK(bad_scope["error"]["code"] == -32602);
  auto all_with_app = s.call("watch", json{{"scope", "all"}, {"app_name", "app"}});
  CHECK(all_with_app["error"]["code"] == -32602);
  auto missing = s.call("read_changes", json{{"scope", "session"}, {"app_name", "app"}});
  CHECK(kind_of(missing) == "invalid_argument");
  auto foreign = s.call("read_changes", json{{"scope", "all"}, {"from", "0123456789abcdef-1"}});
  CHECK(kind_of(foreign) == "invalid_argument");
  auto unknown = s.call("unwatch", json{{"watch_id", "w999"}});
  CHECK(kind_of(unknown) == "not_found");
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: a cursor older than --change-retention answers cursor_expired with "
          "data.oldest, which resumes") {
  fixture f;
  server s({"--store", f.store(), "--change-retention", "10"}, f.err());
  auto start = s.ok("read_changes", json{{"scope", "all"}})["cursor"];
  s.ok("create_session", ref_params("s1"));
  for (int i = 0; i < 60; ++i)
    s.ok("append_event", append_req("x", "s1", json{{"k", i}})["params"]);
  auto r = s.call("read_changes", json{{"scope", "all"}, {"from", start}});
  REQUIRE(r.contains("error"));
  CHECK(r["error"]["data"]["kind"] == "cursor_expired");
  REQUIRE(r["error"]["data"]["oldest"].is_string());
  auto w = s.call("watch", json{{"scope", "all"}, {"from", start}});
  CHECK(w["error"]["data"]["kind"] == "cursor_expired");
  auto page = s.ok("read_changes", json{{"scope", "all"}, {"from", r["error"]["data"]["oldest"]}});
  REQUIRE(!page["changes"].empty());
  CHECK(page["changes"].back()["state_delta"] == json{{"k", 59}});
  CHECK(page["changes"].size() <= 10 + 20);
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: create_session, get_session and the scope reads answer the cursor of what "
          "they show") {
  fixture f;
  server s({"--store", f.store()}, f.err());
  auto created = s.ok("create_session", ref_params("s1"));
  REQUIRE(created["cursor"].is_string());
  auto a1 =
    s.ok("append_event", append_req("a1", "s1", json{{"user:lang", "fr"}, {"n", 1}})["params"]);
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
                   {"params", append_req("a2", "s1", json{{"n", 2}})["params"]}});
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
