// Guarantee 7: idle session, user and app actors are passivated after the
// configured idle time and rehydrated from the store on the next message,
// with nothing lost and no message dropped across the boundary.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;

TEST_CASE_TEMPLATE("passivation: idle actors go away and come back from the store", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind, [](options& o) { o.idle_timeout = 50ms; });
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"user:u", 1}, {"app:a", 1}})));
  MUST(e.append_event(test::append_req(
    ref, test::make_event(json{{"k", 1}, {"temp:t", 1}}, "e1", std::nullopt, "inv"))));
  MUST(e.get_user_state("app", "u"));
  MUST(e.get_app_state("app"));
  CHECK(e.stats().sessions_live == 1);
  CHECK(e.stats().users_live == 1);
  CHECK(e.stats().apps_live == 1);

  REQUIRE(test::eventually([&] {
    auto s = e.stats();
    return s.sessions_live == 0 && s.users_live == 0 && s.apps_live == 0;
  }));
  CHECK(e.stats().passivations >= 3);

  // Rehydrated: versions continue, dedup still answers, shared scopes intact.
  auto again = e.append_event(test::append_req(ref, test::make_event(json{{"k", 1}}, "e1")));
  REQUIRE(again.ok());
  CHECK(again.value().version == 1);
  auto next = MUST(e.append_event(test::append_req(ref, test::make_event(json{{"k", 2}}, "e2"))));
  CHECK(next.version == 2);
  CHECK(e.get_user_state("app", "u").value() == json{{"u", 1}});
  // The live invocation's temp: state went with the actor (documented).
  auto s = test::get_existing(e, test::get_req(ref, 0, std::nullopt, "inv"));
  CHECK_FALSE(s.state.contains("temp:t"));
  CHECK(s.state.value("k", 0) == 2);
}

TEST_CASE("passivation: messages racing an idle timeout are never lost") {
  // With a 1 ms idle time the actors passivate between almost every pair of
  // calls; each call must still be answered, and in order.
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
      std::this_thread::sleep_for(3ms);
  }
  CHECK(e.stats().passivations > 0);
  CHECK(test::get_existing(e, ref).events.size() == 300);
}
