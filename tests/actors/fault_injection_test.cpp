// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// Fault injection through the store seam (store/fault_kv.hpp): the Nth store
// call fails with map-full, EIO or readers-full, once or forever, for every N
// until the scenario completes untouched. After each run: no partial append
// is visible, nothing acknowledged is lost (also after a reopen), every actor
// still answers, and the store verifies clean.
#include <doctest/doctest.h>

#include <future>
#include <map>
#include <set>

#include "actors/core.hpp"
#include "actors/engine_factory.hpp"
#include "support/fault_kv.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

constexpr int appends = 6;

struct outcome {
  std::map<std::string, std::uint64_t> acked; ///< event id -> version
  bool s1_created = false, s2_created = false;
};

session_ref ref_of(int i) {
  return test::sref("app", "u", i % 2 == 0 ? "s1" : "s2");
}

// Creates two sessions and appends to them alternately, recording what was
// acknowledged. Errors are allowed; every one must be a typed, known kind.
outcome run_scenario(engine& e) {
  outcome out;
  out.s1_created = e.create_session(test::create_req("app", "u", "s1", json{{"user:c", 1}})).ok();
  out.s2_created = e.create_session(test::create_req("app", "u", "s2")).ok();
  // Issued all at once, so group commits hold several write sets and a fault
  // hits one write set among others.
  std::vector<std::future<result<append_result>>> acks;
  for (int i = 0; i < appends; ++i) {
    auto p = std::make_shared<std::promise<result<append_result>>>();
    acks.push_back(p->get_future());
    e.append_event(
      test::append_req(ref_of(i),
                       test::make_event(json{{"n", i}, {"user:last", i}, {"app:last", i}},
                                        "e" + std::to_string(i))),
      [p](result<append_result> r) { p->set_value(std::move(r)); });
  }
  for (int i = 0; i < appends; ++i) {
    auto r = acks[i].get();
    if (r.ok()) {
      out.acked["e" + std::to_string(i)] = r.value().version;
    } else {
      auto c = r.code();
      CHECK((c == errc::storage_full || c == errc::io_error || c == errc::unavailable
             || c == errc::not_found));
    }
  }
  return out;
}

// The checks that must hold whatever failed.
void check_store(engine& e, const outcome& out) {
  std::set<int> stored_n;
  for (auto name : {"s1", "s2"}) {
    auto got = e.get_session(test::get_req(test::sref("app", "u", name)));
    REQUIRE(got.ok());
    if (!got.value())
      continue;
    const auto& s = *got.value();
    CHECK(s.version == s.events.size());
    // Each stored event carries its whole effect: the session's state is the
    // last stored event's delta (atomic append).
    if (!s.events.empty()) {
      int n = s.events.back().actions.state_delta.at("n").get<int>();
      CHECK(s.state.value("n", -1) == n);
      for (auto& ev : s.events)
        stored_n.insert(ev.actions.state_delta.at("n").get<int>());
    } else {
      CHECK_FALSE(s.state.contains("n"));
    }
    for (std::size_t v = 0; v < s.events.size(); ++v) {
      auto it = out.acked.find(s.events[v].id);
      if (it != out.acked.end())
        CHECK(it->second == v + 1);
    }
  }
  // Every acknowledged event is present at its version.
  for (auto& [id, version] : out.acked) {
    int i = std::stoi(id.substr(1));
    auto got = e.get_session(test::get_req(ref_of(i)));
    REQUIRE(got.ok());
    REQUIRE(got.value().has_value());
    REQUIRE(got.value()->events.size() >= version);
    CHECK(got.value()->events[version - 1].id == id);
  }
  // Shared scopes hold a stored event's write, and agree with each other
  // (they were written together in every event).
  auto app = e.get_app_state("app");
  REQUIRE(app.ok());
  auto user = e.get_user_state("app", "u");
  REQUIRE(user.ok());
  if (stored_n.empty()) {
    CHECK_FALSE(app.value().contains("last"));
  } else {
    CHECK(stored_n.count(app.value().value("last", -1)) == 1);
    CHECK(user.value().value("last", -2) == app.value().value("last", -1));
  }
  auto txn = detail::engine_factory::store_of(e).begin_read();
  auto report = store::verify_store(*txn);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
}

