// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan write_map
// delete_user and delete_app (semantics X2, X3; store/scope_delete.hpp), on
// both stores: once acknowledged, every session of the user (or app) and its
// shared state is gone for every reader, cached actors included; one change
// tells every watch inside; the rows are purged in steps while creates under
// the scope are refused as unavailable, after which the scope starts empty;
// other users and apps are untouched; verify is clean throughout; and
// appenders racing the delete see their appends either stored-then-deleted
// or refused with not_found, nothing else.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "actors/engine_factory.hpp"
#include "store/keys.hpp"
#include "store/scope_delete.hpp"
#include "store/verify.hpp"
#include "support/change_feed.hpp"
#include "support/store_probe.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace std::chrono_literals;

namespace {

// A session with `n` events, each setting a session key and a user: key.
void load(engine& e, const session_ref& ref, std::size_t n) {
  MUST(e.create_session(test::create_req(ref, json{{"origin", 1}})));
  std::atomic<std::size_t> done{0}, failed{0};
  for (std::size_t i = 0; i < n; ++i)
    e.append_event(
      test::append_req(ref, test::make_event(json{{"k" + std::to_string(i), i}, {"user:last", i}})),
      [&](result<append_result> r) {
        if (!r)
          failed.fetch_add(1);
        done.fetch_add(1);
      });
  REQUIRE(test::eventually([&] { return done.load() == n; }, 60s));
  REQUIRE(failed.load() == 0);
}

// The changes of the watch of `scope` (app, user, session) after `from`.
std::vector<change> changes_of(engine& e, watch_scope scope, const std::string& from,
                               std::string app, std::string user = {}, std::string id = {},
                               std::string prefix = {}) {
  auto w = test::scope_req(scope, std::move(app), std::move(user), std::move(id), false,
                           std::move(prefix));
  if (!from.empty()) // "": an empty store's head; read from the oldest change
    w.from = from;
  return test::read_feed(e, w);
}

std::size_t count_kind(const std::vector<change>& cs, change_kind k) {
  std::size_t n = 0;
  for (auto& c : cs)
    n += c.kind == k;
  return n;
}

} // namespace

TEST_CASE_TEMPLATE("delete_user: every session and the user's state are gone at once, the rows "
                   "go in steps, and other users keep theirs",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  auto big = test::sref("app", "u", "big");
  load(e, big, 1500);
  std::vector<session_ref> small;
  for (int i = 0; i < 3; ++i) {
    small.push_back(test::sref("app", "u", "s" + std::to_string(i)));
    MUST(e.create_session(test::create_req(small.back(), json{{"user:name", "ann"}, {"i", i}})));
    test::append_ok(e, small.back(), test::make_event(json{{"app:shared", i}}));
  }
  auto other = test::sref("app", "v", "kept");
  MUST(e.create_session(test::create_req(other, json{{"user:name", "bob"}})));
  test::append_ok(e, other, test::make_event(json{{"n", 1}}));
  // The user's scope actor and the sessions' actors are live and cache.
  CHECK(test::user_state(e, "app", "u").at("name") == "ann");
  CHECK(test::get_existing(e, small[0]).version == 1);
  auto from = MUST(e.head_cursor());

  MUST(e.delete_user("app", "u"));
  for (auto& ref : small)
    CHECK_FALSE(test::get_maybe(e, ref).has_value());
  CHECK_FALSE(test::get_maybe(e, big).has_value());
  CHECK(test::list_all(e, "app", std::string("u")).empty());
  CHECK(test::session_ids(test::list_all(e, "app")) == std::vector<std::string>{"kept"});
  auto req = test::list_req("app");
  req.include_total = true;
  CHECK(MUST(e.list_sessions(req)).total == 1u);
  CHECK(test::user_state(e, "app", "u").empty());
  auto app = e.append_event(test::append_req(small[0], test::make_event(json{{"n", 2}})));
  REQUIRE_FALSE(app.ok());
  CHECK(app.err().code == errc::not_found);
  test::check_verify(e);

  // One change, for every watch inside the user, whatever it filters.
  auto cs = changes_of(e, watch_scope::session, from, "app", "u", "s1");
  REQUIRE(cs.size() == 1);
  CHECK(cs[0].kind == change_kind::remove_user);
  CHECK(cs[0].app_name == "app");
  CHECK(cs[0].user_id == "u");
  CHECK(cs[0].session_id.empty());
  CHECK(count_kind(changes_of(e, watch_scope::user, from, "app", "u"), change_kind::remove_user)
        == 1);
  CHECK(count_kind(changes_of(e, watch_scope::app, from, "app", {}, {}, "app:shared"),
                   change_kind::remove_user)
        == 1);
  CHECK(changes_of(e, watch_scope::user, from, "app", "v").empty());

  // A create under the user waits for the purge (unavailable), then starts
  // a new, empty user.
  auto again = test::sref("app", "u", "s0");
  // The writer purges on its own thread.
  REQUIRE(test::eventually(
    [&] {
      auto r = e.create_session(test::create_req(again, json{{"fresh", true}}));
      if (r)
        return true;
      REQUIRE(r.err().code == errc::unavailable);
      return false;
    },
    10s, 1ms));
  REQUIRE(test::eventually([&] { return !test::purging(e); }, 30s));
  auto s = test::get_existing(e, again);
  CHECK(s.events.empty());
  CHECK(s.state == json{{"fresh", true}, {"app:shared", 2}});
  CHECK(test::user_state(e, "app", "u").empty());
  CHECK(test::rows_under(e, store::table::events, store::user_scope_key("app", "u") + '\0') == 0);
  // The new session's one state row and its scope's tally row (store format 8).
  CHECK(test::rows_under(e, store::table::session_state, store::user_scope_key("app", "u") + '\0')
        == 2);
  CHECK(test::rows_under(e, store::table::user_state, store::user_scope_key("app", "u") + '\0')
        == 0);
  CHECK(test::get_existing(e, other).version == 1);
  CHECK(test::user_state(e, "app", "v").at("name") == "bob");
  CHECK(test::app_state(e, "app").at("shared") == 2);
  test::check_verify(e);
}

