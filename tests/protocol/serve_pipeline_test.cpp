// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_pipeline_test
// `agentstate serve` with one session's requests pipelined (the real binary
// over pipes, LMDB store in a temp dir): responses to one session's requests
// come back in request order, versions are consecutive, appends share
// commits (group commit, also with fsync per commit), and a request that
// fails in the middle of a pipeline gets its own error while the others
// succeed (docs/protocol.md, "Order and concurrency").
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

#include <set>

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

struct fixture {
  temp_dir dir;
  std::string store() const { return (dir.path() / "store").string(); }
  std::string err() const { return (dir.path() / "stderr.txt").string(); }
};

json append_params(const std::string& session, json event) {
  return with(session_params(session), "event", std::move(event));
}

std::string line(const json& x) {
  return x.dump() + "\n";
}

json event_numbered(int i) {
  return json{
    {"author", "a"}, {"id", "e" + std::to_string(i)}, {"actions", {{"state_delta", {{"n", i}}}}}};
}

std::string kind_of(const json& r) {
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  return r["error"]["data"]["kind"].get<std::string>();
}

TEST_CASE("serve: 2,000 appends pipelined to one session, fsync per commit: answered in "
          "order, consecutive versions, group-committed") {
  fixture f;
  server s({"--store", f.store()}, f.err()); // durability sync
  CHECK(s.ok("create_session", session_params("one"))["version"] == 0);
  const int n = 2000;
  std::string batch;
  for (int i = 1; i <= n; ++i) {
    if (i == n / 2) {
      // A notification in the middle: run in order, never answered.
      batch += line(json{{"jsonrpc", "2.0"},
                         {"method", "append_event"},
                         {"params", append_params("one", json{{"author", "quiet"}})}});
    }
    batch += line(rpc(i, "append_event", append_params("one", event_numbered(i))));
  }
  batch += line(rpc("get", "get_session", with(session_params("one"), "num_recent_events", 3)));
  s.send(batch);
  int version = 0;
  for (int i = 1; i <= n; ++i) {
    auto r = s.next(30s);
    INFO("response: ", r.dump());
    REQUIRE(r["id"] == i); // one session: request order
    REQUIRE(r.contains("result"));
    version += i == n / 2 ? 2 : 1; // the notification took one version
    CHECK(r["result"]["version"] == version);
    CHECK(r["result"]["event"]["id"] == "e" + std::to_string(i));
  }
  auto g = s.next(30s);
  REQUIRE(g["id"] == "get"); // the read waited for every append before it
  CHECK(g["result"]["version"] == n + 1);
  CHECK(g["result"]["state"]["n"] == n);
  REQUIRE(g["result"]["events"].size() == 3);
  CHECK(g["result"]["events"][2]["id"] == "e" + std::to_string(n));
  // Pipelined appends reach the writer back to back and share commits. One
  // at a time, every commit would hold one write (max_batch 1, n + 2 commits
  // in all). How many share depends on the disk's flush time against the
  // server's parsing, so only sharing itself is checked.
  auto st = s.ok("stats", json::object());
  INFO("stats: ", st.dump());
  CHECK(st["appends"] == n + 1);
  CHECK(st["max_batch"].get<int>() > 1);
  CHECK(st["commits"].get<int>() < n);
  CHECK(s.wait_exit() == 0);
  CHECK(s.rest().empty()); // nothing written beyond the lines taken
  // Durable: a new server reads back every append.
  server again({"--store", f.store()}, f.err());
  CHECK(again.ok("get_session", with(session_params("one"), "num_recent_events", 0))["version"]
        == n + 1);
  CHECK(again.wait_exit() == 0);
}

