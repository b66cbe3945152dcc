// SPDX-License-Identifier: Apache-2.0
// test-name: invocation_modify_test
// test-tiers: tsan write_map
// Atomic modify (issue #6 item 2): resolved by the store writer inside the
// commit, in commit order, so concurrent writers of one key lose nothing.
#include <doctest/doctest.h>

#include <thread>

#include "support/test_support.hpp"

using namespace agentstate;

namespace {

state_modify add(std::string key, int n) {
  return state_modify{std::move(key), 0, [n](const json& v) { return v.get<int>() + n; }};
}

} // namespace

TEST_CASE_TEMPLATE("modify: 100 sessions incrementing one user: and one app: counter on real "
                   "threads lose nothing",
                   S, test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  constexpr int sessions = 100, per_session = 20, threads = 8;
  for (int i = 0; i < sessions; ++i)
    MUST(e.create_session(test::create_req("app", "u", "s" + std::to_string(i))));
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (int i = w; i < sessions; i += threads)
        for (int k = 0; k < per_session; ++k) {
          append_request req;
          req.ref = test::sref("app", "u", "s" + std::to_string(i));
          req.ev = test::make_event();
          req.modify = {add("user:count", 1), add("app:count", 2), add("mine", 1)};
          if (!e.append_event(std::move(req)).ok())
            failures.fetch_add(1);
        }
    });
  for (auto& th : pool)
    th.join();
  CHECK(failures.load() == 0);
  CHECK(MUST(e.get_user_state("app", "u")).value("count", -1) == sessions * per_session);
  CHECK(MUST(e.get_app_state("app")).value("count", -1) == 2 * sessions * per_session);
  auto s = test::get_existing(e, test::sref("app", "u", "s7"));
  CHECK(s.state.value("mine", -1) == per_session);
  // Each stored event records the value its modify produced, in commit order:
  // within one session the user: counter only grows.
  int last = 0;
  for (auto& ev : s.events) {
    int v = ev.actions.state_delta.value("user:count", -1);
    CHECK(v > last);
    last = v;
  }
}

TEST_CASE_TEMPLATE("modify: applies after the event's own delta, in order, and the reply "
                   "carries the resolved value",
                   S, test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"x", 5}})));
  append_request req = test::append_req(ref, test::make_event(json{{"x", 10}}, "e1"));
  req.modify = {add("x", 1), state_modify{"x", 0, [](const json& v) { return v.get<int>() * 2; }},
                add("fresh", 7)};
  auto r = MUST(e.append_event(std::move(req)));
  CHECK(r.ev.actions.state_delta == json{{"x", 22}, {"fresh", 7}});
  auto s = test::get_existing(e, ref);
  CHECK(s.state == json{{"x", 22}, {"fresh", 7}});
  CHECK(s.events.at(0).actions.state_delta == json{{"x", 22}, {"fresh", 7}});
  // A6: the retry returns the stored event; the modify is not run again.
  append_request again = test::append_req(ref, test::make_event(json{{"x", 10}}, "e1"));
  again.modify = {add("x", 1000)};
  auto r2 = MUST(e.append_event(std::move(again)));
  CHECK(r2.ev.actions.state_delta == json{{"x", 22}, {"fresh", 7}});
  CHECK(test::get_existing(e, ref).state.value("x", 0) == 22);
  // A removed key is missing for a modify of the same event: it sees the fallback.
  append_request rm = test::append_req(ref, test::make_event(json::object(), "e2"));
  rm.ev.actions.state_remove = {"x"};
  rm.modify = {state_modify{"x", 100, [](const json& v) { return v.get<int>() + 1; }}};
  auto r3 = MUST(e.append_event(std::move(rm)));
  CHECK(r3.ev.actions.state_delta.value("x", 0) == 101);
  CHECK(r3.ev.actions.state_remove.empty());
  CHECK(test::get_existing(e, ref).state.value("x", 0) == 101);
}

TEST_CASE_TEMPLATE("modify: a failing function fails that append alone; nothing is stored", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"user:n", 1}})));
  append_request bad = test::append_req(ref, test::make_event(json{{"a", 1}}, "bad"));
  bad.modify = {add("user:n", 1), state_modify{"b", 0, [](const json&) -> json {
                                                 throw std::runtime_error("boom");
                                               }}};
  auto r = e.append_event(std::move(bad));
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.err().message.find("boom") != std::string::npos);
  CHECK(r.err().message.find("'b'") != std::string::npos);
  // Wrong type: nlohmann's exception is caught the same way.
  append_request wrong = test::append_req(ref, test::make_event(json::object(), "wrong"));
  wrong.modify = {state_modify{"user:n", 0, [](const json& v) { return v.get<std::string>(); }}};
  CHECK_ERR(e.append_event(std::move(wrong)), errc::invalid_argument);
  // Over the depth limit: too_large.
  append_request deep = test::append_req(ref, test::make_event(json::object(), "deep"));
  deep.modify = {state_modify{"d", 0, [](const json&) {
                                json v = 1;
                                for (int i = 0; i < 100; ++i)
                                  v = json::array({v});
                                return v;
                              }}};
  CHECK_ERR(e.append_event(std::move(deep)), errc::too_large);
  // Refused up front: temp:, derived:, no function.
  for (auto key : {"temp:x", "turn:x", "derived:x"}) {
    append_request q = test::append_req(ref, test::make_event());
    q.modify = {add(key, 1)};
    CHECK_ERR(e.append_event(std::move(q)), errc::invalid_argument);
  }
  append_request nofn = test::append_req(ref, test::make_event());
  nofn.modify = {state_modify{"x", 0, {}}};
  CHECK_ERR(e.append_event(std::move(nofn)), errc::invalid_argument);
  auto s = test::get_existing(e, ref);
  CHECK(s.version == 0);
  CHECK(s.state == json{{"user:n", 1}});
  // The session still works, and the failed id can be used again.
  append_request ok = test::append_req(ref, test::make_event(json{{"a", 1}}, "bad"));
  ok.modify = {add("user:n", 1)};
  auto good = MUST(e.append_event(std::move(ok)));
  CHECK(good.version == 1);
  CHECK(test::get_existing(e, ref).state == json{{"a", 1}, {"user:n", 2}});
}
