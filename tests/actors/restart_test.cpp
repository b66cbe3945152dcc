// SPDX-License-Identifier: Apache-2.0
// test-name: restart_test
// test-tiers: tsan write_map
// tests/actors/restart_test.cpp: what survives close() and reopen of an LMDB store,
// idempotent retries across a restart (A6), and one owner per store
// directory (README guarantee 9). LMDB only, in sync and nosync modes.
#include "support/test_support.hpp"

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <vector>

using namespace agentstate;
using namespace agentstate::test;

namespace {

struct sync_mode {
  static constexpr durability mode = durability::sync;
};
struct nosync_mode {
  static constexpr durability mode = durability::nosync;
};

options lmdb_options(const std::string& dir, durability mode) {
  options o;
  o.dir = dir;
  o.mode = mode;
  return o;
}

std::unique_ptr<engine> open_at(const options& o) {
  auto r = engine::open(o);
  INFO("engine::open(", o.dir, ") -> ", describe(r));
  REQUIRE(r.ok());
  REQUIRE(r.value() != nullptr);
  return std::move(r).value();
}

/// Everything a client can read about a set of sessions and their scopes.
struct snapshot {
  std::map<std::string, json> sessions; // "app/user/id" -> to_json(session)
  std::map<std::string, json> app_states;
  std::map<std::string, json> user_states;
  std::map<std::string, std::vector<std::string>> list_order; // per app
};

std::string key_of(const session_ref& r) {
  return r.app_name + "/" + r.user_id + "/" + r.session_id;
}

snapshot take_snapshot(engine& e, const std::vector<session_ref>& refs,
                       const std::vector<std::string>& apps,
                       const std::vector<std::string>& users) {
  snapshot s;
  for (const auto& r : refs)
    s.sessions[key_of(r)] = to_json(get_existing(e, r));
  for (const auto& a : apps) {
    s.app_states[a] = app_state(e, a);
    for (const auto& u : users)
      s.user_states[a + "/" + u] = user_state(e, a, u);
    std::vector<std::string> order;
    for (const auto& m : list_all(e, a, std::nullopt, 4))
      order.push_back(m.user_id + "/" + m.id);
    s.list_order[a] = order;
  }
  return s;
}

} // namespace

DOCTEST_TYPE_TO_STRING_AS("sync", sync_mode);
DOCTEST_TYPE_TO_STRING_AS("nosync", nosync_mode);

TEST_SUITE_BEGIN("restart");