TEST_CASE("serve: failing requests in the middle of a pipeline get their own errors, in "
          "order; the others succeed") {
  fixture f;
  server s({"--store", f.store(), "--durability", "nosync"}, f.err());
  const int n = 40;
  // Request i (1..n) and what it should get; every other one succeeds.
  std::map<int, std::string> failing{
    {5, "version_conflict"}, // expected_version of the past: the actor refuses it
    {9, "invalid_argument"}, // params the protocol refuses (author not a string)
    {13, "condition_failed"}, // a modify that fails at commit
    {17, "not_found"}, // another session's append, never created: its own lane
    {21, "version_conflict"},
    {25, "invalid_argument"}, // the protocol refuses the modify list itself
    {29, "condition_failed"},
  };
  std::string batch = line(rpc(0, "create_session", session_params("s")));
  int expected = 0; // the version the next successful append gets
  std::map<int, int> versions;
  for (int i = 1; i <= n; ++i) {
    auto params = append_params("s", event_numbered(i));
    auto it = failing.find(i);
    if (it == failing.end()) {
      versions[i] = ++expected;
    } else if (it->second == "version_conflict") {
      params["expected_version"] = 0; // created at 0, then appended to
    } else if (i == 9) {
      params["event"]["author"] = 7;
    } else if (it->second == "condition_failed") {
      params["modify"] =
        json::array({{{"key", "n"}, {"op", "compare_and_set"}, {"expected", -1}, {"value", 0}}});
    } else if (it->second == "not_found") {
      params = append_params("never", event_numbered(i));
    } else {
      params["modify"] = json::array({{{"key", "n"}, {"op", "no_such_op"}}});
    }
    batch += line(rpc(i, "append_event", params));
    if (i == 20) {
      // A successful modify in the pipeline: it runs alone and sees every
      // append before it.
      batch += line(rpc("inc", "append_event",
                        with(append_params("s", json{{"author", "a"}}), "modify",
                             json::array({{{"key", "count"}, {"op", "increment"}, {"by", 1}}}))));
    }
  }
  batch += line(rpc("get", "get_session", with(session_params("s"), "num_recent_events", 0)));
  s.send(batch);

  // Session "s": request order, errors included; "never" answers on its own.
  std::vector<json> in_order;
  json never;
  for (int k = 0; k < n + 3; ++k) {
    auto r = s.next(20s);
    if (r["id"] == 17)
      never = r;
    else
      in_order.push_back(r);
  }
  REQUIRE(in_order.size() == static_cast<std::size_t>(n + 2));
  CHECK(kind_of(never) == "not_found");
  std::size_t at = 0;
  CHECK(in_order[at++]["id"] == 0);
  int inc_version = 0;
  for (int i = 1; i <= n; ++i) {
    if (i == 17)
      continue;
    auto& r = in_order[at++];
    INFO("request ", i, " response: ", r.dump());
    REQUIRE(r["id"] == i);
    if (auto it = failing.find(i); it != failing.end()) {
      CHECK(kind_of(r) == it->second);
      if (i == 9 || i == 25)
        CHECK(r["error"]["code"] == -32602);
    } else {
      CHECK(r["result"]["version"] == versions[i]);
    }
    if (i == 20) {
      auto& inc = in_order[at++];
      INFO("response: ", inc.dump());
      REQUIRE(inc["id"] == "inc");
      inc_version = versions[20] + 1;
      CHECK(inc["result"]["version"] == inc_version);
      CHECK(inc["result"]["event"]["actions"]["state_delta"]["count"] == 1);
      // The appends after it are numbered after it.
      for (auto& [k, v] : versions)
        if (k > 20)
          ++v;
    }
  }
  auto& g = in_order[at++];
  REQUIRE(g["id"] == "get");
  const int stored = n - static_cast<int>(failing.size()) + 1;
  CHECK(g["result"]["version"] == stored);
  CHECK(g["result"]["state"]["n"] == n); // the last append succeeded
  CHECK(g["result"]["state"]["count"] == 1);
  CHECK(s.wait_exit() == 0);
  CHECK(s.rest().empty()); // nothing written beyond the lines taken
}

