// SPDX-License-Identifier: Apache-2.0
// options::app_scope_writes = false (a cluster node's engine): a create or an
// append that writes an app: key, by value, removal or modify, is refused with
// invalid_argument and stores nothing; everything else is served as before.
#include <doctest/doctest.h>

#include "support/test_support.hpp"

namespace {

using namespace agentstate;

state_modify app_add(int n) {
  return state_modify{"app:count", 0, [n](const json& v) { return v.get<int>() + n; }};
}

} // namespace

TEST_CASE_TEMPLATE("app_scope_writes off: app: writes are refused whole, the rest served", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind, [](options& o) { o.app_scope_writes = false; });
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  auto created = e.create_session(test::create_req(ref, json{{"app:x", 1}, {"k", 1}}));
  REQUIRE_FALSE(created.ok());
  CHECK(created.code() == errc::invalid_argument);
  CHECK(created.err().message.find("app:") != std::string::npos);
  CHECK_FALSE(MUST(e.get_session(test::get_req(ref))).has_value());

  MUST(e.create_session(test::create_req(ref, json{{"user:y", 2}, {"k", 1}})));
  auto by_value = e.append_event(test::append_req(ref, test::make_event(json{{"app:x", 1}})));
  CHECK(by_value.code() == errc::invalid_argument);
  auto removal = test::make_event();
  removal.actions.state_remove = {"app:x"};
  CHECK(e.append_event(test::append_req(ref, std::move(removal))).code() == errc::invalid_argument);
  append_request modify;
  modify.ref = ref;
  modify.ev = test::make_event(json{{"k", 2}});
  modify.modify = {app_add(1)};
  CHECK(e.append_event(std::move(modify)).code() == errc::invalid_argument);
  // Nothing of the refused appends was stored.
  auto s = test::get_existing(e, ref);
  CHECK(s.version == 0);
  CHECK(s.state.value("k", 0) == 1);
  CHECK(MUST(e.get_app_state("app")).empty());
  // Session, user: and temp: keys are served as before.
  MUST(e.append_event(
    test::append_req(ref, test::make_event(json{{"k", 3}, {"user:y", 4}, {"temp:z", 5}}))));
  s = test::get_existing(e, ref);
  CHECK(s.version == 1);
  CHECK(s.state.value("k", 0) == 3);
  CHECK(MUST(e.get_user_state("app", "u")).value("y", 0) == 4);
}
