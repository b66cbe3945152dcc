// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// Regression: the user/app actors skipped all but the first of several writes
// to their scope that landed in one group commit (the notifications share a
// transaction id, and applying one advanced the actor's snapshot id), so
// get_user_state disagreed with get_session's merged state.
//
// The scenario is forced: the store writer is held at the start of a commit
// (fault_plan::hold_writes) while every session's append is sent, so the
// appends queue up and commit together; each round then requires that the
// writes did share commits, so the test cannot pass without the scenario.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <vector>

#include "actors/engine_factory.hpp"
#include "support/fault_kv.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;

TEST_CASE("regression: scope actors apply every write of one group commit") {
  for (auto kind : {test::store_kind::memory, test::store_kind::lmdb}) {
    CAPTURE(test::to_string(kind));
    test::temp_dir dir;
    auto plan = std::make_shared<store::fault_plan>(); // fails nothing: fail_at 0
    auto opened = detail::engine_factory::open(test::make_options(kind, dir.str()),
                                               [plan](std::unique_ptr<store::kv_store> kv) {
                                                 return store::make_faulty_kv(std::move(kv), plan);
                                               });
    REQUIRE(opened.ok());
    auto& e = **opened;
    // A failed REQUIRE while the writer is held must not leave close() waiting.
    struct release_writer {
      store::fault_plan& p;
      ~release_writer() { p.release_writes(); }
    } release{*plan};
    constexpr int sessions = 50;
    for (int i = 0; i < sessions; ++i)
      MUST(e.create_session(test::create_req("app", "u", "s" + std::to_string(i))));
    // Load the scope actors first, so they apply notifications.
    MUST(e.get_user_state("app", "u"));
    MUST(e.get_app_state("app"));
    for (int round = 0; round < 5; ++round) {
      CAPTURE(round);
      auto commits_before = e.stats().commits;
      plan->hold_writes();
      std::vector<std::future<result<append_result>>> acks;
      for (int i = 0; i < sessions; ++i) {
        auto p = std::make_shared<std::promise<result<append_result>>>();
        acks.push_back(p->get_future());
        e.append_event(test::append_req(test::sref("app", "u", "s" + std::to_string(i)),
                                        test::make_event(json{{"user:x", round * 100 + i},
                                                              {"app:y", round * 100 + i}})),
                       [p](result<append_result> r) { p->set_value(std::move(r)); });
      }
      // The writer waits at its first commit of the round; the other appends
      // reach its mailbox meanwhile (they need only their session actor).
      REQUIRE(test::eventually([&] { return plan->writes_held.load() > 0; }, 30s));
      REQUIRE(plan->writes_held.load() == 1);
      // Every other append has reached the writer's queue (in memory, the
      // held one may be an inline commit, which the backlog does not count).
      REQUIRE(test::eventually(
        [&] { return detail::engine_factory::writer_backlog_of(e) >= sessions - 1; }, 30s));
      plan->release_writes();
      for (auto& a : acks)
        REQUIRE(a.get().ok());
      // The scenario happened: the round's appends did not commit one by one.
      auto commits = e.stats().commits - commits_before;
      INFO("commits in the round: ", commits, " for ", sessions, " appends");
      REQUIRE(commits < static_cast<std::uint64_t>(sessions));
      auto merged = test::get_existing(e, test::sref("app", "u", "s0")).state;
      CHECK(e.get_user_state("app", "u").value().at("x") == merged.at("user:x"));
      CHECK(e.get_app_state("app").value().at("y") == merged.at("app:y"));
    }
    CHECK(e.stats().max_batch >= 2);
  }
}