TEST_CASE_TEMPLATE("delete_app: every user's sessions and state and the app's state are gone at "
                   "once; other apps keep theirs",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  for (const char* user : {"u", "v", "w"})
    for (int i = 0; i < 5; ++i) {
      auto ref = test::sref("app", user, "s" + std::to_string(i));
      MUST(e.create_session(test::create_req(ref, json{{"user:u", user}, {"app:a", i}})));
      test::append_ok(e, ref, test::make_event(json{{"n", i}}));
    }
  auto elsewhere = test::sref("other", "u", "s0");
  MUST(e.create_session(test::create_req(elsewhere, json{{"app:a", "kept"}, {"user:u", "kept"}})));
  CHECK(test::app_state(e, "app").at("a") == 4);
  auto from = MUST(e.head_cursor());

  MUST(e.delete_app("app"));
  CHECK(test::list_all(e, "app").empty());
  CHECK(test::list_all(e, "app", std::string("v")).empty());
  CHECK_FALSE(test::get_maybe(e, test::sref("app", "w", "s3")).has_value());
  CHECK(test::app_state(e, "app").empty());
  CHECK(test::user_state(e, "app", "v").empty());
  auto cs = changes_of(e, watch_scope::session, from, "app", "w", "s3");
  REQUIRE(cs.size() == 1);
  CHECK(cs[0].kind == change_kind::remove_app);
  CHECK(cs[0].user_id.empty());
  CHECK(changes_of(e, watch_scope::app, from, "other").empty());
  test::check_verify(e);

  REQUIRE(test::eventually([&] { return !test::purging(e); }, 30s));
  for (auto t2 : {store::table::sessions, store::table::events, store::table::session_state,
                  store::table::user_state, store::table::app_state, store::table::by_update,
                  store::table::by_user, store::table::by_created, store::table::by_user_created,
                  store::table::origins})
    CHECK(test::rows_under(e, t2, std::string("app") + '\0') == 0);
  CHECK(test::get_existing(e, elsewhere).state == json{{"app:a", "kept"}, {"user:u", "kept"}});
  // The app starts again empty.
  auto s = MUST(e.create_session(test::create_req(test::sref("app", "u", "s0"))));
  CHECK(s.state == json::object());
  test::check_verify(e);
}

TEST_CASE_TEMPLATE("delete_user: appenders racing the delete get stored appends or not_found, "
                   "and the store stays consistent",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  constexpr int threads = 4;
  std::vector<session_ref> refs;
  for (int i = 0; i < threads; ++i) {
    refs.push_back(test::sref("app", "u", "s" + std::to_string(i)));
    MUST(e.create_session(test::create_req(refs.back())));
  }
  auto other = test::sref("app", "v", "s");
  MUST(e.create_session(test::create_req(other)));
  std::atomic<bool> go{false};
  std::atomic<int> ok{0}, gone{0}, wrong{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      while (!go.load())
        std::this_thread::yield();
      for (int n = 0; n < 200; ++n) {
        auto r = e.append_event(
          test::append_req(refs[i], test::make_event(json{{"n", n}, {"user:last", n}})));
        if (r)
          ok.fetch_add(1);
        else if (r.err().code == errc::not_found)
          gone.fetch_add(1);
        else
          wrong.fetch_add(1);
        test::append_ok(e, other, test::make_event(json{{"n", n}}));
      }
    });
  go.store(true);
  REQUIRE(test::eventually([&] { return ok.load() >= threads * 10; }));
  MUST(e.delete_user("app", "u"));
  for (auto& th : pool)
    th.join();
  CHECK(wrong.load() == 0);
  CHECK(ok.load() + gone.load() == threads * 200);
  for (auto& ref : refs)
    CHECK_FALSE(test::get_maybe(e, ref).has_value());
  CHECK(test::get_existing(e, other).version == threads * 200u);
  REQUIRE(test::eventually([&] { return !test::purging(e); }, 30s));
  CHECK(test::rows_under(e, store::table::events, store::user_scope_key("app", "u") + '\0') == 0);
  CHECK(test::rows_under(e, store::table::sessions, store::user_scope_key("app", "u") + '\0') == 0);
  test::check_verify(e);
}

TEST_CASE_TEMPLATE("delete_user and delete_app: bad names are refused; a user with nothing is a "
                   "no-op with its change",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  CHECK(e.delete_user("", "u").err().code == errc::invalid_argument);
  CHECK(e.delete_user("app", "").err().code == errc::invalid_argument);
  CHECK(e.delete_user("app", std::string("a\0b", 3)).err().code == errc::invalid_argument);
  CHECK(e.delete_app(std::string(101, 'a')).err().code == errc::too_large);
  auto from = MUST(e.head_cursor());
  MUST(e.delete_user("app", "nobody"));
  auto cs = changes_of(e, watch_scope::all, from, "");
  REQUIRE(cs.size() == 1);
  CHECK(cs[0].kind == change_kind::remove_user);
  REQUIRE(test::eventually([&] { return !test::purging(e); }, 30s));
  MUST(e.create_session(test::create_req(test::sref("app", "nobody", "s"))));
  test::check_verify(e);
}
