// SPDX-License-Identifier: Apache-2.0
// watch with `from` "start" through `agentstate serve` over pipes (the real
// binary): the answer's cursor is just before the oldest change the log
// keeps (read_changes from it equals read_changes from "start"); the watch
// replays the log's changes of its scope, each once, in commit order, then
// delivers the changes committed after it, live.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;

struct start_fixture {
  temp_dir dir;
  std::string store() const { return (dir.path() / "store").string(); }
  std::string err() const { return (dir.path() / "stderr.txt").string(); }
};

json watched_session(const std::string& session) {
  return json{{"app_name", "app"}, {"user_id", "u"}, {"session_id", session}};
}

json append_params(const std::string& session, json delta) {
  auto p = watched_session(session);
  p["event"] =
    json{{"author", "agent"}, {"invocation_id", "i"}, {"actions", {{"state_delta", delta}}}};
  return p;
}

// Requests and the notifications between them: a response is matched by
// its id; `changes` notifications are kept by watch id until taken.
struct feed_client {
  explicit feed_client(server& srv) : s(srv) {}

  server& s;
  int next_id = 0;
  std::map<std::string, json> pending; ///< watch id -> changes not yet taken

  void keep(const json& line) {
    REQUIRE(line["method"] == "changes");
    auto& got = pending[line["params"]["watch_id"].get<std::string>()];
    if (got.is_null())
      got = json::array();
    for (auto& c : line["params"]["changes"])
      got.push_back(c);
  }

  json ok(const std::string& method, json params) {
    const std::string id = "r" + std::to_string(next_id++);
    s.send_line(json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
    for (;;) {
      auto line = s.next();
      if (!line.contains("id")) {
        keep(line);
        continue;
      }
      INFO("response: ", line.dump());
      REQUIRE(line["id"] == id);
      REQUIRE(line.contains("result"));
      return line["result"];
    }
  }

  // The first `n` changes of watch `id` (waiting for notifications).
  json take(const std::string& id, std::size_t n) {
    auto& got = pending[id];
    if (got.is_null())
      got = json::array();
    while (got.size() < n) {
      auto line = s.next();
      REQUIRE(!line.contains("id")); // no request is pending
      keep(line);
    }
    json out = json::array();
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(got[i]);
    got.erase(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n));
    return out;
  }

  // Every change of `filter` from `from` to the head, by read_changes pages.
  json read_all(json filter, const json& from) {
    json out = json::array();
    filter["from"] = from;
    filter["limit"] = 7;
    for (int guard = 0; guard < 1000; ++guard) {
      auto page = ok("read_changes", filter);
      for (auto& c : page["changes"])
        out.push_back(c);
      filter["from"] = page["cursor"];
      if (page["at_head"] == true)
        return out;
    }
    FAIL("read_changes never reached the head");
    return out;
  }
};

} // namespace

TEST_CASE("serve: watch from \"start\" replays the changes the log keeps, then goes on live") {
  start_fixture f;
  server s({"--store", f.store(), "--change-retention", "10"}, f.err());
  feed_client c(s);
  c.ok("create_session", watched_session("s1"));
  c.ok("create_session", watched_session("s2"));
  for (int i = 0; i < 30; ++i)
    c.ok("append_event", append_params(i % 3 ? "s1" : "s2", json{{"k", i}}));

  const json all{{"scope", "all"}};
  json one = watched_session("s1");
  one["scope"] = "session";
  const auto kept = c.read_all(all, "start");
  const auto kept_s1 = c.read_all(one, "start");
  REQUIRE(!kept.empty());
  REQUIRE(!kept_s1.empty());
  // The retention dropped the first changes: "start" is the oldest kept.
  CHECK(kept.size() < 32);
  CHECK(kept.front()["kind"] == "append");

  json from_start = one;
  from_start["from"] = "start";
  auto w = c.ok("watch", from_start);
  REQUIRE(w["watch_id"].is_string());
  const auto id = w["watch_id"].get<std::string>();
  CHECK(c.read_all(all, w["cursor"]) == kept);
  CHECK(c.take(id, kept_s1.size()) == kept_s1);

  // Live: the next changes of s1, not s2's.
  c.ok("append_event", append_params("s2", json{{"live", 0}}));
  auto mine = c.ok("append_event", append_params("s1", json{{"live", 1}}));
  auto live = c.take(id, 1);
  CHECK(live[0]["session_id"] == "s1");
  CHECK(live[0]["state_delta"] == json{{"live", 1}});
  CHECK(live[0]["cursor"] == mine["cursor"]);

  // The watch of everything from "start": the whole log kept, in order.
  json every = all;
  every["from"] = "start";
  auto w2 = c.ok("watch", every);
  const auto now = c.read_all(all, "start");
  CHECK(c.take(w2["watch_id"].get<std::string>(), now.size()) == now);
  CHECK(c.pending[id].empty()); // s1's watch took nothing more
  CHECK(s.wait_exit() == 0);
}
