// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// A6 (an event id already stored answers with that event) as the session
// actor's id index serves it: built from the store on the first lookup,
// rebuilt after passivation, emptied by a delete. Both stores.
#include <doctest/doctest.h>

#include "support/test_support.hpp"

using namespace agentstate;

namespace {

std::string id_of(int i) {
  return "ev-" + std::to_string(i);
}

} // namespace

TEST_CASE_TEMPLATE("dedup: after passivation any stored id answers with its own event", S,
                   test::memory_store, test::lmdb_store) {
  auto t =
    test::open_engine(S::kind, [](options& o) { o.idle_timeout = std::chrono::milliseconds(50); });
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  for (int i = 1; i <= 60; ++i)
    test::append_ok(e, ref, test::make_event(json{{"n", i}}, id_of(i)));
  auto generated = test::append_ok(e, ref, test::make_event(json{{"n", 61}})); // id by the engine
  REQUIRE(test::eventually([&] { return e.stats().sessions_live == 0; }));

  for (int i : {1, 17, 60}) {
    auto again = test::append_ok(e, ref, test::make_event(json{{"n", -1}}, id_of(i)));
    CHECK(again.version == static_cast<std::uint64_t>(i));
    CHECK(again.ev.actions.state_delta == json{{"n", i}});
  }
  auto again = test::append_ok(e, ref, test::make_event(json{{"n", -1}}, generated.ev.id));
  CHECK(again.version == 61);
  CHECK(e.stats().deduplicated == 4);
  // New ids still append, and are found in turn.
  CHECK(test::append_ok(e, ref, test::make_event(json{{"n", 62}}, id_of(62))).version == 62);
  CHECK(test::append_ok(e, ref, test::make_event(json{{"n", -1}}, id_of(62))).version == 62);
  auto s = test::get_existing(e, ref);
  CHECK(s.version == 62);
  CHECK(s.state["n"] == 62);
}

TEST_CASE_TEMPLATE("dedup: a deleted session's ids are new again in its re-creation", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  test::append_ok(e, ref, test::make_event(json{{"k", "old-1"}}, "a"));
  test::append_ok(e, ref, test::make_event(json{{"k", "old-2"}}, "b"));
  CHECK(test::append_ok(e, ref, test::make_event(json{{"k", "x"}}, "b")).version == 2);

  MUST(e.delete_session(ref));
  MUST(e.create_session(test::create_req(ref)));
  // "b" was stored at version 2 of the deleted session: here it is new.
  auto b = test::append_ok(e, ref, test::make_event(json{{"k", "new-b"}}, "b"));
  CHECK(b.version == 1);
  CHECK(test::append_ok(e, ref, test::make_event(json{{"k", "new-a"}}, "a")).version == 2);
  auto again = test::append_ok(e, ref, test::make_event(json{{"k", "x"}}, "b"));
  CHECK(again.version == 1);
  CHECK(again.ev.actions.state_delta == json{{"k", "new-b"}});
  auto s = test::get_existing(e, ref);
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"b", "a"});
  CHECK(s.state["k"] == "new-a");
}

TEST_CASE_TEMPLATE("dedup: duplicates sent back to back with their original are answered once", S,
                   test::memory_store, test::lmdb_store) {
  // Sent at once through the async API: each duplicate is answered from its
  // original while that is in flight, or from the index once it committed.
  auto t = test::open_engine(S::kind);
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  constexpr int n = 200;
  std::vector<std::optional<result<append_result>>> got(2 * n);
  std::atomic<int> done{0};
  for (int i = 0; i < 2 * n; ++i) {
    int k = i % n; // ids 0..n-1, then each again
    e.append_event(test::append_req(ref, test::make_event(json{{"k", k}}, id_of(k))),
                   [&got, &done, i](result<append_result> r) {
                     got[i] = std::move(r);
                     ++done;
                   });
  }
  REQUIRE(test::eventually([&] { return done.load() == 2 * n; }));
  for (int i = 0; i < 2 * n; ++i) {
    INFO("append ", i);
    REQUIRE(got[i]->ok());
    CHECK(got[i]->value().version == static_cast<std::uint64_t>(i % n + 1));
  }
  CHECK(test::get_existing(e, ref).version == n);
}
