// SPDX-License-Identifier: Apache-2.0
// The session actor answers every command strictly in arrival order, also
// around a write that fails at commit, on CAF's deterministic scheduler.
#include <doctest/doctest.h>

#include <vector>

#include "support/deterministic.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

template <class T>
callback<T> record(std::vector<int>& order, int n, std::vector<result<T>>& out) {
  return [&order, &out, n](result<T> r) {
    order.push_back(n);
    out.push_back(std::move(r));
  };
}

} // namespace

TEST_CASE_TEMPLATE("reply order: appends, reads of the live invocation and deletes answer in "
                   "arrival order",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_deterministic(S::kind);
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  test::pending_call<session> created;
  e.create_session(test::create_req(ref), created.cb());
  t.run();
  MUST(std::move(created.get()));

  std::vector<int> order;
  std::vector<result<append_result>> appends;
  std::vector<result<std::optional<session>>> reads;
  std::vector<result<void>> deletes;
  for (int i = 1; i <= 5; ++i)
    e.append_event(test::append_req(ref,
                                    test::make_event(json{{"n", i}, {"temp:x", i}},
                                                     "e" + std::to_string(i), std::nullopt, "inv")),
                   record(order, i, appends));
  // A read naming the live invocation goes through the actor, at its turn.
  e.get_session(test::get_req(ref, std::nullopt, std::nullopt, "inv"), record(order, 6, reads));
  e.delete_session(ref, record(order, 7, deletes));
  e.append_event(test::append_req(ref, test::make_event(json::object(), "late")),
                 record(order, 8, appends));
  t.run();
  CHECK(order == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8});
  for (int i = 0; i < 5; ++i)
    CHECK(MUST(std::move(appends[i])).version == static_cast<std::uint64_t>(i + 1));
  auto s = MUST(std::move(reads[0]));
  REQUIRE(s);
  CHECK(s->version == 5);
  CHECK(s->events.size() == 5);
  CHECK(s->state["temp:x"] == 5);
  MUST(std::move(deletes[0]));
  INFO(test::describe(appends[5]));
  CHECK(appends[5].code() == errc::not_found); // after the delete, in order
}

TEST_CASE_TEMPLATE("reply order: a write failing at commit dooms its pipelined followers, which "
                   "answer in order; later commands see the re-read session",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_deterministic(S::kind);
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  test::pending_call<session> created;
  e.create_session(test::create_req(ref, json{{"k", 1}}), created.cb());
  t.run();
  MUST(std::move(created.get()));

  std::vector<int> order;
  std::vector<result<append_result>> out;
  e.append_event(test::append_req(ref, test::make_event(json{{"a", 1}})), record(order, 1, out));
  append_request cas = test::append_req(ref, test::make_event());
  cas.modify = {modify_ops::compare_and_set("k", 2, 3)}; // k is 1: fails at commit
  e.append_event(std::move(cas), record(order, 2, out));
  e.append_event(test::append_req(ref, test::make_event(json{{"b", 1}})), record(order, 3, out));
  e.append_event(test::append_req(ref, test::make_event(json{{"c", 1}})), record(order, 4, out));
  t.run();
  CHECK(order == std::vector<int>{1, 2, 3, 4});
  CHECK(MUST(std::move(out[0])).version == 1);
  CHECK(out[1].code() == errc::condition_failed);
  CHECK(out[2].code() == errc::unavailable); // retryable: its version no longer follows
  CHECK(out[3].code() == errc::unavailable);
  // The actor re-read the session: a new append gets the next stored version.
  test::pending_call<append_result> next;
  e.append_event(test::append_req(ref, test::make_event(json{{"b", 1}})), next.cb());
  t.run();
  CHECK(MUST(std::move(next.get())).version == 2);
}
