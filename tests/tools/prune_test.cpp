// SPDX-License-Identifier: Apache-2.0
// `agentstate prune DIR --older-than T`, the real binary on a real LMDB
// store: it deletes exactly the sessions last updated before now - T (of one
// app with --app), through the engine (each delete is in the change feed; a
// large session goes through the chunked purge), leaves app and user state,
// counts without deleting under --dry-run, refuses bad durations (exit 2)
// and a store another process owns (exit 1), and leaves the store clean.
#include <set>

#include "model/ids.hpp"
#include "store/verify.hpp"
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

std::set<std::string> sessions_of(engine& e, const std::string& app) {
  std::set<std::string> out;
  for (auto& m : MUST(e.list_sessions(test::list_req(app, {}, 1000))).sessions)
    out.insert(m.user_id + "/" + m.id);
  return out;
}

} // namespace

TEST_CASE("prune: deletes the sessions not updated for the given time, through the engine") {
  test::temp_dir dir;
  auto store = (dir.path() / "store").string();
  const double day = 86400, now = model::now_seconds();
  std::string cursor;
  {
    options o;
    o.dir = store;
    o.mode = durability::nosync;
    auto e = MUST(engine::open(o));
    // A5: a session's last update is its last event's timestamp.
    auto at = [&](const std::string& app, const std::string& user, const std::string& id, double t,
                  std::size_t events = 1) {
      auto ref = test::sref(app, user, id);
      MUST(e->create_session(test::create_req(ref, json{{"app:kept", 1}, {"user:kept", 1}})));
      for (std::size_t i = 0; i < events; ++i)
        test::append_ok(*e, ref, test::make_event(json{{"i", i}}, {}, t));
    };
    at("a", "u1", "old", now - 3 * day);
    at("a", "u2", "old", now - 2 * day);
    at("a", "u1", "fresh", now - 3600);
    at("b", "u1", "old", now - 10 * day);
    at("b", "u1", "big", now - 5 * day, 1500); // past the inline delete bound
    at("b", "u1", "fresh", now);
    at("c", "u9", "old", now - 4 * day);
    cursor = MUST(e->head_cursor());
    MUST(e->close());
  }
  auto prune = [&](const std::string& args) {
    return test::run_tool("prune " + store + " " + args);
  };

  auto dry = prune("--older-than 1d --dry-run --json");
  REQUIRE(dry.first == 0);
  CHECK(json::parse(dry.second)["deleted"] == 5);
  auto only_c = prune("--older-than 1d --app c --json");
  REQUIRE(only_c.first == 0);
  CHECK(json::parse(only_c.second)["deleted"] == 1);
  auto rest = prune("--older-than 1d --json");
  REQUIRE(rest.first == 0);
  CHECK(json::parse(rest.second)["deleted"] == 4);
  CHECK(json::parse(rest.second)["dry_run"] == false);
  CHECK(prune("--older-than 1d --json").second.find("\"deleted\":0") != std::string::npos);

  CHECK(prune("--older-than 0").first == 2);
  CHECK(prune("--older-than 3w").first == 2);
  CHECK(prune("").first == 2);

  options o;
  o.dir = store;
  o.mode = durability::nosync;
  {
    auto e = MUST(engine::open(o));
    CHECK(sessions_of(*e, "a") == std::set<std::string>{"u1/fresh"});
    CHECK(sessions_of(*e, "b") == std::set<std::string>{"u1/fresh"});
    CHECK(sessions_of(*e, "c").empty());
    CHECK(test::app_state(*e, "a") == json{{"kept", 1}});
    CHECK(test::user_state(*e, "c", "u9") == json{{"kept", 1}});
    // Each delete is in the change feed.
    watch_request w;
    w.from = cursor;
    std::set<std::string> removed;
    for (auto& c : MUST(e->read_changes(w, 100)).changes)
      if (c.kind == change_kind::remove)
        removed.insert(c.app_name + "/" + c.user_id + "/" + c.session_id);
    CHECK(removed
          == std::set<std::string>{"a/u1/old", "a/u2/old", "b/u1/old", "b/u1/big", "c/u9/old"});
    // While this engine owns the store, prune is refused.
    CHECK(prune("--older-than 1d").first == 1);
    MUST(e->close());
  }
  // A purge the tool's run left is counted apart, never a fault.
  auto kv = store::open_lmdb_kv_readonly(store);
  auto txn = kv->begin_read();
  auto report = store::verify_store(*txn);
  CHECK(report.ok());
  CHECK(report.sessions == 2);
}
