// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// Guarantee 7: idle session, user and app actors are passivated after the
// configured idle time and rehydrated from the store on the next message,
// with nothing lost and no message dropped across the boundary.
#include <doctest/doctest.h>

#include <chrono>

#include "support/deterministic.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;

TEST_CASE_TEMPLATE("passivation: idle actors go away after one to two idle periods and come "
                   "back from the store (deterministic scheduler)",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_deterministic(S::kind, [](options& o) { o.idle_timeout = 1s; });
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  test::pending_call<session> created;
  e.create_session(test::create_req(ref, json{{"user:u", 1}, {"app:a", 1}}), created.cb());
  t.run();
  MUST(std::move(created.get()));
  test::pending_call<append_result> appended;
  e.append_event(test::append_req(
                   ref, test::make_event(json{{"k", 1}, {"temp:t", 1}}, "e1", std::nullopt, "inv")),
                 appended.cb());
  test::pending_call<json> user, app;
  e.get_user_state("app", "u", user.cb());
  e.get_app_state("app", app.cb());
  t.run();
  MUST(std::move(appended.get()));
  CHECK(MUST(std::move(user.get())) == json{{"u", 1}});
  CHECK(MUST(std::move(app.get())) == json{{"a", 1}});
  CHECK(e.stats().sessions_live == 1);
  CHECK(e.stats().users_live == 1);
  CHECK(e.stats().apps_live == 1);

  // The first tick sees the work done since spawn; the second finds them idle.
  t.advance(1s);
  CHECK(e.stats().sessions_live == 1);
  CHECK(e.stats().passivations == 0);
  t.advance(1s);
  CHECK(e.stats().sessions_live == 0);
  CHECK(e.stats().users_live == 0);
  CHECK(e.stats().apps_live == 0);
  CHECK(e.stats().passivations == 3);

  // Rehydrated: versions continue, dedup still answers, shared scopes intact.
  test::pending_call<append_result> again, next;
  e.append_event(test::append_req(ref, test::make_event(json{{"k", 1}}, "e1")), again.cb());
  e.append_event(test::append_req(ref, test::make_event(json{{"k", 2}}, "e2")), next.cb());
  test::pending_call<json> user2;
  e.get_user_state("app", "u", user2.cb());
  test::pending_call<std::optional<session>> live;
  e.get_session(test::get_req(ref, 0, std::nullopt, "inv"), live.cb());
  t.run();
  CHECK(MUST(std::move(again.get())).version == 1);
  CHECK(MUST(std::move(next.get())).version == 2);
  CHECK(MUST(std::move(user2.get())) == json{{"u", 1}});
  // The live invocation's temp: state went with the actor (documented).
  auto s = MUST(std::move(live.get()));
  REQUIRE(s);
  CHECK_FALSE(s->state.contains("temp:t"));
  CHECK(s->state.value("k", 0) == 2);
  // 3 before passivation; after it the session and the user scope (nothing
  // touched app: state, so the app actor stays passivated).
  CHECK(e.stats().activations == 5);
}

TEST_CASE("passivation: a session with queued work or a held lease is never passivated "
          "(deterministic scheduler)") {
  auto t =
    test::open_deterministic(test::store_kind::memory, [](options& o) { o.idle_timeout = 1s; });
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  test::pending_call<session> created, begun;
  e.create_session(test::create_req(ref), created.cb());
  e.begin_invocation(ref, "inv", begun.cb());
  t.run();
  REQUIRE(begun.ready());
  for (int i = 0; i < 5; ++i)
    t.advance(1s);
  CHECK(e.stats().sessions_live == 1); // the lease holds the actor
  test::pending_call<void> ended;
  e.end_invocation(ref, "inv", ended.cb());
  t.run();
  MUST(std::move(ended.get()));
  t.advance(1s);
  t.advance(1s);
  CHECK(e.stats().sessions_live == 0);
}

TEST_CASE("passivation: messages racing an idle timeout are never lost") {
  // With a 1 ms idle time the actors passivate between almost every pair of
  // calls; each call must still be answered, and in order. Every 50 calls
  // the test lets them go (a bounded poll), so passivations certainly
  // happen whatever the machine's speed.
  auto t = test::open_engine(test::store_kind::memory, [](options& o) { o.idle_timeout = 1ms; });
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  for (int i = 1; i <= 300; ++i) {
    auto r = MUST(e.append_event(test::append_req(ref, test::make_event(json{{"user:n", i}}))));
    REQUIRE(r.version == static_cast<std::uint64_t>(i));
    if (i % 3 == 0)
      REQUIRE(e.get_user_state("app", "u").value().at("n") == i);
    if (i % 50 == 0)
      REQUIRE(test::eventually(
        [&] { return e.stats().sessions_live == 0 && e.stats().users_live == 0; }));
  }
  CHECK(e.stats().passivations > 0);
  CHECK(test::get_existing(e, ref).events.size() == 300);
}