TEST_CASE_TEMPLATE("restart keeps sessions, scopes, events, versions and times", M, sync_mode,
                   nosync_mode) {
  temp_dir dir;
  const auto o = lmdb_options(dir.str(), M::mode);
  const std::vector<std::string> apps = {"app-a", "app-b"};
  const std::vector<std::string> users = {"u1", "u2", "u3"};
  std::vector<session_ref> refs;
  const auto gone = sref("app-a", "u1", "gone");
  snapshot before;
  {
    auto e = open_at(o);
    int seq = 0;
    for (const auto& app : apps) {
      for (const auto& user : users) {
        for (int k = 0; k < 2; ++k) {
          auto ref = sref(app, user, "s" + std::to_string(k));
          refs.push_back(ref);
          MUST(e->create_session(create_req(ref,
                                            json{{"init", key_of(ref)},
                                                 {"user:created_" + ref.session_id, app},
                                                 {"app:created_" + user + ref.session_id, k}})));
          for (int i = 0; i < 5; ++i, ++seq) {
            std::optional<double> ts;
            if (i % 2 == 0)
              ts = 1.7e9 + seq + 0.125; // some explicit, some generated
            event ev = make_event(json{{"n", i},
                                       {"user:last_" + ref.session_id, seq},
                                       {"app:count_" + user + ref.session_id, i},
                                       {"temp:scratch", seq}},
                                  key_of(ref) + "#" + std::to_string(i), ts, "inv-" + key_of(ref));
            ev.content = json{{"parts", json::array({json{{"text", "t" + std::to_string(seq)}}})}};
            ev.actions.artifact_delta = json{{"f.txt", i}};
            ev.actions.extra = json{{"escalate", i == 4}};
            ev.extra = json{{"x-custom", json{{"seq", seq}, {"list", json::array({1, "a"})}}}};
            append_ok(*e, ref, std::move(ev));
          }
        }
      }
    }
    // A deleted session stays deleted.
    MUST(e->create_session(create_req(gone, json{{"doomed", true}})));
    append_ok(*e, gone, make_event(json{{"k", 1}}, "gone#0"));
    MUST(e->delete_session(gone));

    before = take_snapshot(*e, refs, apps, users);
    // Sanity of what we are about to compare.
    auto s0 = get_existing(*e, refs[0]);
    REQUIRE(s0.version == 5);
    REQUIRE(s0.events.size() == 5);
    REQUIRE(has_key(get_existing(*e, get_req(refs[0], {}, {}, "inv-" + key_of(refs[0]))).state,
                    "temp:scratch"));
    MUST(e->flush());
    MUST(e->close());
  }

  auto e = open_at(o);
  auto after = take_snapshot(*e, refs, apps, users);
  for (const auto& [k, v] : before.sessions) {
    INFO("session ", k);
    CHECK(after.sessions[k] == v);
  }
  CHECK(after.app_states == before.app_states);
  CHECK(after.user_states == before.user_states);
  CHECK(after.list_order == before.list_order);
  CHECK(before.app_states["app-a"].size() == 12); // 3 users x 2 sessions x 2 keys
  CHECK(before.user_states["app-b/u2"].size() == 4);

  // Field by field for one session, so a failure says what was lost.
  auto s = get_existing(*e, refs[3]);
  CHECK(s.version == 5);
  REQUIRE(s.events.size() == 5);
  CHECK(s.events[4].id == key_of(refs[3]) + "#4");
  CHECK(s.events[4].extra["x-custom"]["list"] == json::array({1, "a"}));
  CHECK(s.events[4].actions.extra["escalate"] == true);
  CHECK(s.state["n"] == 4);
  CHECK(s.state["init"] == key_of(refs[3]));
  CHECK(s.last_update_time == *s.events[4].timestamp);
  CHECK(s.events[0].timestamp.value_or(0) == 1.7e9 + 15 + 0.125);

  // temp: state belonged to the old process's live invocation.
  for (const auto& r : refs) {
    auto with_inv = get_existing(*e, get_req(r, {}, {}, "inv-" + key_of(r)));
    CHECK(has_no_temp_keys(with_inv.state));
  }
  // The deleted session did not come back; its id starts afresh.
  CHECK_FALSE(get_maybe(*e, gone).has_value());
  auto fresh = MUST(e->create_session(create_req(gone)));
  CHECK(fresh.version == 0);
  CHECK_FALSE(has_key(fresh.state, "doomed"));
  auto reused = append_ok(*e, gone, make_event(json{{"k", 2}}, "gone#0"));
  CHECK(reused.version == 1);
  CHECK(reused.ev.actions.state_delta == json{{"k", 2}});

  // Versions continue where they stopped.
  auto next = append_ok(*e, refs[0], make_event(json{{"n", 5}}, "after-restart"));
  CHECK(next.version == 6);
  MUST(e->close());
}

TEST_CASE_TEMPLATE("A6 re-appending a stored event id is idempotent across restart", M, sync_mode,
                   nosync_mode) {
  temp_dir dir;
  const auto o = lmdb_options(dir.str(), M::mode);
  const auto ref = sref("app", "u", "s");
  append_result r1, r2;
  {
    auto e = open_at(o);
    MUST(e->create_session(create_req(ref)));
    event ev = make_event(json{{"k", 1}, {"user:x", 1}}, "e1", 100.5, "inv-1", "author-1");
    ev.extra = json{{"note", "original"}};
    r1 = append_ok(*e, ref, ev);
    r2 = append_ok(*e, ref, make_event(json{{"k", 2}}, "e2", 200.0));
    REQUIRE(r1.version == 1);
    REQUIRE(r2.version == 2);
    MUST(e->close());
  }
  for (int round = 0; round < 2; ++round) {
    INFO("round ", round);
    auto e = open_at(o);
    event retry = make_event(json{{"k", 99}, {"user:x", 99}}, "e1", 999.0, "inv-9", "author-9");
    retry.extra = json{{"note", "retry"}};
    auto again = append_ok(*e, ref, retry);
    CHECK(to_json(again.ev) == to_json(r1.ev));
    CHECK(again.version == r1.version);
    auto again2 = append_ok(*e, ref, make_event(json{{"k", 98}}, "e2"));
    CHECK(to_json(again2.ev) == to_json(r2.ev));
    CHECK(again2.version == r2.version);

    auto s = get_existing(*e, ref);
    CHECK(s.version == 2 + static_cast<std::uint64_t>(round));
    CHECK(s.state["user:x"] == 1);
    CHECK(user_state(*e, "app", "u") == json{{"x", 1}});
    CHECK(s.events[0].extra["note"] == "original");
    if (round == 0) {
      CHECK(s.state["k"] == 2);
      CHECK(event_ids(s.events) == std::vector<std::string>{"e1", "e2"});
      // A new event stored in this process is deduplicated after the next
      // restart too (checked in round 1).
      CHECK(append_ok(*e, ref, make_event(json{{"k", 3}}, "e3")).version == 3);
    } else {
      CHECK(s.state["k"] == 3);
      CHECK(event_ids(s.events) == std::vector<std::string>{"e1", "e2", "e3"});
      auto again3 = append_ok(*e, ref, make_event(json{{"k", 97}}, "e3"));
      CHECK(again3.version == 3);
      CHECK(again3.ev.actions.state_delta == json{{"k", 3}});
      CHECK(get_existing(*e, ref).version == 3);
    }
    MUST(e->close());
  }
}