TEST_CASE("serve: interleaved sessions, each answered in its own order; reads see the "
          "writes before them") {
  fixture f;
  server s({"--memory"}, f.err());
  const int sessions = 4, appends = 150;
  std::string batch;
  for (int k = 0; k < sessions; ++k)
    batch +=
      line(rpc("c" + std::to_string(k), "create_session", session_params("s" + std::to_string(k))));
  for (int j = 1; j <= appends; ++j) {
    for (int k = 0; k < sessions; ++k)
      batch += line(rpc("s" + std::to_string(k) + "/" + std::to_string(j), "append_event",
                        append_params("s" + std::to_string(k), event_numbered(j))));
    if (j % 50 == 0)
      batch += line(rpc("s0/get" + std::to_string(j), "get_session",
                        with(session_params("s0"), "num_recent_events", 1)));
  }
  s.send(batch);
  std::map<std::string, int> last; // session -> version of its latest answer
  std::set<std::string> reads;
  const int total = sessions * (appends + 1) + appends / 50;
  for (int k = 0; k < total; ++k) {
    auto r = s.next(20s);
    INFO("response: ", r.dump());
    REQUIRE(r.contains("result"));
    auto id = r["id"].get<std::string>();
    if (id[0] == 'c') {
      CHECK(last.count("s" + id.substr(1)) == 0); // its create came first
      last["s" + id.substr(1)] = 0;
      continue;
    }
    auto slash = id.find('/');
    auto session = id.substr(0, slash);
    auto rest = id.substr(slash + 1);
    REQUIRE(last.count(session) == 1);
    if (rest.rfind("get", 0) == 0) {
      int after = std::stoi(rest.substr(3));
      CHECK(last[session] == after); // answered right after the append before it
      CHECK(r["result"]["version"] == after);
      CHECK(r["result"]["events"][0]["id"] == "e" + std::to_string(after));
      reads.insert(id);
      continue;
    }
    int j = std::stoi(rest);
    CHECK(j == last[session] + 1);
    CHECK(r["result"]["version"] == j);
    last[session] = j;
  }
  CHECK(reads.size() == appends / 50);
  for (auto& [session, v] : last)
    CHECK(v == appends);
  CHECK(s.wait_exit() == 0);
  CHECK(s.rest().empty()); // nothing written beyond the lines taken
}

TEST_CASE("serve: sessions whose requests come and go, more of them than the dispatcher keeps "
          "entries for, each answered in its own order") {
  // Between rounds every session goes idle, so the dispatcher drops its
  // entry (keeping up to 64 for reuse) and gives later sessions entries
  // that other sessions had: a reused entry must order only its new session.
  // A refused request (no event) is answered at once, so its answer shows
  // whether it waited for the append before it in its session's order.
  fixture f;
  server s({"--memory"}, f.err());
  const int sessions = 200, rounds = 4;
  std::string batch;
  for (int k = 0; k < sessions; ++k)
    batch +=
      line(rpc("c" + std::to_string(k), "create_session", session_params("s" + std::to_string(k))));
  s.send(batch);
  for (int k = 0; k < sessions; ++k)
    REQUIRE(s.next(20s).contains("result"));
  std::map<std::string, int> answered; // session -> its answers so far
  for (int round = 0; round < rounds; ++round) {
    batch.clear();
    for (int i = 0; i < sessions; ++i) {
      auto session = "s" + std::to_string((i * 7 + round * 13) % sessions); // a new order
      auto id = [&](int step) { return session + "/" + std::to_string(3 * round + step); };
      batch +=
        line(rpc(id(0), "append_event", append_params(session, event_numbered(2 * round + 1))));
      batch += line(rpc(id(1), "append_event", session_params(session))); // refused
      batch +=
        line(rpc(id(2), "append_event", append_params(session, event_numbered(2 * round + 2))));
    }
    s.send(batch);
    for (int n = 0; n < 3 * sessions; ++n) {
      auto r = s.next(20s);
      INFO("response: ", r.dump());
      auto id = r["id"].get<std::string>();
      auto slash = id.find('/');
      auto session = id.substr(0, slash);
      int step = std::stoi(id.substr(slash + 1));
      CHECK(step == answered[session]); // the session's answers in request order
      answered[session] = step + 1;
      if (step % 3 == 1) {
        CHECK(kind_of(r) == "invalid_argument");
      } else {
        REQUIRE(r.contains("result"));
        CHECK(r["result"]["version"] == 2 * round + (step % 3 == 0 ? 1 : 2));
      }
    }
  }
  CHECK(answered.size() == std::size_t(sessions));
  for (auto& [session, n] : answered)
    CHECK(n == 3 * rounds);
  CHECK(s.wait_exit() == 0);
  CHECK(s.rest().empty()); // nothing written beyond the lines taken
}

} // namespace
