// SPDX-License-Identifier: Apache-2.0
// test-name: invocation_deletes_test
// test-tiers: write_map
// Explicit deletes (S3: null is a value; a delete is actions.state_remove),
// on both stores, through restart and on the wire.
#include <doctest/doctest.h>

#include "support/test_support.hpp"

using namespace agentstate;

namespace {

event remove_event(std::vector<std::string> keys, json delta = json::object(), std::string id = {},
                   std::string inv = "inv-1") {
  auto ev = test::make_event(std::move(delta), std::move(id), std::nullopt, std::move(inv));
  ev.actions.state_remove = std::move(keys);
  return ev;
}

} // namespace

TEST_CASE_TEMPLATE("S3 delete: state_remove deletes session, user: and app: keys", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto a = test::sref("app", "u", "a");
  auto b = test::sref("app", "u", "b");
  MUST(e.create_session(
    test::create_req(a, json{{"k", 1}, {"n", nullptr}, {"user:u", 2}, {"app:g", 3}, {"keep", 4}})));
  MUST(e.create_session(test::create_req(b)));
  // A user-scope actor is live (it caches the scope) before the delete.
  CHECK(MUST(e.get_user_state("app", "u")).value("u", 0) == 2);
  auto r = MUST(e.append_event(test::append_req(a, remove_event({"k", "n", "user:u", "app:g"}))));
  CHECK(r.version == 1);
  CHECK(r.ev.actions.state_remove == std::vector<std::string>{"app:g", "k", "n", "user:u"});
  auto s = test::get_existing(e, a);
  CHECK(s.state == json{{"keep", 4}});
  CHECK_FALSE(test::get_existing(e, b).state.contains("user:u"));
  CHECK(MUST(e.get_user_state("app", "u")) == json::object());
  CHECK(MUST(e.get_app_state("app")) == json::object());
  // The stored event carries the removes.
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].actions.state_remove.size() == 4);
  // Removing a missing key is a no-op that is still recorded.
  auto r2 = MUST(e.append_event(test::append_req(a, remove_event({"never"}))));
  CHECK(r2.ev.actions.state_remove == std::vector<std::string>{"never"});
  CHECK(test::get_existing(e, a).state == json{{"keep", 4}});
}

TEST_CASE_TEMPLATE("S3 delete: set and remove of one key in one event is refused", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto a = test::sref("app", "u", "a");
  MUST(e.create_session(test::create_req(a, json{{"k", 1}})));
  CHECK_ERR(e.append_event(test::append_req(a, remove_event({"k"}, json{{"k", 2}}))),
            errc::invalid_argument);
  CHECK_ERR(e.append_event(test::append_req(a, remove_event({"derived:x"}))),
            errc::invalid_argument);
  CHECK_ERR(e.append_event(test::append_req(a, remove_event({std::string(201, 'k')}))),
            errc::too_large);
  auto s = test::get_existing(e, a);
  CHECK(s.version == 0);
  CHECK(s.state == json{{"k", 1}});
}

TEST_CASE_TEMPLATE("A3 delete: temp: removes affect only the live invocation", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto a = test::sref("app", "u", "a");
  MUST(e.create_session(test::create_req(a)));
  MUST(e.append_event(test::append_req(
    a, test::make_event(json{{"temp:t", 1}, {"temp:u", 2}}, "e1", std::nullopt, "inv"))));
  auto r = MUST(
    e.append_event(test::append_req(a, remove_event({"temp:t"}, json::object(), "e2", "inv"))));
  CHECK(r.ev.actions.state_remove.empty()); // stripped like temp: sets
  auto s = test::get_existing(e, test::get_req(a, std::nullopt, std::nullopt, "inv"));
  CHECK_FALSE(s.state.contains("temp:t"));
  CHECK(s.state.value("temp:u", 0) == 2);
  for (auto& ev : s.events)
    CHECK(ev.actions.state_remove.empty());
}

TEST_CASE("S3 delete survives a restart and is replayed from the stored event") {
  test::temp_dir dir;
  auto opts = test::make_options(test::store_kind::lmdb, dir.str());
  auto a = test::sref("app", "u", "a");
  {
    auto e = std::move(engine::open(opts)).value();
    MUST(e->create_session(test::create_req(a, json{{"k", 1}, {"user:u", 2}})));
    MUST(
      e->append_event(test::append_req(a, remove_event({"k", "user:u"}, json::object(), "del"))));
    MUST(e->close());
  }
  auto e = std::move(engine::open(opts)).value();
  auto s = test::get_existing(*e, a);
  CHECK(s.state == json::object());
  CHECK(s.version == 1);
  // A6: re-appending the delete is idempotent and returns the stored event.
  auto again = MUST(
    e->append_event(test::append_req(a, remove_event({"k", "user:u"}, json::object(), "del"))));
  CHECK(again.version == 1);
  CHECK(again.ev.actions.state_remove == std::vector<std::string>{"k", "user:u"});
}

TEST_CASE("S3 delete on the wire: actions.state_remove round-trips; bad shapes are refused") {
  auto ev = event_from_json(json::parse(
    R"({"id":"e","actions":{"state_delta":{"a":1},"state_remove":["b","user:c"],"x":true}})"));
  REQUIRE(ev.ok());
  CHECK(ev->actions.state_remove == std::vector<std::string>{"b", "user:c"});
  auto back = to_json(*ev);
  CHECK(back["actions"]["state_remove"] == json::array({"b", "user:c"}));
  CHECK(back["actions"]["x"] == true);
  // Omitted when empty, so events without deletes keep their old shape.
  CHECK_FALSE(to_json(test::make_event(json{{"a", 1}}))["actions"].contains("state_remove"));
  CHECK(event_from_json(json::parse(R"({"actions":{"state_remove":"b"}})")).code()
        == errc::invalid_argument);
  CHECK(event_from_json(json::parse(R"({"actions":{"state_remove":[1]}})")).code()
        == errc::invalid_argument);
  CHECK(event_from_json(json::parse(R"({"actions":{"state_remove":null}})")).ok());
}