// Runs the scenario with a fault at call n. Returns false once the scenario
// completed without the fault being reached (n is past the last call).
bool run_with_fault(test::store_kind kind, store::fault_target target, errc code, bool forever,
                    std::uint64_t n) {
  test::temp_dir dir;
  auto opts = test::make_options(kind, dir.str());
  auto plan = std::make_shared<store::fault_plan>();
  plan->target = target;
  plan->code = code;
  plan->forever = forever;
  plan->fail_at = n;
  auto opened = detail::engine_factory::open(opts, [plan](std::unique_ptr<store::kv_store> kv) {
    return store::make_faulty_kv(std::move(kv), plan);
  });
  REQUIRE(opened.ok());
  auto& e = **opened;
  auto out = run_scenario(e);
  bool reached = plan->injected.load() > 0;
  plan->disarmed = true;
  check_store(e, out);
  // Actors are alive: the sessions take another append (creating them if the
  // fault kept them from existing).
  for (auto [name, created] : {std::pair{"s1", out.s1_created}, std::pair{"s2", out.s2_created}}) {
    auto ref = test::sref("app", "u", name);
    if (!created)
      (void)e.create_session(test::create_req(ref));
    auto r = e.append_event(test::append_req(ref, test::make_event(json{{"alive", true}})));
    CHECK(r.ok());
  }
  if (kind == test::store_kind::lmdb) {
    MUST(e.close());
    opened.value().reset();
    auto again = engine::open(opts);
    REQUIRE(again.ok());
    for (auto& [id, version] : out.acked) {
      auto got = (*again)->get_session(test::get_req(ref_of(std::stoi(id.substr(1)))));
      REQUIRE(got.ok());
      REQUIRE(got.value().has_value());
      CHECK(got.value()->events.at(version - 1).id == id);
    }
  }
  return reached;
}

} // namespace

TEST_CASE_TEMPLATE("faults: every write call failing once or forever loses nothing acknowledged", S,
                   test::memory_store, test::lmdb_store) {
  for (auto code : {errc::storage_full, errc::io_error}) {
    for (bool forever : {false, true}) {
      std::uint64_t n = 1;
      for (; n < 400; ++n) {
        std::string kind_name = to_string(code);
        CAPTURE(kind_name);
        CAPTURE(forever);
        CAPTURE(n);
        if (!run_with_fault(S::kind, store::fault_target::writes, code, forever, n))
          break;
      }
      CHECK(n < 400); // the scenario finished untouched at some n
    }
  }
}

TEST_CASE_TEMPLATE("faults: reads failing (readers full) are typed errors and harmless", S,
                   test::memory_store, test::lmdb_store) {
  for (bool forever : {false, true}) {
    std::uint64_t n = 1;
    for (; n < 400; ++n) {
      CAPTURE(forever);
      CAPTURE(n);
      if (!run_with_fault(S::kind, store::fault_target::reads, errc::unavailable, forever, n))
        break;
    }
    CHECK(n < 400);
  }
}

// A6 while the first append is in flight: a duplicate queued behind it is
// answered with its outcome once the writer answers (the stored event and
// version, or its error). The duplicates are sent back-to-back with the
// first, so they reach the session actor long before the writer's reply.
// The bug: the in-flight index was keyed by the event's id after the event
// had been moved from (an empty string), so every duplicate in flight missed
// it, missed the store too, and was stored as a new event.
TEST_CASE_TEMPLATE("regression: A6 duplicates sent while the first append is in flight get "
                   "its outcome, not a new version (in-flight index keyed by a moved-from id)",
                   S, test::memory_store, test::lmdb_store) {
  for (bool fail : {false, true}) {
    CAPTURE(fail);
    test::temp_dir dir;
    auto opts = test::make_options(S::kind, dir.str());
    auto plan = std::make_shared<store::fault_plan>();
    auto opened = detail::engine_factory::open(opts, [plan](std::unique_ptr<store::kv_store> kv) {
      return store::make_faulty_kv(std::move(kv), plan);
    });
    REQUIRE(opened.ok());
    auto& e = **opened;
    auto ref = test::sref("app", "u", "s");
    MUST(e.create_session(test::create_req(ref)));
    if (fail) {
      // Every write from the next one on fails. Written before the appends
      // are sent, so the writer sees it (message passing orders the two).
      plan->forever = true;
      plan->fail_at = plan->calls.load() + 1;
    }
    constexpr int dups = 8;
    std::vector<std::future<result<append_result>>> acks;
    for (int i = 0; i <= dups; ++i) {
      auto p = std::make_shared<std::promise<result<append_result>>>();
      acks.push_back(p->get_future());
      // The first carries k = 1; each duplicate a different delta.
      auto ev = test::make_event(json{{"k", i == 0 ? 1 : 100 + i}}, "e1");
      e.append_event(test::append_req(ref, std::move(ev)),
                     [p](result<append_result> r) { p->set_value(std::move(r)); });
    }
    for (int i = 0; i <= dups; ++i) {
      CAPTURE(i);
      auto r = acks[i].get();
      if (fail) {
        CHECK_ERR(r, errc::io_error);
      } else {
        REQUIRE_OK(r);
        CHECK(r.value().version == 1);
        CHECK(r.value().ev.actions.state_delta == json{{"k", 1}});
      }
    }
    plan->disarmed = true;
    auto s = e.get_session(test::get_req(ref));
    REQUIRE_OK(s);
    REQUIRE(s.value().has_value());
    CHECK(s.value()->events.size() == (fail ? 0u : 1u));
    CHECK(s.value()->state == (fail ? json::object() : json{{"k", 1}}));
    if (!fail)
      CHECK(e.stats().deduplicated == dups);
  }
}