TEST_CASE_TEMPLATE("the engine destructor closes like close()", M, sync_mode, nosync_mode) {
  temp_dir dir;
  const auto o = lmdb_options(dir.str(), M::mode);
  const auto ref = sref("app", "u", "s");
  {
    auto e = open_at(o);
    MUST(e->create_session(create_req(ref, json{{"app:a", 1}})));
    for (int i = 0; i < 10; ++i)
      append_ok(*e, ref, make_event(json{{"i", i}}, "e" + std::to_string(i)));
    // no close(): the destructor must finish, sync and release the store
  }
  auto e = open_at(o);
  auto s = get_existing(*e, ref);
  CHECK(s.version == 10);
  CHECK(s.state == json{{"i", 9}, {"app:a", 1}});
  CHECK(s.events.size() == 10);
}

TEST_CASE("a store directory is opened once per process") {
  temp_dir dir;
  const auto o = lmdb_options(dir.str(), durability::nosync);
  const auto ref = sref("app", "u", "s");
  auto first = open_at(o);
  MUST(first->create_session(create_req(ref)));
  append_ok(*first, ref, make_event(json{{"k", 1}}, "e1"));

  CHECK_ERR(engine::open(o), errc::unavailable);
  // A refused open must not release the first engine's lock.
  CHECK_ERR(engine::open(o), errc::unavailable);
  // Another spelling of the same directory is the same store.
  CHECK_ERR(engine::open(lmdb_options(dir.str() + "/.", durability::nosync)), errc::unavailable);
  CHECK_ERR(engine::open(lmdb_options(dir.str() + "/", durability::sync)), errc::unavailable);
  {
    temp_dir links;
    auto link = links.path() / "alias";
    std::filesystem::create_directory_symlink(dir.path(), link);
    CHECK_ERR(engine::open(lmdb_options(link.string(), durability::nosync)), errc::unavailable);
  }
  CHECK_ERR(engine::open(o), errc::unavailable);

  // The first engine still works.
  auto r = append_ok(*first, ref, make_event(json{{"k", 2}}, "e2"));
  CHECK(r.version == 2);
  auto s = get_existing(*first, ref);
  CHECK(s.version == 2);
  CHECK(s.state == json{{"k", 2}});
  MUST(first->create_session(create_req("app", "u", "t")));
  CHECK(list_all(*first, "app").size() == 2);

  // Once closed, the directory can be opened again.
  MUST(first->close());
  auto second = open_at(o);
  CHECK(get_existing(*second, ref).version == 2);
  CHECK_ERR(engine::open(o), errc::unavailable);
}

TEST_CASE("close is idempotent and refuses later work with unavailable") {
  temp_dir dir;
  const auto o = lmdb_options(dir.str(), durability::nosync);
  const auto ref = sref("app", "u", "s");
  auto e = open_at(o);
  MUST(e->create_session(create_req(ref)));
  append_ok(*e, ref, make_event(json{{"k", 1}}, "e1"));
  MUST(e->close());
  CHECK_OK(e->close());

  CHECK_ERR(e->create_session(create_req("app", "u", "t")), errc::unavailable);
  CHECK_ERR(e->append_event(append_req(ref, make_event(json{{"k", 2}}))), errc::unavailable);
  // NOTE: the header lists only invalid_argument for get_session, but close()
  // "refuses new work (unavailable)" and has released the store.
  CHECK_ERR(e->get_session(get_req(ref)), errc::unavailable);

  // An async call after close still calls back exactly once.
  std::promise<errc> done;
  auto fut = done.get_future();
  e->append_event(append_req(ref, make_event(json{{"k", 3}})),
                  [&done](result<append_result> r) { done.set_value(r.code()); });
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(code_name(fut.get()) == code_name(errc::unavailable));

  // Nothing was written after close.
  auto again = open_at(o);
  auto s = get_existing(*again, ref);
  CHECK(s.version == 1);
  CHECK(s.state == json{{"k", 1}});
  CHECK_FALSE(get_maybe(*again, sref("app", "u", "t")).has_value());
}

TEST_SUITE_END();
