// SPDX-License-Identifier: Apache-2.0
// docs/semantics.md N1: turn: lives like temp: (invocation-scoped, never stored);
// session: and bg: are plain session keys; derived: keys are not writable by
// clients.
#include <doctest/doctest.h>

#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE_TEMPLATE("N1 turn: keys live in the invocation and are never stored", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref, json{{"turn:x", 1}})));
  auto r = MUST(e.append_event(
    test::append_req(ref,
                     test::make_event(json{{"turn:t", 1}, {"session:s", 2}, {"bg:b", 3}}, "e1",
                                      std::nullopt, "inv"))));
  CHECK_FALSE(r.ev.actions.state_delta.contains("turn:t"));
  auto within = test::get_existing(e, test::get_req(ref, 0, std::nullopt, "inv"));
  CHECK(within.state.value("turn:t", 0) == 1);
  auto outside = test::get_existing(e, ref);
  CHECK_FALSE(outside.state.contains("turn:t"));
  CHECK_FALSE(outside.state.contains("turn:x"));
  CHECK(outside.state.value("session:s", 0) == 2);
  CHECK(outside.state.value("bg:b", 0) == 3);
  MUST(e.end_invocation(ref, "inv"));
  CHECK_FALSE(
    test::get_existing(e, test::get_req(ref, 0, std::nullopt, "inv")).state.contains("turn:t"));
}

TEST_CASE_TEMPLATE("N1 clients cannot write derived: keys", S, test::memory_store,
                   test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  auto& e = *t;
  auto ref = test::sref("app", "u", "s");
  CHECK_ERR(e.create_session(test::create_req(ref, json{{"derived:x", 1}})),
            errc::invalid_argument);
  MUST(e.create_session(test::create_req(ref)));
  CHECK_ERR(e.append_event(test::append_req(ref, test::make_event(json{{"derived:x", 1}}))),
            errc::invalid_argument);
  CHECK(test::get_existing(e, ref).version == 0);
}
