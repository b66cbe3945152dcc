// SPDX-License-Identifier: Apache-2.0
// State rows lost from a real LMDB store (issue 44): a state row of a
// session, a user or an app that LMDB can no longer reach has no checksum
// to fail, so a read that merges a scope's rows must check them against the
// scope's tally (its row count and the sum of its rows' checksums) and say
// data_corrupt naming the scope, never answer the state without the key;
// verify names the scope too.
#include <doctest/doctest.h>

#include <string>

#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"
#include "store/verify.hpp"
#include "support/lost_rows.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

namespace {

const session_ref lossy = test::sref("app", "u", "s1");
const session_ref other_user = test::sref("app", "v", "s2");

// Two sessions of two users, each with three keys in every scope.
void fill(const std::string& dir) {
  auto e = test::open_store_dir(dir);
  for (auto& ref : {lossy, other_user}) {
    MUST(e->create_session(test::create_req(ref, json{{"k0", 0}, {"k1", 1}, {"user:u0", 0}})));
    test::append_ok(
      *e, ref,
      test::make_event(
        json{
          {"k2", 2}, {"user:u1", 1}, {"user:u2", 2}, {"app:a0", 0}, {"app:a1", 1}, {"app:a2", 2}},
        ref.session_id + "-e1"));
  }
  MUST(e->close());
}

// Replaces the value of row `key` of table `t` with `text`, sealed, as if a
// page of an older copy of the row had taken its place: the seal holds.
void replace_row(const std::string& dir, table t, const std::string& key, const std::string& text) {
  auto kv = open_lmdb_kv(dir, false, std::uint64_t{1} << 30);
  auto w = kv->begin_write();
  REQUIRE(w->get(t, key));
  w->put(t, key, seal(key, text));
  w->commit();
}

std::string skey_of(const session_ref& r) {
  return session_key(r.app_name, r.user_id, r.session_id);
}

verify_report verify_dir(const std::string& dir) {
  auto kv = open_lmdb_kv_readonly(dir);
  auto txn = kv->begin_read();
  return verify_store(*txn);
}

bool mentions(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

bool verify_names(const verify_report& r, const std::string& what) {
  for (auto& m : r.messages)
    if (mentions(m, what))
      return true;
  return false;
}

// Every read of `ref` that merges its state is data_corrupt naming `scope`.
void reads_are_corrupt(engine& e, const session_ref& ref, const std::string& scope) {
  auto text = e.get_session_json(test::get_req(ref));
  REQUIRE(!text.ok());
  CHECK(text.code() == errc::data_corrupt);
  CHECK(mentions(text.err().message, scope));
  auto typed = e.get_session(test::get_req(ref));
  REQUIRE(!typed.ok());
  CHECK(typed.code() == errc::data_corrupt);
}

} // namespace

TEST_CASE("get_session with a lost session state row is data_corrupt, not state without the key") {
  test::temp_dir dir;
  fill(dir.str());
  std::string before_other;
  {
    auto e = test::open_store_dir(dir.str());
    before_other = MUST(e->get_session_json(test::get_req(other_user)));
    MUST(e->close());
  }
  test::lose_row(dir.str(), table::session_state, sub_key(skey_of(lossy), "k1"));
  {
    auto e = test::open_store_dir(dir.str());
    reads_are_corrupt(*e, lossy, "session 'app/u/s1'");
    CHECK(MUST(e->get_session_json(test::get_req(other_user))) == before_other);
    MUST(e->close());
  }
  auto r = verify_dir(dir.str());
  CHECK(r.faults > 0);
  CHECK(verify_names(r, "session 'app/u/s1'"));
}

TEST_CASE("get_session with a lost user: state row is data_corrupt naming the user") {
  test::temp_dir dir;
  fill(dir.str());
  std::string before_other;
  {
    auto e = test::open_store_dir(dir.str());
    before_other = MUST(e->get_session_json(test::get_req(other_user)));
    MUST(e->close());
  }
  test::lose_row(dir.str(), table::user_state, sub_key(user_scope_key("app", "u"), "u1"));
  {
    auto e = test::open_store_dir(dir.str());
    reads_are_corrupt(*e, lossy, "user 'app/u'");
    auto scope = e->get_user_state("app", "u");
    REQUIRE(!scope.ok());
    CHECK(scope.code() == errc::data_corrupt);
    // User v's state is its own: v's session reads as before.
    CHECK(MUST(e->get_session_json(test::get_req(other_user))) == before_other);
    MUST(e->close());
  }
  auto r = verify_dir(dir.str());
  CHECK(r.faults > 0);
  CHECK(verify_names(r, "user 'app/u'"));
}

TEST_CASE("get_session with a lost app: state row is data_corrupt naming the app") {
  test::temp_dir dir;
  fill(dir.str());
  test::lose_row(dir.str(), table::app_state, sub_key("app", "a2"));
  {
    auto e = test::open_store_dir(dir.str());
    reads_are_corrupt(*e, lossy, "app 'app'");
    reads_are_corrupt(*e, other_user, "app 'app'");
    auto scope = e->get_app_state("app");
    REQUIRE(!scope.ok());
    CHECK(scope.code() == errc::data_corrupt);
    MUST(e->close());
  }
  auto r = verify_dir(dir.str());
  CHECK(r.faults > 0);
  CHECK(verify_names(r, "app 'app'"));
}

TEST_CASE("a state row whose sealed value was swapped for another is data_corrupt by the tally") {
  // The row's seal holds (an older copy of the row), so only the scope's
  // checksum sum can tell.
  test::temp_dir dir;
  fill(dir.str());
  replace_row(dir.str(), table::session_state, sub_key(skey_of(lossy), "k1"), "7");
  auto e = test::open_store_dir(dir.str());
  reads_are_corrupt(*e, lossy, "session 'app/u/s1'");
  MUST(e->close());
  CHECK(verify_names(verify_dir(dir.str()), "session 'app/u/s1'"));
}

TEST_CASE("state tallies follow every write: appends, erases, deletes and a user delete verify "
          "clean") {
  test::temp_dir dir;
  fill(dir.str());
  {
    auto e = test::open_store_dir(dir.str());
    // Overwrites, erases and new keys in every scope.
    auto ev =
      test::make_event(json{{"k0", 10}, {"k3", 3}, {"user:u0", 10}, {"app:a0", 10}}, "s1-e2");
    ev.actions.state_remove = {"k1", "user:u1", "app:a1"};
    test::append_ok(*e, lossy, ev);
    auto st = MUST(e->get_session(test::get_req(lossy)));
    REQUIRE(st.has_value());
    CHECK(st->state
          == json{{"k0", 10},
                  {"k2", 2},
                  {"k3", 3},
                  {"user:u0", 10},
                  {"user:u2", 2},
                  {"app:a0", 10},
                  {"app:a2", 2}});
    MUST(e->delete_session(other_user));
    MUST(e->close());
  }
  auto r = verify_dir(dir.str());
  INFO((r.messages.empty() ? std::string() : r.messages.front()));
  CHECK(r.faults == 0);
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->delete_user("app", "v"));
    MUST(e->close());
  }
  auto after = verify_dir(dir.str());
  INFO((after.messages.empty() ? std::string() : after.messages.front()));
  CHECK(after.faults == 0);
}

TEST_CASE("a modify reading a state key damaged out of place is data_corrupt, not a missing key") {
  test::temp_dir dir;
  fill(dir.str());
  // user u's key "u1" becomes "u1\x01": it still sorts between "u1" and
  // "u2", so a lookup of "u1" finds nothing and lands beside it.
  auto key = sub_key(user_scope_key("app", "u"), "u1");
  test::damage_key(dir.str(), table::user_state, key, key + '\x01');
  auto e = test::open_store_dir(dir.str());
  auto bump = [](std::string k) {
    return state_modify{std::move(k), 0, [](const json& v) { return v.get<int>() + 1; }};
  };
  append_request req;
  req.ref = lossy;
  req.ev = test::make_event(json::object(), "bump-u1");
  req.modify = {bump("user:u1")};
  auto r = e->append_event(std::move(req));
  INFO(test::describe(r));
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == errc::data_corrupt);
  CHECK(mentions(r.err().message, "user 'app/u'"));
  // A key that is absent beside intact neighbours is absent: user v's.
  append_request other;
  other.ref = other_user;
  other.ev = test::make_event(json::object(), "bump-new");
  other.modify = {bump("user:new")};
  MUST(e->append_event(std::move(other)));
  MUST(e->close());
}
